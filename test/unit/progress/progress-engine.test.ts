/**
 * The progress engine (src/progress/engine.ts) with stand-in sources (a
 * control ring, a GPU event queue): registration, what it polls, when a
 * source goes cold and is armed (spin budget, then sleep), the wake-up that
 * brings it back, fairness between sources and between two engines, and
 * unregistration on close. It reads the clock only every few dozen passes
 * and never in kick(), so "cold after spinUs" is checked with some slack.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ProgressEngine, type ProgressSource } from '../../../src/progress/engine.js';

const tick = () => new Promise<void>((r) => setImmediate(r));
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/**
 * A channel whose poll() delivers `frames` (and, with `everyMs`, one frame
 * that often), kicking the engine as a ShmChannel does on delivery. A
 * pass of the engine that delivers nothing keeps the thread, so the test's own code
 * runs only between deliveries.
 */
class FakeChannel implements ProgressSource {
  hotUntil = 0;
  kicked = false;
  frames = 0;
  polls = 0;
  delivered = 0;
  everyMs = 0;
  until = 0;
  private last = performance.now();
  readonly watches: boolean[] = [];
  constructor(private readonly sp?: ProgressEngine) {}
  poll(): boolean {
    this.polls++;
    if (this.frames === 0 && this.everyMs > 0) {
      const now = performance.now();
      if (now < this.until && now - this.last >= this.everyMs) {
        this.last = now;
        this.frames = 1;
      }
    }
    if (this.frames === 0) return false;
    this.frames--;
    this.delivered++;
    this.sp?.kick(this);
    return true;
  }
  watch(on: boolean): void {
    this.watches.push(on);
  }
}

class FakeGpu implements ProgressSource {
  hotUntil = 0;
  kicked = false;
  waits = 0;
  completeAfterPolls = Infinity;
  polls = 0;
  handOffs = 0;
  poll(): boolean {
    this.polls++;
    if (this.waits > 0 && this.polls >= this.completeAfterPolls) {
      this.waits = 0;
      return true;
    }
    return false;
  }
  get pending(): boolean {
    return this.waits > 0;
  }
  watch(on: boolean): void {
    if (on) return;
    this.handOffs++;
    this.waits = 0;
  }
}

async function until(cond: () => boolean, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error('timed out');
    await tick();
  }
}

