/**
 * Issue 43: what the persistent layer holds on the GPU is released only from
 * completion. The watchdog's stream and events are the GPU runtime's: closed
 * while a tick waits on its event (Watchdog.close destroyed that event under
 * the wait before: a cuEventQuery of a destroyed event on the native
 * driver's completion thread), they go only once the tick's point completed; a transport closed during a tick frees
 * the flag block and the mappings only after the GPU passed them; eager starts
 * mark their streams with pooled events, not one new event per start. The
 * simulated driver's lifetimeViolations lists every release made under
 * queued work or a pending wait.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { CudaDriver } from '../../../src/cuda/driver.js';
import { SimulatedCudaDriver } from '../../../src/cuda/sim-driver.js';
import { GpuRuntime } from '../../../src/gpu/gpu-runtime.js';
import { SLOT_BYTES } from '../../../src/persistent/flags.js';
import { Watchdog } from '../../../src/persistent/watchdog.js';
import { deviceWith, makePair, randomBytes, readDevice, type Pair } from '../../helpers/transport-pair.js';

let pair: Pair | undefined;
afterEach(async () => {
  await pair?.close();
  pair = undefined;
});

async function settle(d: CudaDriver, stream: bigint): Promise<void> {
  const ev = d.eventCreate({ disableTiming: true });
  d.eventRecord(ev, stream);
  try {
    await d.whenComplete(ev);
  } finally {
    d.eventDestroy(ev);
  }
}

/** A pair with a persistent transfer of `n` random bytes (seed `seed`) from a to b, and a stream on each side. */
async function transferPair(timeoutMs: number, n: number, seed: number) {
  pair = await makePair({ a: { persistent: { timeoutMs } }, b: { persistent: { timeoutMs } } });
  const p = pair;
  const src = deviceWith(p.a.driver, randomBytes(n, seed));
  const dst = deviceWith(p.b.driver, new Uint8Array(n));
  const [ra, rb] = await Promise.all([p.a.ep.register(src), p.b.ep.register(dst)]);
  const [ta, tb] = await Promise.all([p.a.ep.persistent(ra, { role: 'send', length: n }), p.b.ep.persistent(rb, { role: 'recv', length: n })]);
  return { p, dst, ta, tb, sa: p.a.driver.streamCreate(), sb: p.b.driver.streamCreate() };
}

function watchdogOf(p: Pair['a']): Watchdog {
  return (p.transport as unknown as { watchdog: Watchdog }).watchdog;
}

describe('Watchdog.close during a tick', () => {
  it('the runtime keeps its event and stream for the tick that waits on them: no lifetime violation, nothing left', async () => {
    const d = new SimulatedCudaDriver({ env: {} });
    d.init();
    d.setDevice(0);
    try {
      const slots = 4;
      const ptr = d.memAlloc(slots * SLOT_BYTES);
      d.memsetD8(ptr, 0, slots * SLOT_BYTES);
      const gpu = new GpuRuntime(d);
      const w = new Watchdog(gpu, { timeoutMs: 1000 });
      w.watch({ ptr, slots, transfers: () => [] });
      const events = d.liveEvents;
      d.inject({ copyDelayMs: 40 }); // the tick's read of the block is still queued at close
      const tick = w.tickNow();
      // The order Transport.close uses: the watchdog, then the runtime, while the tick still waits.
      w.close();
      gpu.close();
      expect(d.liveEvents).toBe(events + 1); // not destroyed under the tick's wait
      await tick;
      expect(d.lifetimeViolations).toEqual([]);
      expect(d.liveEvents).toBe(events); // released once the tick's point completed
      d.memFree(ptr);
      expect(d.lifetimeViolations).toEqual([]);
    } finally {
      d.close();
    }
  });

  it('a flush pending at close keeps the stream until it completed', async () => {
    const d = new SimulatedCudaDriver({ env: {} });
    d.init();
    d.setDevice(0);
    try {
      const slots = 2;
      const ptr = d.memAlloc(slots * SLOT_BYTES);
      const gpu = new GpuRuntime(d);
      const w = new Watchdog(gpu, { timeoutMs: 1000 });
      d.inject({ copyDelayMs: 40 });
      w.reset([ptr]); // makes its stream
      w.poison([ptr]);
      const flushed = w.flushed();
      w.close();
      gpu.close();
      await flushed;
      expect(d.lifetimeViolations).toEqual([]);
      expect(d.liveEvents).toBe(0);
      d.memFree(ptr);
      expect(d.lifetimeViolations).toEqual([]);
    } finally {
      d.close();
    }
  });
});

