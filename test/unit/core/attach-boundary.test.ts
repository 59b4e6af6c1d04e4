/**
 * The trust boundary of attach() (docs/reliability.md, "Trust"): shared
 * memory with a peer needs a descriptor channel. attach(channel) alone
 * shares nothing by memory — no control rings, and a device message that
 * would be staged travels inline (EAGER) on the channel itself, of any size;
 * given a descriptor channel, rings and staging work as over listen/connect.
 */
import { describe, expect, it } from 'vitest';
import { deviceWith, makePair, readDevice, sameBytes } from '../../helpers/transport-pair.js';
import { patternBytes } from '../../helpers/bytes.js';

async function exchange(descriptors: boolean) {
  const pair = await makePair({ a: { negotiation: { ipc: false } }, b: { negotiation: { ipc: false } }, descriptors });
  try {
    const data = patternBytes(1 << 20, 7);
    const src = deviceWith(pair.a.driver, data);
    const into = { ptr: pair.b.driver.memAlloc(data.length), length: data.length };
    const [, r] = await Promise.all([pair.a.ep.send(src, { tag: 1 }), pair.b.ep.recv({ tag: 1, into })]);
    expect(sameBytes(readDevice(pair.b.driver, into), data)).toBe(true);
    // Let the rings upgrade where they can, then look.
    for (let i = 0; i < 50 && descriptors && !pair.a.ep.stats().control.ringOut; i++) await new Promise((res) => setTimeout(res, 5));
    return { path: r.path, control: pair.a.ep.stats().control };
  } finally {
    await pair.close();
  }
}

describe('attach() and shared memory', () => {
  it('without a descriptor channel: no rings, a 1 MiB device message goes inline (EAGER), bytes intact', async () => {
    const r = await exchange(false);
    expect(r.path).toBe('eager');
    expect(r.control.ringOut).toBe(false);
    expect(r.control.channel).not.toMatch(/\+ring/);
  });

  it('with one: control rings, and the same message by staging', async () => {
    const r = await exchange(true);
    expect(r.path).toBe('staging');
    expect(r.control.ringOut).toBe(true);
  });
});
