/**
 * KeepAlive (src/progress/keep-alive.ts): a transport's handles keep the
 * process alive only while a source says something is pending. Fake handles
 * record their ref state; `check` is called directly (the interval only
 * calls it every IDLE_CHECK_MS).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { IDLE_CHECK_MS, KeepAlive } from '../../../src/progress/keep-alive.js';

class FakeHandle {
  refd = true; // as Node makes them
  ref() {
    this.refd = true;
  }
  unref() {
    this.refd = false;
  }
}

const made: KeepAlive[] = [];
function keepAlive(ms?: number): KeepAlive {
  const k = new KeepAlive(ms);
  made.push(k);
  return k;
}
afterEach(() => {
  for (const k of made.splice(0)) k.close();
});

describe('KeepAlive', () => {
  it("a handle added while idle is unref'd at once", () => {
    const k = keepAlive();
    const h = new FakeHandle();
    k.add(h);
    expect(h.refd).toBe(false);
    expect(k.holding).toBe(false);
  });

  it('busy refs every handle; a check with nothing pending unrefs them', () => {
    const k = keepAlive();
    const [a, b] = [new FakeHandle(), new FakeHandle()];
    k.add(a);
    k.add(b);
    let pending = true;
    k.addSource(() => pending);
    k.busy();
    expect([a.refd, b.refd, k.holding]).toEqual([true, true, true]);
    k.check();
    expect([a.refd, b.refd]).toEqual([true, true]); // still pending
    pending = false;
    k.check();
    expect([a.refd, b.refd, k.holding]).toEqual([false, false, false]);
  });

  it('every source must be idle; one that throws counts as pending', () => {
    const k = keepAlive();
    const h = new FakeHandle();
    k.add(h);
    const states = [false, false];
    k.addSource(() => states[0]!);
    const removeSecond = k.addSource(() => {
      if (states[1]) throw new Error('cannot tell');
      return false;
    });
    states[1] = true;
    k.busy();
    k.check();
    expect(h.refd).toBe(true);
    removeSecond();
    k.check();
    expect(h.refd).toBe(false);
  });

  it("a removed handle is no longer ref'd by busy", () => {
    const k = keepAlive();
    const h = new FakeHandle();
    const remove = k.add(h);
    remove();
    k.busy();
    expect(h.refd).toBe(false);
  });

  it('the interval unrefs by itself within a few checks once idle', async () => {
    const k = keepAlive(5);
    const h = new FakeHandle();
    k.add(h);
    let pending = true;
    k.addSource(() => pending);
    k.busy();
    await new Promise((r) => setTimeout(r, 20));
    expect(h.refd).toBe(true);
    pending = false;
    const t0 = performance.now();
    while (h.refd && performance.now() - t0 < 1000) await new Promise((r) => setTimeout(r, 5));
    expect(h.refd).toBe(false);
  });

  it('after close, busy and add do nothing', () => {
    const k = keepAlive();
    k.close();
    const h = new FakeHandle();
    k.add(h);
    k.busy();
    expect([h.refd, k.holding]).toEqual([true, false]); // left as it was: the transport closes it
  });

  it('checks at least every IDLE_CHECK_MS, a fraction of the exit bound', () => {
    expect(IDLE_CHECK_MS).toBeGreaterThan(0);
    expect(IDLE_CHECK_MS).toBeLessThanOrEqual(1000);
  });
});
