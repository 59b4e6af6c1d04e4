// Where the time of a streamed message goes: one message's way round the window, step by step,
// with the GPU's own timeline. This process sends from GPU0, a forked child receives on GPU1, as
// stream.mjs. After WARM messages, TN messages are traced:
//   sender:   when each send is called, when a FIN or FINS frame comes off the ring, and when the
//             streaming loop sees the send complete;
//   receiver: when each RGET comes off the ring (by its seq), each copy launch (one batch or one
//             copy; timing events recorded just before and just after it on the same stream give
//             the GPU's start and end of it), when the spinner's cuEventQuery first finds the
//             batch's own completion event done, and when the FIN or FINS for it is written.
// Host times are process.hrtime (CLOCK_MONOTONIC: one clock for both processes). GPU times are
// placed on it by the one offset that has no batch seen done before the GPU finished it.
// Prints the mean of each step and of the GPU's idle time between batches, and a few cycles in full.
//
// Environment: DIST, SIZE (1048576), W (8), WARM (40000), TN (3000), DRV (native), LABEL, SHOW (24).
import { mkdtempSync, chmodSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL, fileURLToPath } from 'node:url';
import { fork } from 'node:child_process';

const lib = process.env.DIST
  ? pathToFileURL(resolve(process.env.DIST, 'src/index.js')).href
  : new URL('../../dist/src/index.js', import.meta.url).href;
const { Transport } = await import(lib);

const SIZE = Number(process.env.SIZE ?? 1 << 20);
const W = Number(process.env.W ?? 8);
const WARM = Number(process.env.WARM ?? 40000);
const TN = Number(process.env.TN ?? 3000);
const SHOW = Number(process.env.SHOW ?? 24);
const now = () => Number(process.hrtime.bigint()) / 1e6; // ms, CLOCK_MONOTONIC: the same clock in both processes
const FRAME = { RGET: 11, FIN: 12, FINS: 14 };
const u32 = (b, at) => b[at] | (b[at + 1] << 8) | (b[at + 2] << 16) | (b[at + 3] << 24) >>> 0;

