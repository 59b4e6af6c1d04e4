/**
 * The control spinner (src/channel/spinner.ts) with stand-in channels and GPU
 * pollables: what it polls, when a channel goes cold, when GPU waits are
 * handed to the native poller. It reads the clock only every few dozen passes
 * and never in kick(), so "cold after spinUs" is checked with some slack.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { type GpuPollable, type Spinnable, Spinner } from '../src/channel/spinner.js';

const tick = () => new Promise<void>((r) => setImmediate(r));
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/**
 * A channel whose poll() delivers `frames` (and, with `everyMs`, one frame
 * that often), kicking the spinner as a ShmChannel does on delivery. A
 * spinner pass that delivers nothing keeps the thread, so the test's own code
 * runs only between deliveries.
 */
class FakeChannel implements Spinnable {
  hotUntil = 0;
  kicked = false;
  frames = 0;
  polls = 0;
  delivered = 0;
  everyMs = 0;
  until = 0;
  private last = performance.now();
  readonly watches: boolean[] = [];
  constructor(private readonly sp?: Spinner) {}
  poll(): boolean {
    this.polls++;
    if (this.frames === 0 && this.everyMs > 0 && (this.polls & 255) === 0) {
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

class FakeGpu implements GpuPollable {
  pending = 0;
  completeAfterPolls = Infinity;
  polls = 0;
  handOffs = 0;
  pollGpu(): boolean {
    this.polls++;
    if (this.pending > 0 && this.polls >= this.completeAfterPolls) {
      this.pending = 0;
      return true;
    }
    return false;
  }
  get gpuPending(): boolean {
    return this.pending > 0;
  }
  handOff(): void {
    this.handOffs++;
    this.pending = 0;
  }
}

async function until(cond: () => boolean, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error('timed out');
    await tick();
  }
}

describe('Spinner', () => {
  const spinners: Spinner[] = [];
  const spinner = (us: number) => {
    const s = new Spinner(us);
    spinners.push(s);
    return s;
  };
  afterEach(() => {
    for (const s of spinners.splice(0)) s.stop();
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
    const sp = spinner(20_000);
    const ch = new FakeChannel(sp);
    ch.everyMs = 5;
    ch.until = performance.now() + 80;
    sp.kick(ch);
    await until(() => ch.watches.length === 2);
    expect(ch.watches).toEqual([true, false]);
    expect(ch.delivered).toBeGreaterThanOrEqual(8); // a frame every 5 ms for 80 ms kept it hot throughout
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
    g.pending = 1;
    g.completeAfterPolls = 50;
    sp.watchGpu(g);
    await until(() => g.pending === 0);
    expect(g.polls).toBe(50);
    expect(g.handOffs).toBe(0);
  });

  it('GPU waits without progress for spinUs, no channel hot: handed to the native poller', async () => {
    const sp = spinner(10_000);
    const g = new FakeGpu();
    g.pending = 1;
    const t0 = performance.now();
    sp.watchGpu(g);
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
    g.pending = 1;
    sp.kick(ch);
    sp.watchGpu(g);
    await until(() => ch.polls > 5 && g.polls > 5);
    sp.stop();
    expect(ch.watches).toEqual([true, false]);
    expect(g.handOffs).toBe(1);
    expect(sp.pollsGpu).toBe(false);
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
    expect(sp.pollsGpu).toBe(false);
  });
});
