// The data path's warm-up (src/data-path-warm-up.ts) on a fresh pair's first message, with and without it
// (issue 43), on the native driver (GPU machine):
//   node test/gpu/measure-warm-up.mjs [--pairs=6] [--sizes=65536,8,4194304] [--driver=native|sim]
//                                     [--first-after=connect|negotiate]
// (--driver defaults to $SMCUDA_TEST_DRIVER, else native; --driver=sim is a dry run of the script: the
// simulated driver never starts the warm-up, so this script starts it itself, as Transport.create does for
// the native driver, and the figures say `emulated`.)
// Per size, `pairs` fresh pairs of processes per setting (warmUp true / false, alternating which goes first,
// so drift hits both): A creates a Transport (device 0) and listens; B creates one (device 1 if there are
// two, else 0) and connects right after create, as an application would, and posts a receive; A sends
// `size` bytes from a fresh device buffer (allocated and filled before it listened, never sent before) as
// soon as its endpoint is there (--first-after=connect, the default), or once `await ep.negotiate()` on it
// resolved (--first-after=negotiate). The warm-up gives way to real work (src/warm-up-yield.ts: B's device
// receive, A's send or negotiate()): each side's report says how it ended (done, yielded, skipped, failed)
// and after which step. Measured at B: Transport.create → first message received, connect →
// first message, the JS thread's busy time over create → first message (event-loop utilization) and its
// longest stall (monitorEventLoopDelay); of the warm-up (B's): when it was done (or yielded) after create,
// its wall time, and the JS thread's busy time meanwhile (which includes whatever else ran then: the
// handshake, the receive), and when what it opened was closed (later, after a yield). Busy time counts the
// progress engine's polling too (src/progress/engine.ts spins a while after each activity), so it is an
// upper bound of the work; busyToSettledMs (create until both the message and the warm-up, its close
// included, are done) with less without is the warm-up's bill to the JS thread. Prints one JSON object
// on stdout (every pair, A's side of it as `a`, and median/min/max per size and setting, with the ratio
// with/without), and a short table on stderr. Not a test.
import { monitorEventLoopDelay, performance } from 'node:perf_hooks';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { serveRequests, startWorkers } from '../../dist/src/cli/worker-protocol.js';

const ROLE = process.env.MEASURE_WARM_UP_ROLE;
const TAG = 1;
const FILL = 0xa5;

/**
 * A watcher of the warm-up (imported now, outside any window): `watch(t0)` resolves once what it opened is
 * closed, with { startMs, doneMs, closedMs, wallMs, busyMs, outcome, steps, paths } (ms after `t0`; doneMs:
 * when it finished, yielded, was skipped or failed), and `eluSettled` (the event-loop utilization at closedMs).
 */
async function warmUpWatcher() {
  const { warmNegotiation } = await import('../../dist/machines/warm-up.js');
  const { warmDataPath } = await import('../../dist/src/data-path-warm-up.js');
  const { Transport } = await import('../../dist/src/transport.js');
  return (t0) =>
    new Promise((resolve) =>
      // Queued after Transport.create's own setImmediate(warmNegotiation().then(warmDataPath)): on the native
      // driver warmDataPath then hands back the run create started; on the simulator this starts it the same way.
      setImmediate(() =>
        warmNegotiation().then(() => {
          const startMs = performance.now() - t0;
          const elu = performance.eventLoopUtilization();
          void warmDataPath((o) => Transport.create(o)).then(async (report) => {
            const doneMs = performance.now() - t0;
            const eluDone = performance.eventLoopUtilization();
            await report.closed;
            resolve({
              startMs,
              doneMs,
              closedMs: performance.now() - t0,
              wallMs: doneMs - startMs,
              busyMs: performance.eventLoopUtilization(eluDone, elu).active,
              outcome: report.outcome,
              steps: report.steps,
              paths: report.paths,
              eluSettled: performance.eventLoopUtilization(),
            });
          });
        }),
      ),
    );
}

async function roleA() {
  const { Transport } = await import('../../dist/src/transport.js');
  let t;
  let sent;
  const link = serveRequests(
    {
      async listen({ driver, path, token, warmUp, bytes, firstAfter }) {
        const watch = warmUp ? await warmUpWatcher() : undefined;
        const t0 = performance.now();
        t = await Transport.create({ driver, device: 0, id: 'measure-a', token, warmUp });
        const createMs = performance.now() - t0;
        const warm = watch?.(t0).then(({ eluSettled, ...w }) => w);
        const src = { ptr: t.driver.memAlloc(bytes), length: bytes };
        t.driver.memsetD8(src.ptr, FILL, bytes);
        sent = new Promise((resolve, reject) =>
          t.once('endpoint', async (ep) => {
            try {
              const endpointMs = performance.now() - t0;
              const negotiation = firstAfter === 'negotiate' ? await ep.negotiate() : null;
              const negotiatedMs = negotiation === null ? null : performance.now() - t0;
              await ep.send(src, { tag: TAG });
              const sentMs = performance.now() - t0;
              resolve({ createMs, endpointMs, negotiation, negotiatedMs, sentMs, warm: (await warm) ?? null });
            } catch (err) {
              reject(err);
            }
          }),
        );
        await t.listen(path);
        return { devices: t.driver.deviceCount() };
      },
      report: () => sent,
    },
    { onExit: () => t?.close() },
  );
  link.ready();
}