if (process.argv[2] === 'child') {
  const b = await Transport.create({ driver: process.env.DRV ?? 'native', device: 1, id: 'b' });
  const d = b.driver;
  const T = { on: false, nb: 0, lb: [], le: [], n: [], det: [], evS: [], evE: [], byEvent: new Map(), next: -1 };
  for (let i = 0; i < TN; i++) {
    T.evS.push(d.eventCreate({}));
    T.evE.push(d.eventCreate({}));
  }
  const traced = (launch) => (stream, n) => {
    const i = T.nb++;
    d.eventRecord(T.evS[i], stream);
    T.lb[i] = now();
    launch();
    T.le[i] = now();
    d.eventRecord(T.evE[i], stream);
    T.n[i] = n;
    T.next = i; // GpuWork records the batch's completion event next
  };
  const mb = d.memcpyBatchAsync.bind(d);
  d.memcpyBatchAsync = (a, s, z, n, st) => (T.on ? traced(() => mb(a, s, z, n, st))(st, n) : mb(a, s, z, n, st));
  const mc = d.memcpyAsync.bind(d);
  d.memcpyAsync = (a, s, z, st) => (T.on ? traced(() => mc(a, s, z, st))(st, 1) : mc(a, s, z, st));
  const er = d.eventRecord.bind(d);
  d.eventRecord = (e, st) => {
    er(e, st);
    if (T.next >= 0 && e !== T.evE[T.next] && e !== T.evS[T.next]) {
      T.byEvent.set(e, T.next);
      T.next = -1;
    }
  };
  const eq = d.eventQuery.bind(d);
  d.eventQuery = (e) => {
    const r = eq(e);
    if (r && T.byEvent.size > 0) {
      const i = T.byEvent.get(e);
      if (i !== undefined) {
        T.det[i] = now();
        T.byEvent.delete(e);
      }
    }
    return r;
  };
  const eb = await b.connect(process.argv[3]);
  const rgetAt = new Map(); // seq → when the RGET came off the ring
  const finW = []; // when each FIN/FINS frame was written
  const ch = eb.channel; // the endpoint's ShmChannel (a private field: this is a diagnostic)
  ch.prependListener('frame', (f) => {
    if (T.on && f[2] === FRAME.RGET) rgetAt.set(u32(f, 8), now());
  });
  const cs = ch.send.bind(ch);
  ch.send = (f) => {
    if (T.on && (f[2] === FRAME.FIN || f[2] === FRAME.FINS)) finW.push(now());
    return cs(f);
  };
  const buf = d.memAlloc(SIZE * W);
  const ro = [...Array(W)].map((_, k) => ({ tag: 4, into: { ptr: buf + BigInt(k * SIZE), length: SIZE } }));
  const run = async (count) => {
    const fl = [];
    for (let i = 0; i < count; i++) {
      const k = i % W;
      if (i >= W) await fl[k];
      fl[k] = eb.recv(ro[k]);
    }
    await Promise.all(fl);
  };
  await run(WARM);
  T.on = true;
  await run(TN);
  T.on = false;
  const nb = Math.min(T.nb, TN);
  // GPU times (ms) from the first start event
  const gs = [], ge = [];
  for (let i = 0; i < nb; i++) {
    d.eventSynchronize(T.evE[i]);
    gs.push(d.eventElapsedTime(T.evS[0], T.evS[i]));
    ge.push(d.eventElapsedTime(T.evS[0], T.evE[i]));
  }
  process.send({ nb, lb: T.lb.slice(0, nb), le: T.le.slice(0, nb), n: T.n.slice(0, nb), det: T.det.slice(0, nb), gs, ge, rgetAt: [...rgetAt], finW });
  await new Promise((r) => setTimeout(r, 100));
  await b.close();
  process.exit(0);
} else {
  const dir = mkdtempSync('/tmp/tl-');
  chmodSync(dir, 0o700);
  const a = await Transport.create({ driver: process.env.DRV ?? 'native', device: 0, id: 'a' });
  const epA = new Promise((r) => a.once('endpoint', r));
  await a.listen(dir + '/a.sock');
  const child = fork(fileURLToPath(import.meta.url), ['child', dir + '/a.sock'], { env: process.env });
  const msg = new Promise((r) => child.once('message', r));
  const ea = await epA;
  const buf = a.driver.memAlloc(SIZE * W);
  const sl = [...Array(W)].map((_, k) => ({ ptr: buf + BigInt(k * SIZE), length: SIZE }));
  const so = { tag: 4 };
  const sendT = new Float64Array(TN);
  const doneT = new Float64Array(TN);
  const seqOf = new Float64Array(TN);
  const finA = []; // when each FIN/FINS frame came off the ring
  let tracing = false;
  ea.channel.prependListener('frame', (f) => {
    if (tracing && (f[2] === FRAME.FIN || f[2] === FRAME.FINS)) finA.push(now());
  });
  const run = async (count, trace) => {
    const fl = [];
    for (let i = 0; i < count; i++) {
      const k = i % W;
      if (i >= W) {
        await fl[k];
        if (trace) doneT[i - W] = now();
      }
      if (trace) {
        seqOf[i] = ea.nextSeq; // a private field: the seq this send gets
        sendT[i] = now();
      }
      fl[k] = ea.send(sl[k], so);
    }
    for (let i = Math.max(0, count - W); i < count; i++) {
      await fl[i % W];
      if (trace) doneT[i] = now();
    }
  };
  await run(WARM, false);
  tracing = true;
  const t0 = now();
  await run(TN, true);
  tracing = false;
  const ms = now() - t0;
  const r = await msg;
  // GPU → host clock: the offset that has no batch seen done before the GPU finished it
  let off = Infinity;
  for (let i = 0; i < r.nb; i++) if (r.det[i] > 0) off = Math.min(off, r.det[i] - r.ge[i]);
  const gs = r.gs.map((g) => g + off), ge = r.ge.map((g) => g + off);
  // message → batch (batches take messages in order)
  const batchOf = new Int32Array(TN).fill(-1);
  for (let i = 0, m = 0; i < r.nb; i++) for (let j = 0; j < r.n[i] && m < TN; j++) batchOf[m++] = i;
  // batch → its FIN frame (the first written after it was seen done) → that frame's arrival
  const finOf = new Float64Array(r.nb), finArr = new Float64Array(r.nb);
  for (let i = 0, w = 0, a = 0; i < r.nb; i++) {
    while (w < r.finW.length && r.finW[w] < r.det[i]) w++;
    if (w >= r.finW.length) break;
    finOf[i] = r.finW[w];
    while (a < finA.length && finA[a] < r.finW[w]) a++;
    if (a < finA.length) finArr[i] = finA[a];
  }
  const rgetAt = new Map(r.rgetAt);
  const us = (x) => (x * 1000).toFixed(1);
  const mean = (xs) => (xs.length ? xs.reduce((s, x) => s + x, 0) / xs.length : NaN);
  // per message, round the window: send → RGET off the ring → its batch launched → GPU → seen → FIN written → FIN off the ring → the loop sees it → next send into the slot
  const steps = {
    'sender: send called → receiver: RGET off the ring': [],
    'receiver: RGET → its batch launch begins': [],
    'receiver: launch call': [],
    'GPU: launched → starts it': [],
    'GPU: runs the batch': [],
    'receiver: GPU done → sees it': [],
    'receiver: sees it → FIN written': [],
    'FIN written → sender: FIN off the ring': [],
    'sender: FIN → the loop sees the send done': [],
    'sender: loop → next send into the slot': [],
  };
  const lo = Math.floor(TN / 10), hi = TN - W - Math.floor(TN / 10);
  for (let m = lo; m < hi; m++) {
    const i = batchOf[m];
    const got = rgetAt.get(seqOf[m] >>> 0);
    if (i < 0 || !(r.det[i] > 0) || !(finArr[i] > 0) || got === undefined) continue;
    const v = [got - sendT[m], r.lb[i] - got, r.le[i] - r.lb[i], gs[i] - r.le[i], ge[i] - gs[i], r.det[i] - ge[i], finOf[i] - r.det[i], finArr[i] - finOf[i], doneT[m] - finArr[i], sendT[m + W] - doneT[m]];
    Object.values(steps).forEach((xs, k) => xs.push(v[k]));
  }
  let busy = 0, idle = 0, gaps = 0;
  const b0 = batchOf[lo], b1 = batchOf[hi];
  for (let i = b0; i < b1; i++) {
    busy += ge[i] - gs[i];
    const g = gs[i + 1] - ge[i];
    if (g > 0) { idle += g; gaps++; }
  }
  const hist = {};
  for (let i = b0; i < b1; i++) hist[r.n[i]] = (hist[r.n[i]] ?? 0) + 1;
  console.log(`${process.env.LABEL ?? 'dist'} ${SIZE >= 1 << 20 ? SIZE / 2 ** 20 + 'MiB' : SIZE + 'B'} W=${W}: ${(SIZE * TN / ms / 1e6).toFixed(1)} GB/s over ${TN} traced messages; copies per launch ${Object.entries(hist).map(([k, v]) => k + ':' + v).join(',')}`);
  console.log(`  GPU busy ${(100 * busy / (busy + idle)).toFixed(1)} %, idle ${us(idle / (b1 - b0))} µs a batch (${gaps} gaps in ${b1 - b0} batches)`);
  for (const [k, v] of Object.entries(steps)) console.log(`  ${k.padEnd(52)} ${us(mean(v)).padStart(6)} µs`);
  console.log(`  (${steps['GPU: runs the batch'].length} messages; a window's round is the sum: ${us(Object.values(steps).reduce((t, xs) => t + mean(xs), 0))} µs)`);
  console.log(`  cycles (µs from the first shown launch): batch n | launch | GPU start–end | seen`);
  const base = r.lb[b0 + 5];
  for (let i = b0 + 5; i < Math.min(b1, b0 + 5 + SHOW); i++) {
    console.log(`    ${String(i - b0).padStart(4)} ${r.n[i]} | ${us(r.lb[i] - base).padStart(7)} | ${us(gs[i] - base).padStart(7)}–${us(ge[i] - base).padStart(7)} | ${us(r.det[i] - base).padStart(7)}`);
  }
  await new Promise((res) => child.once('exit', res));
  await a.close();
  process.exit(0);
}
