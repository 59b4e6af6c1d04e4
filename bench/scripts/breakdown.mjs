// Receiver per-message cost breakdown while streaming: node bench/scripts/breakdown.mjs (copied as run from .gpu/breakdown.mjs; run from the repository root)
const { Transport } = await import(process.env.DIST ? process.env.DIST + '/src/index.js' : '../../dist/src/index.js');
import { mkdtempSync, chmodSync } from 'node:fs';
import { fork } from 'node:child_process';
const SIZE = Number(process.env.SIZE ?? 1 << 20), W = Number(process.env.W ?? 8), N = Number(process.env.N ?? 4000);
const DRV = process.env.DRV ?? 'native';
if (process.argv[2] === 'child') {
  const b = await Transport.create({ driver: DRV, device: Number(process.env.DB ?? 1), id: 'b' });
  const eb = await b.connect(process.argv[3]);
  const acc = new Map(); let on = false;
  const timed = (obj, name, label = name) => {
    const o = obj[name].bind(obj);
    obj[name] = function (...a) { if (!on) return o(...a); const t0 = performance.now(); try { return o(...a); } finally { const e = acc.get(label) ?? [0, 0]; e[0] += performance.now() - t0; e[1]++; acc.set(label, e); } };
  };
  const d = b.driver;
  for (const m of ['memcpyAsync', 'eventRecord', 'eventQuery']) timed(d, m, 'driver.' + m);
  timed(eb, 'deliverRget'); timed(eb, 'copyRget'); timed(eb, 'finishRget'); timed(eb, 'sendFrame'); timed(eb.pool, 'lookup', 'pool.lookup');
  timed(eb, 'dispatch');
  const gw = eb.gpu(); timed(gw, 'whenDone'); timed(gw, 'pollGpu');
  const ch = eb.channel; timed(ch, 'sendParts', 'channel.sendParts'); timed(ch, 'poll', 'channel.poll(all frames)');
  ch.off('frame', eb.onFrame); const of = eb.onFrame; const wrapped = { f: of }; timed(wrapped, 'f', 'endpoint.onFrame'); ch.on('frame', (x) => wrapped.f(x));
  const buf = d.memAlloc(SIZE * W);
  const run = async (count) => { const fl = []; for (let i = 0; i < count; i++) { if (i >= W) await fl[i - W]; fl[i] = eb.recv({ tag: 4, into: { ptr: buf + BigInt((i % W) * SIZE), length: SIZE } }); } await Promise.all(fl); };
  await run(1000);
  on = true; const t0 = performance.now(); await run(N); const wall = performance.now() - t0; on = false;
  console.log(`receiver: ${(wall * 1000 / N).toFixed(2)} µs per message wall`);
  for (const [k, [t, n]] of [...acc].sort((x, y) => y[1][0] - x[1][0])) console.log(`  ${k.padEnd(28)} ${(t * 1000 / N).toFixed(2).padStart(7)} µs/msg  (${(n / N).toFixed(2)} calls/msg, ${(t * 1000 / n).toFixed(2)} µs/call)`);
  await new Promise((r) => setTimeout(r, 200));
  await b.close(); process.exit(0);
} else {
  const dir = mkdtempSync('/tmp/st-'); chmodSync(dir, 0o700);
  const a = await Transport.create({ driver: DRV, device: 0, id: 'a' });
  const epA = new Promise((r) => a.once('endpoint', r));
  await a.listen(dir + '/a.sock');
  const child = fork(new URL(import.meta.url).pathname, ['child', dir + '/a.sock'], { env: process.env });
  const ea = await epA;
  const buf = a.driver.memAlloc(SIZE * W);
  const run = async (count) => { const fl = []; for (let i = 0; i < count; i++) { if (i >= W) await fl[i - W]; fl[i] = ea.send({ ptr: buf + BigInt((i % W) * SIZE), length: SIZE }, { tag: 4 }); } await Promise.all(fl); };
  await run(1000);
  const t0 = performance.now(); await run(N); const t1 = performance.now();
  console.log(`send: ${(SIZE * N / (t1 - t0) / 1e6).toFixed(1)} GB/s window ${W}`);
  await new Promise((r) => child.once('exit', r));
  await a.close(); process.exit(0);
}
