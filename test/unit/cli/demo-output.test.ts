/**
 * What `smcuda demo` prints (issue 28): per-message times (µs, ms) rather than
 * "0.00 GB/s" for tiny sizes, bandwidth (GB/s, MB/s when slow) only from 64 KiB; its own empty
 * barrier messages left out of the counts, and said so; and nothing that
 * tells someone already on the simulator to use it.
 */
import { describe, expect, it } from 'vitest';
import { bandwidth, formatDuration, rate } from '../../../src/cli/format.js';
import { smcuda } from '../../helpers/cli.js';

describe('format', () => {
  it('formatDuration picks µs, ms or s', () => {
    expect(formatDuration(12.3e-6)).toBe('12 µs');
    expect(formatDuration(4.56e-6)).toBe('4.6 µs');
    expect(formatDuration(2.5e-3)).toBe('2.50 ms');
    expect(formatDuration(0.25)).toBe('250.0 ms');
    expect(formatDuration(3)).toBe('3.00 s');
  });

  it('rate gives time per message, and GB/s only from 64 KiB', () => {
    expect(rate(8, 48, 60e-6, 6).trim()).toBe('10 µs/msg');
    expect(rate(1 << 20, 6 << 20, 1e-3, 6)).toMatch(/167 µs\/msg +6\.29 GB\/s$/);
    // slow (a loaded machine, the simulator): MB/s, never 0.00 GB/s
    expect(rate(64 << 10, 4 * (64 << 10), 70e-3, 4)).toMatch(/17\.5 ms\/msg +3\.7 MB\/s$/);
    expect(bandwidth(0, 0)).toBe('-');
    expect(bandwidth(250e6, 1)).toBe('250 MB/s');
  });
});

describe('smcuda demo output', () => {
  it('shows µs for tiny sizes, hides its barrier messages, never advises the simulator to its users', async () => {
    const r = await smcuda(['demo', '--driver', 'sim', '--sizes', '8,64K', '--iters', '2']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).not.toMatch(/0\.00 GB\/s/);
    expect(r.stdout).toMatch(/ring +8 B +\d+ msgs +[\d.]+ (µs|ms)\/msg\n/);
    expect(r.stdout).toMatch(/ring +64 KiB +\d+ msgs +[\d.]+ (µs|ms)\/msg +[\d.]+ (GB|MB)\/s/);
    expect(r.stdout).toMatch(/not counting the demo's own 8 empty barrier messages each way per endpoint/);
    // 2 sizes × 2 phases × 2 iterations of data; no 0-byte message was sent: no eager entry is left.
    expect(r.stdout).not.toMatch(/eager \d+\/0 B/);
    expect(r.stdout).not.toMatch(/--driver sim|use the simulat/i);
  }, 60_000);
});
