/**
 * machines/warm-up.ts: the warm-up negotiation runs once per process, ends
 * (both stub sides OK, then stopped), and leaves nothing behind that would
 * keep the process alive or touch a driver.
 */
import { describe, expect, it } from 'vitest';
import { warmNegotiation } from '../../../machines/warm-up.js';

describe('warmNegotiation', () => {
  it('resolves, once per process (the same promise each call), with no timer left', async () => {
    const timers = () => (process as unknown as { getActiveResourcesInfo(): string[] }).getActiveResourcesInfo().filter((h) => h === 'Timeout').length;
    const before = timers(); // vitest's own (the test's timeout)
    const first = warmNegotiation();
    expect(warmNegotiation()).toBe(first);
    await expect(first).resolves.toBeUndefined();
    expect(timers()).toBe(before);
  });
});