describe('Transport.close during a watchdog tick (issue 43)', () => {
  it('the simulated drivers report no lifetime violation: the event, the flag block and the mappings go after the GPU passed them', async () => {
    const n = 4096;
    const { p, dst, ta, tb, sa, sb } = await transferPair(400, n, 3);
    ta.start(sa);
    tb.start(sb);
    await Promise.all([settle(p.a.driver, sa), settle(p.b.driver, sb)]);
    expect(Buffer.compare(readDevice(p.b.driver, dst), randomBytes(n, 3))).toBe(0);
    for (const side of [p.a, p.b]) side.driver.inject({ copyDelayMs: 30 });
    const ticks = [p.a, p.b].map((side) => watchdogOf(side).tickNow()); // in flight: their reads take 30 ms
    await p.a.transport.close();
    await p.b.transport.close();
    await Promise.all(ticks);
    // What close left to completion goes once the GPU passed it (no timer to wait out).
    for (let k = 0; k < 100 && (p.a.driver.liveEvents > 0 || p.b.driver.liveEvents > 0); k++) await new Promise((r) => setTimeout(r, 10));
    for (const side of [p.a, p.b]) {
      expect(side.driver.lifetimeViolations).toEqual([]);
      expect(side.driver.liveEvents).toBe(0);
    }
  });

  it('eager starts take pooled events: many rounds make no event per round, and none is left after close', async () => {
    const n = 256;
    const { p, ta, tb, sa, sb } = await transferPair(2000, n, 4);
    let created = 0;
    const create = p.a.driver.eventCreate.bind(p.a.driver);
    p.a.driver.eventCreate = (...args: Parameters<typeof create>) => {
      created++;
      return create(...args);
    };
    const rounds = 20;
    for (let r = 0; r < rounds; r++) {
      ta.start(sa);
      tb.start(sb);
      await ta.quiesce();
    }
    await Promise.all([settle(p.a.driver, sa), settle(p.b.driver, sb)]);
    // One event per round in flight at once (here one), plus the settle above and the watchdog's ticks' none.
    expect(created).toBeLessThan(rounds / 2);
    await Promise.all([ta.close(), tb.close()]);
    await p.a.transport.close();
    for (let k = 0; k < 100 && p.a.driver.liveEvents > 0; k++) await new Promise((r) => setTimeout(r, 10));
    expect(p.a.driver.liveEvents).toBe(0);
    expect(p.a.driver.lifetimeViolations).toEqual([]);
  });
});

describe("the peer's mappings are holds of the GPU runtime (issue 43)", () => {
  it('an endpoint closed while an eager start copies through the peer mapping unmaps it only once the GPU passed the start', async () => {
    const n = 64 << 10;
    const { p, ta, tb, sa, sb } = await transferPair(2000, n, 5);
    const mapped = p.a.ep.stats().cache.openMappings;
    expect(mapped).toBeGreaterThan(0); // the peer's buffer and flag block
    p.a.driver.inject({ copyDelayMs: 60 }); // the sender's copy into the peer's buffer is still queued at close
    tb.start(sb);
    ta.start(sa);
    p.a.ep.close();
    expect(p.a.ep.stats().cache.openMappings).toBe(mapped); // not unmapped under the queued copy
    await ta.quiesce();
    for (let k = 0; k < 100 && p.a.ep.stats().cache.openMappings > 0; k++) await new Promise((r) => setTimeout(r, 10));
    expect(p.a.ep.stats().cache.openMappings).toBe(0); // unmapped once the GPU passed it, with no timer to wait out
    expect(p.a.driver.lifetimeViolations).toEqual([]);
  });
});

describe('Transport.close with failed transfers still holding queued starts', () => {
  // Each queued start waits once and consumes the POISON that released it: before the fix, close stopped
  // the watchdog after its first release, and the receiver's stream waited forever on the second start.
  it("releases every queued start of the receiver's stream (the sender started fewer), in well under the watchdog's timeout", async () => {
    const n = 4096;
    const { p, dst, ta, tb, sa, sb } = await transferPair(10_000, n, 6);
    ta.start(sa);
    for (let r = 0; r < 8; r++) tb.start(sb); // seven of them wait for a sender that never comes
    await settle(p.a.driver, sa);
    const t0 = performance.now();
    await p.b.transport.close();
    const released = settle(p.b.driver, sb).then(() => performance.now() - t0);
    const ms = await Promise.race([released, new Promise<number>((r) => setTimeout(() => r(Number.POSITIVE_INFINITY), 5000))]);
    expect(ms).toBeLessThan(5000);
    expect(tb.failed).toBe(true);
    expect(Buffer.compare(readDevice(p.b.driver, dst), randomBytes(n, 6))).toBe(0);
    expect(p.b.driver.lifetimeViolations).toEqual([]);
  });
});
