/**
 * Close and peer loss while GPU work is in flight (issue 24, "the step" and
 * its items 4 and 5), on the simulated driver: a fast-check scheduler orders
 * the completion of the copies (they take a simulated 25 ms), the close of
 * the receiving transport and the loss of the sending one (its orderly close,
 * as seen by the peer), for RGET of legacy memory (with and without the
 * sender's IPC event to wait for) and of pool memory (a descriptor key), and
 * staging, while a third pair's transfer must land untouched. Every receive
 * gets a new device buffer (no `into`), so that one fails with a copy into
 * its target in flight.
 *
 * Asserted in every ordering:
 *  - nothing is released before the GPU work using it completed: no event
 *    destroyed while a completion wait queries it, no pinned ring
 *    unregistered, no peer mapping (legacy handle, imported pool pointer)
 *    closed and no receive's new buffer freed with copies queued
 *    (SimulatedCudaDriver.lifetimeViolations);
 *  - every send and receive settles, and a receive that resolves holds the bytes sent;
 *  - nothing leaks: once everything is closed and the GPU idle, no event,
 *    host registration, peer mapping or new receive buffer (but those the
 *    receives resolved with, the caller's) is left, and no GPU hold.
 *
 * The second property does the same for what the GPU runtime releases
 * beside the data paths (issue 43): persistent transfers with eager starts
 * in flight, a watchdog tick reading their flag blocks, and a communicator's
 * collectives in flight, against the close of either transport and of
 * either rank's communicator. Every operation settles, nothing is released
 * under the GPU, and once all is closed and idle no event, registration or
 * device byte (but the caller's own buffers) is left.
 */
import { fc, test } from '@fast-check/vitest';
import { describe, expect } from 'vitest';
import type { DeviceBuffer } from '../../../src/buffers.js';
import type { Received } from '../../../src/endpoint.js';
import { allocDemoMemory } from '../../../src/cli/demo-memory.js';
import type { Watchdog } from '../../../src/persistent/watchdog.js';
import { makeWorld } from '../../helpers/comm-world.js';
import { deviceWith, makePair, type Pair, randomBytes, reach, readDevice, sameBytes } from '../../helpers/transport-pair.js';

const SIZE = 256 << 10;
const COPY_MS = 25;
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

interface Flight {
  name: string;
  want: Uint8Array;
  recv: Promise<Received>;
  send: Promise<void>;
  pair: Pair;
}

/** A pair settled OK (or BAD with `ipc: false`), its copies then slowed down. */
async function readyPair(ipc: boolean): Promise<Pair> {
  const pair = await makePair({ simA: { env: {} }, simB: { env: {} }, ...(ipc ? {} : { a: { negotiation: { ipc: false } } }) });
  const warm = deviceWith(pair.a.driver, randomBytes(SIZE, 1));
  const r = pair.b.ep.recv({ tag: 1 });
  await pair.a.ep.send(warm, { tag: 1 });
  const got = await r;
  if ('ptr' in got.data) pair.b.driver.memFree((got.data as DeviceBuffer).ptr);
  if (ipc) await reach(pair.a.ep, 'OK');
  pair.a.driver.memFree(warm.ptr);
  for (const d of [pair.a.driver, pair.b.driver]) d.inject({ copyDelayMs: COPY_MS });
  return pair;
}

function start(pair: Pair, name: string, seed: number, withStream: boolean, pool = false): Flight {
  const want = randomBytes(SIZE, seed);
  // Filled at once (a slow synchronous copy would block the event loop past the other flights' copies).
  pair.a.driver.inject({ copyDelayMs: 0 });
  let src: DeviceBuffer;
  if (pool) {
    // Pool memory (a descriptor key: FD_POOL, FD_OFFER and its descriptor first); freed with the sender's driver.
    src = allocDemoMemory(pair.a.driver, 'pool').alloc(SIZE).view(SIZE);
    pair.a.driver.memcpyHtoD(src.ptr, want);
  } else src = deviceWith(pair.a.driver, want);
  pair.a.driver.inject({ copyDelayMs: COPY_MS });
  const recv = pair.b.ep.recv({ tag: seed });
  let stream: bigint | undefined;
  if (withStream) {
    // The data is ready once this stream's (slow) work is done: the receiver waits on the sender's IPC event.
    stream = pair.a.driver.streamCreate();
    for (let k = 0; k < 2; k++) pair.a.driver.memsetD8Async(src.ptr + BigInt(SIZE - 1), want[SIZE - 1]!, 1, stream);
  }
  const send = pair.a.ep.send(src, { tag: seed, ...(stream !== undefined ? { stream } : {}) });
  recv.catch(() => {});
  send.catch(() => {});
  return { name, want, recv, send, pair };
}