describe('ProgressEngine', () => {
  const engines: ProgressEngine[] = [];
  const spinner = (us: number): ProgressEngine => {
    const s = new ProgressEngine(us);
    engines.push(s);
    return s;
  };
  afterEach(() => {
    for (const s of engines.splice(0)) s.stop();
  });

  it('polls a kicked channel and delivers what arrives; a silent channel goes cold (watch(false)) after spinUs', async () => {
    const sp = spinner(20_000);
    const ch = new FakeChannel();
    sp.kick(ch);
    expect(ch.watches).toEqual([true]); // watched from the first kick
    ch.frames = 3;
    await until(() => ch.delivered === 3);
    const t0 = performance.now();
    await until(() => ch.watches.length === 2);
    expect(ch.watches).toEqual([true, false]);
    expect(performance.now() - t0).toBeGreaterThanOrEqual(15); // not before spinUs (less a pass or two)
    const polls = ch.polls;
    await sleep(30);
    expect(ch.polls).toBe(polls); // cold: no longer polled
  });

  it('a channel that keeps delivering stays hot past spinUs, then goes cold; a kick after that watches it again', async () => {
    const sp = spinner(40_000);
    const ch = new FakeChannel(sp);
    ch.everyMs = 5;
    const t0 = performance.now();
    ch.until = t0 + 160;
    sp.kick(ch);
    await until(() => ch.watches.length === 2);
    expect(ch.watches).toEqual([true, false]);
    // A frame every 5 ms for 160 ms kept it hot throughout (a busy machine may delay some frames, not 40 ms of them).
    expect(performance.now() - t0).toBeGreaterThanOrEqual(160);
    sp.kick(ch);
    expect(ch.watches).toEqual([true, false, true]);
  });

  it('forget drops a channel without a last watch(false)', async () => {
    const sp = spinner(1_000_000);
    const a = new FakeChannel(sp);
    const b = new FakeChannel(sp);
    b.everyMs = 1;
    b.until = Infinity;
    sp.kick(a);
    sp.kick(b);
    await until(() => a.polls > 10 && b.delivered > 2);
    sp.forget(a);
    const before = a.polls;
    const seen = b.delivered;
    await until(() => b.delivered > seen + 3);
    expect(a.polls).toBe(before);
    expect(a.watches).toEqual([true]);
  });

  it('GPU waits are polled until done, without a hand-off', async () => {
    const sp = spinner(1_000_000);
    const g = new FakeGpu();
    g.waits = 1;
    g.completeAfterPolls = 50;
    sp.kick(g);
    await until(() => g.waits === 0);
    expect(g.polls).toBe(50);
    expect(g.handOffs).toBe(0);
  });

  it('GPU waits without progress for spinUs, no channel hot: handed to the native poller', async () => {
    const sp = spinner(10_000);
    const g = new FakeGpu();
    g.waits = 1;
    const t0 = performance.now();
    sp.kick(g);
    await until(() => g.handOffs === 1);
    expect(performance.now() - t0).toBeGreaterThanOrEqual(8);
    const polls = g.polls;
    await sleep(20);
    expect(g.polls).toBe(polls);
  });

  it('stop unwatches its channels and hands off its GPU waits; later kicks do nothing', async () => {
    const sp = spinner(1_000_000);
    const ch = new FakeChannel(sp);
    ch.everyMs = 1;
    ch.until = Infinity;
    const g = new FakeGpu();
    g.waits = 1;
    sp.kick(ch);
    sp.kick(g);
    await until(() => ch.polls > 5 && g.polls > 5);
    sp.stop();
    expect(ch.watches).toEqual([true, false]);
    expect(g.handOffs).toBe(1);
    expect(sp.polling).toBe(false);
    const polls = ch.polls;
    sp.kick(ch);
    await sleep(5);
    expect(ch.polls).toBe(polls);
    expect(ch.watches).toEqual([true, false]);
  });

  it('spinUs 0: never spins', async () => {
    const sp = spinner(0);
    const ch = new FakeChannel();
    sp.kick(ch);
    await sleep(5);
    expect(ch.polls).toBe(0);
    expect(ch.watches).toEqual([]);
    expect(sp.polling).toBe(false);
  });

  it('registration: a kick adds the source once (watch(true) once), however often it is kicked', async () => {
    const sp = spinner(1_000_000);
    const ch = new FakeChannel(sp);
    sp.kick(ch);
    sp.kick(ch);
    sp.kick(ch);
    expect(ch.watches).toEqual([true]);
    ch.frames = 2;
    await until(() => ch.delivered === 2);
    expect(ch.watches).toEqual([true]);
  });

  it('spin budget, then sleep; a doorbell (the kick of the frame it carried) wakes the source and it delivers', async () => {
    const sp = spinner(5_000);
    const ch = new FakeChannel(sp);
    sp.kick(ch);
    await until(() => ch.watches.length === 2); // budget spent: asleep, its wake-up armed
    expect(ch.watches).toEqual([true, false]);
    const polls = ch.polls;
    await sleep(10);
    expect(ch.polls).toBe(polls); // asleep: not polled
    // The peer's DOORBELL arrives through the event loop; the ring's reader kicks the engine.
    ch.frames = 1;
    setTimeout(() => sp.kick(ch), 1);
    await until(() => ch.delivered === 1);
    expect(ch.watches).toEqual([true, false, true]);
  });

  it('a GPU queue with nothing pending is dropped at once (nothing to hand off); one with waits is kept while a channel is hot', async () => {
    const sp = spinner(10_000);
    const ch = new FakeChannel(sp);
    ch.everyMs = 1;
    ch.until = performance.now() + 80;
    const g = new FakeGpu();
    g.waits = 1; // never completes by polling
    sp.kick(ch);
    sp.kick(g);
    await sleep(40); // well past the GPU queue's own 10 ms budget, while the channel stays hot
    expect(g.handOffs).toBe(0);
    await until(() => g.handOffs === 1); // the channel went cold: the queue sleeps too
    const idle = new FakeGpu();
    sp.kick(idle);
    await until(() => idle.polls > 0);
    const polls = idle.polls;
    await sleep(5);
    expect(idle.polls).toBe(polls); // polled once, found nothing pending, dropped
    expect(idle.handOffs).toBe(0);
  });

  it('no starvation between two sources: one that always has work does not keep the other from being polled', async () => {
    const sp = spinner(1_000_000);
    const busy = new FakeChannel(sp);
    busy.frames = Infinity;
    const quiet = new FakeChannel(sp);
    sp.kick(busy);
    sp.kick(quiet);
    await until(() => busy.delivered > 100);
    quiet.frames = 1;
    await until(() => quiet.delivered === 1);
    expect(quiet.polls).toBeGreaterThan(100); // polled on every pass beside the busy one
    busy.frames = 0;
  });

  it('two engines in one process: a waiting engine yields the thread after a slice, long before its budget', async () => {
    // Engine A waits for a reply that never comes (a hot, idle ring) with a 1 s budget; engine B's ring has a frame.
    const a = spinner(1_000_000);
    const b = spinner(1_000_000);
    const waiting = new FakeChannel(a);
    const other = new FakeChannel(b);
    other.frames = 1;
    a.kick(waiting);
    b.kick(other);
    const t0 = performance.now();
    await until(() => other.delivered === 1);
    // Held for its whole budget, A would have kept B from running for a second.
    expect(performance.now() - t0).toBeLessThan(500);
    expect(waiting.watches).toEqual([true]); // A is still spinning on its ring, not cold
  });

  it('while completions are awaited through the event loop, a callback makes one pass, so they arrive', async () => {
    const sp = spinner(1_000_000);
    const ch = new FakeChannel(sp);
    sp.kick(ch);
    sp.beginLoopWait();
    let arrived = false;
    setTimeout(() => {
      arrived = true;
      sp.endLoopWait();
    }, 2);
    const passesBefore = ch.polls;
    await until(() => arrived);
    expect(sp.loopWaiting).toBe(0);
    expect(ch.polls).toBeGreaterThan(passesBefore);
  });

  it('spinNow polls one source inline until it makes progress, or for the budget', () => {
    const sp = spinner(0); // inline spins work whether or not the engine polls
    const g = new FakeGpu();
    g.waits = 1;
    g.completeAfterPolls = 5;
    expect(sp.spinNow(g, 1_000_000)).toBe(true);
    expect(g.polls).toBe(5);
    g.waits = 1;
    g.completeAfterPolls = Infinity;
    const t0 = performance.now();
    expect(sp.spinNow(g, 2_000)).toBe(false);
    expect(performance.now() - t0).toBeGreaterThanOrEqual(2);
    expect(sp.spinNow(g, 0)).toBe(false);
  });

  it('unregister on close: a closed GPU event queue is forgotten by the engine', async () => {
    const { SimulatedCudaDriver } = await import('../../../src/cuda/sim-driver.js');
    const { GpuEventQueue } = await import('../../../src/gpu/gpu-event-queue.js');
    const d = new SimulatedCudaDriver({ env: {} });
    d.init();
    d.setDevice(0);
    try {
      const sp = spinner(1_000_000);
      const q = new GpuEventQueue(d, sp, 0);
      const poll = vi.spyOn(q, 'poll');
      const s = d.streamCreate();
      d.inject({ copyDelayMs: 50 });
      const src = d.memAlloc(16);
      const dst = d.memAlloc(16);
      d.memcpyAsync(dst, src, 16, s);
      let outcome: unknown = 'none';
      q.record(s, 16, (err) => (outcome = err), true);
      await until(() => poll.mock.calls.length > 3); // polled by the engine
      q.close();
      const n = poll.mock.calls.length;
      await sleep(5);
      expect(poll.mock.calls.length).toBe(n); // no longer polled
      await until(() => outcome !== 'none'); // the native completion thread settled it
      expect(outcome).toBeUndefined();
    } finally {
      d.close();
    }
  });

  it("a wait on a peer's event is the queue's: close fails it at once with the reason; the retired event is destroyed only once the native thread lets go", async () => {
    const { SimulatedCudaDriver } = await import('../../../src/cuda/sim-driver.js');
    const { GpuEventQueue } = await import('../../../src/gpu/gpu-event-queue.js');
    const peer = new SimulatedCudaDriver({ env: {} });
    const d = new SimulatedCudaDriver({ env: {} });
    for (const x of [peer, d]) x.init();
    peer.setDevice(0);
    d.setDevice(1);
    try {
      // The peer's event, recorded behind a slow copy: it completes 200 ms from now.
      const s = peer.streamCreate();
      peer.inject({ copyDelayMs: 200 });
      const src = peer.memAlloc(16);
      const dst = peer.memAlloc(16);
      peer.memcpyAsync(dst, src, 16, s);
      const pev = peer.eventCreate({ interprocess: true, disableTiming: true });
      peer.eventRecord(pev, s);
      const ev = d.ipcOpenEventHandle(peer.ipcGetEventHandle(pev));
      const destroy = vi.spyOn(d, 'eventDestroy');
      const q = new GpuEventQueue(d, spinner(0), 0);
      const outcomes: unknown[] = [];
      q.whenEvent(ev, (err) => outcomes.push(err ?? 'completed'));
      await sleep(10);
      const reason = new Error('peer lost');
      q.close(reason);
      expect(outcomes).toEqual([reason]); // at once, not when the event completes
      q.retire(ev); // the receive is done with it
      expect(q.peerEventsAwaited).toBe(1); // the native thread still queries it: not destroyed
      expect(destroy).not.toHaveBeenCalledWith(ev);
      await until(() => q.peerEventsAwaited === 0);
      expect(destroy).toHaveBeenCalledWith(ev);
      expect(outcomes).toEqual([reason]); // the callback ran once
      expect(d.lifetimeViolations).toEqual([]);
      const late: unknown[] = [];
      q.whenEvent(ev, (err) => late.push(err)); // a wait after close fails at once
      expect(late).toEqual([reason]);
    } finally {
      d.close();
      peer.close();
    }
  });
});