async function roleB() {
  const { Transport } = await import('../../dist/src/transport.js');
  let t;
  const link = serveRequests(
    {
      async go({ driver, path, token, warmUp, bytes, device }) {
        const watch = warmUp ? await warmUpWatcher() : undefined;
        const stalls = monitorEventLoopDelay({ resolution: 1 });
        stalls.enable();
        const elu = performance.eventLoopUtilization();
        const t0 = performance.now();
        t = await Transport.create({ driver, device, id: 'measure-b', token, warmUp });
        const warm = watch?.(t0);
        const t1 = performance.now();
        const ep = await t.connect(path);
        const connectedMs = performance.now() - t0;
        const into = { ptr: t.driver.memAlloc(bytes), length: bytes };
        const r = await ep.recv({ tag: TAG, into });
        const firstMs = performance.now() - t0;
        const busyMs = performance.eventLoopUtilization(elu).active;
        stalls.disable();
        const w = await warm;
        const ends = new Uint8Array(2);
        t.driver.memcpyDtoH(ends.subarray(0, 1), into.ptr);
        t.driver.memcpyDtoH(ends.subarray(1), into.ptr + BigInt(bytes - 1));
        if (r.length !== bytes || ends[0] !== FILL || ends[1] !== FILL)
          throw new Error(`received ${r.length} bytes, ends ${ends[0]} ${ends[1]}: not what was sent`);
        const { eluSettled, ...warmUpFigures } = w ?? {};
        return {
          createMs: t1 - t0,
          connectedMs,
          createToFirstMs: firstMs,
          connectToFirstMs: firstMs - (t1 - t0),
          busyMs,
          // Create until both the message and the warm-up (its close included) are done: the JS thread's whole bill.
          busyToSettledMs: w && w.closedMs > firstMs ? performance.eventLoopUtilization(eluSettled, elu).active : busyMs,
          maxStallMs: stalls.max / 1e6,
          path: r.path,
          warm: w ? { ...warmUpFigures, doneBeforeFirst: w.doneMs <= firstMs } : null,
        };
      },
    },
    { onExit: () => t?.close() },
  );
  link.ready();
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const round = (x) => (x === undefined || x === null ? null : +x.toFixed(2));
const spread = (xs) => (xs.length ? { median: round(median(xs)), min: round(Math.min(...xs)), max: round(Math.max(...xs)) } : null);

async function pair(kind, size, warmUp, devices, firstAfter) {
  const dir = mkdtempSync(join(tmpdir(), 'smcuda-warm-up-'));
  const self = fileURLToPath(import.meta.url);
  const stdio = ['ignore', 'inherit', 'pipe'];
  const [a, b] = await startWorkers(self, [
    { name: 'A', env: { MEASURE_WARM_UP_ROLE: 'a' }, stdio },
    { name: 'B', env: { MEASURE_WARM_UP_ROLE: 'b' }, stdio },
  ]);
  try {
    const common = { driver: kind, path: join(dir, 'a.sock'), token: randomBytes(16).toString('hex'), warmUp, bytes: size };
    const { devices: n } = await a.call('listen', { ...common, firstAfter });
    const [bFig, aFig] = await Promise.all([b.call('go', { ...common, device: (devices ?? n) > 1 ? 1 : 0 }), a.call('report')]);
    return { n, b: bFig, a: aFig };
  } finally {
    await Promise.all([a.exit(), b.exit()]);
    rmSync(dir, { recursive: true, force: true });
  }
}

async function launch() {
  const { values } = parseArgs({
    options: {
      driver: { type: 'string', default: process.env.SMCUDA_TEST_DRIVER ?? 'native' },
      pairs: { type: 'string', default: '6' },
      sizes: { type: 'string', default: '65536,8,4194304' },
      'first-after': { type: 'string', default: 'connect' },
    },
  });
  const kind = values.driver;
  const pairs = Number(values.pairs);
  const sizes = values.sizes.split(',').map(Number);
  const firstAfter = values['first-after'];
  if (kind !== 'native' && kind !== 'sim') throw new Error(`--driver must be native or sim, got ${kind}`);
  if (firstAfter !== 'connect' && firstAfter !== 'negotiate') throw new Error(`--first-after must be connect or negotiate, got ${firstAfter}`);
  if (!(pairs >= 1) || sizes.some((s) => !(s >= 1))) throw new Error('--pairs and --sizes must be positive numbers');
  if (kind === 'native') {
    const { NativeCudaDriver } = await import('../../dist/src/cuda/native-driver.js');
    const status = new NativeCudaDriver().status();
    if (!status.available) {
      console.log(JSON.stringify({ available: false, reason: status.reason }));
      return;
    }
  }
  let devices;
  const trials = [];
  for (let i = 0; i < pairs; i++) {
    for (const size of sizes) {
      for (const warmUp of i % 2 === 0 ? [true, false] : [false, true]) {
        const r = await pair(kind, size, warmUp, devices, firstAfter);
        devices = r.n;
        trials.push({ size, warmUp, firstAfter, order: i, ...r.b, a: r.a });
      }
    }
  }
  const metrics = ['createToFirstMs', 'connectToFirstMs', 'busyMs', 'busyToSettledMs', 'maxStallMs'];
  const summary = sizes.map((size) => {
    const per = {};
    for (const warmUp of [true, false]) {
      const ts = trials.filter((t) => t.size === size && t.warmUp === warmUp);
      const s = Object.fromEntries(metrics.map((m) => [m, spread(ts.map((t) => t[m]))]));
      s.paths = Object.fromEntries([...new Set(ts.map((t) => t.path))].map((p) => [p, ts.filter((t) => t.path === p).length]));
      if (warmUp) {
        const ws = ts.map((t) => t.warm).filter(Boolean);
        const ended = (outcome) => ws.filter((w) => w.outcome === outcome).length;
        s.warmUp = {
          doneAfterCreateMs: spread(ws.map((w) => w.doneMs)),
          closedAfterCreateMs: spread(ws.map((w) => w.closedMs)),
          wallMs: spread(ws.map((w) => w.wallMs)),
          busyMs: spread(ws.map((w) => w.busyMs)),
          doneBeforeFirst: ws.filter((w) => w.doneBeforeFirst).length,
          done: ended('done'),
          yielded: ended('yielded'),
          skipped: ended('skipped'),
          failed: ended('failed'),
          // B's last step before it yielded, counted: how far it got.
          yieldedAfter: Object.fromEntries(
            [...new Set(ws.filter((w) => w.outcome === 'yielded').map((w) => w.steps.at(-1) ?? 'nothing'))].map((st) => [
              st,
              ws.filter((w) => w.outcome === 'yielded' && (w.steps.at(-1) ?? 'nothing') === st).length,
            ]),
          ),
        };
      }
      per[warmUp ? 'with' : 'without'] = s;
    }
    const ratio = Object.fromEntries(metrics.slice(0, 4).map((m) => [m, round(per.with[m].median / per.without[m].median)]));
    return { size, with: per.with, without: per.without, ratioWithOverWithout: ratio };
  });
  const out = { driver: kind, emulatedWarmUp: kind !== 'native', firstAfter, devices, pairs, sizes, summary, trials };
  console.log(JSON.stringify(out, (_k, v) => (typeof v === 'number' && !Number.isInteger(v) ? round(v) : v), 1));
  const row = (cells) => cells.map((c, i) => String(c).padStart(i === 0 ? 8 : 12)).join(' ');
  const lines = [
    `first message at B, sent after ${firstAfter}, median ms over ${pairs} fresh pairs each (${kind} driver${kind === 'native' ? '' : ', warm-up emulated'}, ${devices} device(s))`,
  ];
  lines.push(row(['bytes', 'warmUp', 'create→1st', 'connect→1st', 'busy→1st', 'busy→settled', 'max stall', 'warm-up wall', 'warm busy', 'yielded']));
  for (const s of summary) {
    for (const k of ['with', 'without']) {
      const v = s[k];
      lines.push(
        row([
          s.size,
          k,
          v.createToFirstMs.median,
          v.connectToFirstMs.median,
          v.busyMs.median,
          v.busyToSettledMs.median,
          v.maxStallMs.median,
          v.warmUp?.wallMs?.median ?? '-',
          v.warmUp?.busyMs?.median ?? '-',
          v.warmUp ? `${v.warmUp.yielded}/${pairs}` : '-',
        ]),
      );
    }
    const r = s.ratioWithOverWithout;
    lines.push(row([s.size, 'ratio', r.createToFirstMs, r.connectToFirstMs, r.busyMs, r.busyToSettledMs, '', '', '', '']));
  }
  console.error(lines.join('\n'));
}

await (ROLE === 'a' ? roleA() : ROLE === 'b' ? roleB() : launch());