/** How a promise ended (or 'pending' after `ms`). */
async function outcome<T>(p: Promise<T>, ms: number): Promise<{ ok: true; value: T } | { ok: false; err: unknown } | 'pending'> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<'pending'>((r) => (timer = setTimeout(() => r('pending'), ms)));
  try {
    return await Promise.race([
      p.then(
        (value) => ({ ok: true as const, value }),
        (err: unknown) => ({ ok: false as const, err }),
      ),
      late,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

describe('close and peer loss during GPU work in flight', () => {
  test.prop([fc.scheduler()], { numRuns: 6, timeout: 20_000 })(
    'in any order of completion, close and peer loss: nothing released under the GPU, every operation settles, nothing leaks',
    async (s) => {
      const rget = await readyPair(true);
      const staged = await readyPair(false);
      const bystander = await readyPair(true);
      const pairs = [rget, staged, bystander];
      /** Bytes of the buffers the receives resolved with, per receiving driver: the caller's, not a leak. */
      const delivered = new Map<Pair, number>();
      try {
        const flights = [
          start(rget, 'rget', 11, false),
          start(rget, 'rget+event', 12, true),
          start(rget, 'rget pool', 16, false, true),
          start(staged, 'staging', 13, false),
          start(staged, 'staging+stream', 14, true),
        ];
        const untouched = start(bystander, 'bystander', 15, false);
        // Each step of time lets the GPU complete about half a copy: the closes
        // land before, during or after the copies (and the staged chunks' two
        // legs), in whatever order the scheduler picks.
        const actions: Array<[string, () => Promise<void>]> = [
          ['rget: receiver closes', () => rget.b.transport.close()],
          ['rget: sender lost', () => rget.a.transport.close()],
          ['staging: receiver closes', () => staged.b.transport.close()],
          ['staging: sender lost', () => staged.a.transport.close()],
          ['time passes', () => sleep(COPY_MS / 2)],
          ['time passes', () => sleep(COPY_MS / 2)],
          ['time passes', () => sleep(COPY_MS)],
          ['time passes', () => sleep(COPY_MS)],
        ];
        await sleep(3); // the frames are through: copies (and the receiver's wait for the sender's event) are in flight
        // The scheduler picks which action goes next; each runs to its end before the next starts.
        let running: Promise<void> = Promise.resolve();
        for (const [what, act] of actions) void s.schedule(Promise.resolve(what)).then(() => (running = act()));
        while (s.count() > 0) {
          await s.waitOne();
          await new Promise<void>((r) => setImmediate(r));
          await running;
        }

        for (const f of [...flights, untouched]) {
          const [r, snd] = await Promise.all([outcome(f.recv, 5_000), outcome(f.send, 5_000)]);
          expect(r, `${f.name}: receive settles`).not.toBe('pending');
          expect(snd, `${f.name}: send settles`).not.toBe('pending');
          if (r !== 'pending' && r.ok) {
            const data = r.value.data;
            const got = 'ptr' in data ? readDevice(f.pair.b.driver, data as DeviceBuffer) : data;
            expect(sameBytes(got, f.want), `${f.name}: the bytes received are the bytes sent`).toBe(true);
            if (f.name === 'rget pool') expect(r.value.path, 'pool memory goes by RGET of a descriptor key').toBe('rget-fd');
            if ('ptr' in data) delivered.set(f.pair, (delivered.get(f.pair) ?? 0) + data.length);
          }
        }
        const b = await outcome(untouched.recv, 0);
        expect(b !== 'pending' && b.ok, 'the bystander pair is not disturbed').toBe(true);

        for (const p of pairs) await p.a.transport.close().then(() => p.b.transport.close());
        await sleep(4 * COPY_MS); // the copies still in flight complete; their owners then release what they held
        for (const p of pairs) {
          expect(p.b.driver.allocatedBytes, 'device memory left on the receiver (but the buffers delivered)').toBe(delivered.get(p) ?? 0);
          for (const [side, d] of [
            ['sender', p.a.driver],
            ['receiver', p.b.driver],
          ] as const) {
            expect(d.lifetimeViolations, `${side}: released while the GPU used it`).toEqual([]);
            expect(d.liveRegistrations, `${side}: host registrations left`).toBe(0);
            expect(d.liveEvents, `${side}: events left`).toBe(0);
          }
          expect(p.b.ep.stats().cache.openMappings, 'peer mappings left').toBe(0);
        }
      } finally {
        for (const p of pairs) await p.close().catch(() => {});
      }
    },
  );
});

function watchdogOf(t: Pair['a']['transport']): Watchdog {
  return (t as unknown as { watchdog: Watchdog }).watchdog;
}

describe('close during persistent transfers, a watchdog tick and collectives in flight', () => {
  test.prop([fc.scheduler()], { numRuns: 4, timeout: 30_000 })(
    'in any order of completion and close: nothing released under the GPU, every operation settles, nothing leaks',
    async (s) => {
      const persistent = { persistent: { timeoutMs: 400 } };
      const pt = await makePair({ a: persistent, b: persistent, simA: { env: {} }, simB: { env: {} } });
      const world = await makeWorld(2);
      const n = 4096;
      const src = deviceWith(pt.a.driver, randomBytes(n, 21));
      const dst = deviceWith(pt.b.driver, new Uint8Array(n));
      const bufs = world.sides.map((side, r) => deviceWith(side.driver, randomBytes(4 * 1024, 30 + r)));
      try {
        const [ra, rb] = await Promise.all([pt.a.ep.register(src), pt.b.ep.register(dst)]);
        const [ta, tb] = await Promise.all([pt.a.ep.persistent(ra, { role: 'send', length: n }), pt.b.ep.persistent(rb, { role: 'recv', length: n })]);
        const sa = pt.a.driver.streamCreate();
        const sb = pt.b.driver.streamCreate();
        for (const d of [pt.a.driver, pt.b.driver, ...world.sides.map((x) => x.driver)]) d.inject({ copyDelayMs: COPY_MS });
        // Eager starts (their copies slow), a watchdog tick reading each flag block, and one allreduce per rank.
        for (let k = 0; k < 2; k++) {
          ta.start(sa);
          tb.start(sb);
        }
        const ticks = [pt.a.transport, pt.b.transport].map((t) => watchdogOf(t).tickNow());
        const calls = world.comms.map((c, r) => c.allreduce({ send: bufs[r]!, count: 1024, dtype: 'f32', op: 'sum' }));
        for (const c of calls) c.catch(() => {});
        const actions: Array<[string, () => Promise<void>]> = [
          ['persistent: sender transport closes', () => pt.a.transport.close()],
          ['persistent: receiver transport closes', () => pt.b.transport.close()],
          ['collectives: rank 0 closes', () => world.comms[0]!.close()],
          ['collectives: rank 1 closes', () => world.comms[1]!.close()],
          ['time passes', () => sleep(COPY_MS / 2)],
          ['time passes', () => sleep(COPY_MS)],
          ['time passes', () => sleep(COPY_MS)],
        ];
        let running: Promise<void> = Promise.resolve();
        for (const [what, act] of actions) void s.schedule(Promise.resolve(what)).then(() => (running = act()));
        while (s.count() > 0) {
          await s.waitOne();
          await new Promise<void>((r) => setImmediate(r));
          await running;
        }

        for (const [r, c] of calls.entries()) expect(await outcome(c, 15_000), `rank ${r}'s allreduce settles`).not.toBe('pending');
        for (const [k, t] of [ta, tb].entries()) expect(await outcome(t.quiesce(), 5_000), `transfer ${k}'s starts settle`).not.toBe('pending');
        expect(await outcome(Promise.all(ticks), 5_000), 'the watchdog ticks settle').not.toBe('pending');

        await pt.a.transport.close();
        await pt.b.transport.close();
        for (const side of world.sides) await side.transport.close();
        // What close left to completion (the flag blocks, the peers' mappings, the events of points
        // still awaited) goes once the GPU passed it; the flag blocks after the persistent grace.
        const sides = [pt.a, pt.b, ...world.sides];
        const left = () => sides.some((x) => x.driver.liveEvents > 0 || x.driver.liveRegistrations > 0);
        for (let k = 0; k < 200 && left(); k++) await sleep(10);
        await sleep(1000 + 4 * 400); // the flag blocks' grace (PersistentTransfers.graceMs)
        for (const x of sides) {
          expect(x.driver.lifetimeViolations, 'released while the GPU used it').toEqual([]);
          expect(x.driver.liveEvents, 'events left').toBe(0);
          expect(x.driver.liveRegistrations, 'host registrations left').toBe(0);
        }
        // The caller's buffers are all that is left of device memory.
        expect(pt.a.driver.allocatedBytes, 'persistent sender: device memory left but the source').toBe(n);
        expect(pt.b.driver.allocatedBytes, 'persistent receiver: device memory left but the destination').toBe(n);
        world.sides.forEach((x, r) => expect(x.driver.allocatedBytes, `rank ${r}: device memory left but its buffer`).toBe(bufs[r]!.length));
      } finally {
        await pt.close().catch(() => {});
        await world.close().catch(() => {});
      }
    },
  );
});
