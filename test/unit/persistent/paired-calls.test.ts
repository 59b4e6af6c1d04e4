/**
 * register() and persistent() are paired calls (src/persistent/paired-calls.ts):
 * a call that fails on one side — bad argument, unknown option, no matching
 * call in time — fails the peer's call of the same number at once with a
 * typed error naming the cause, and the numbering never shifts, so the next
 * pair works. Flag blocks of different sizes are refused on both sides.
 */
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import type { DeviceBuffer } from '../../../src/buffers.js';
import type { CudaDriver } from '../../../src/cuda/driver.js';
import { ArgumentRangeError, ArgumentTypeError, ConfigError, PersistentTransferError } from '../../../src/errors.js';
import { MAX_AHEAD, PairedCalls } from '../../../src/persistent/paired-calls.js';
import type { Registration } from '../../../src/persistent/registrations.js';
import { deviceWith, makePair, randomBytes, readDevice, type Pair } from '../../helpers/transport-pair.js';

let pair: Pair | undefined;
afterEach(async () => {
  await pair?.close();
  pair = undefined;
});

const open = () => makePair({ a: { persistent: { timeoutMs: 2000 } }, b: { persistent: { timeoutMs: 2000 } } });

/** Settles `p`, failing the test if that takes `ms` or longer. */
async function within<T>(ms: number, p: Promise<T>): Promise<PromiseSettledResult<T>> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`not settled within ${ms} ms`)), ms)));
  try {
    return await Promise.race([
      p.then(
        (value) => ({ status: 'fulfilled' as const, value }),
        (reason: unknown) => ({ status: 'rejected' as const, reason }),
      ),
      late,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

function rejection(r: PromiseSettledResult<unknown>): Error & { code?: string } {
  expect(r.status).toBe('rejected');
  return (r as PromiseRejectedResult).reason as Error & { code?: string };
}

function expectPeerFailed(r: PromiseSettledResult<unknown>, cause: RegExp): void {
  const err = rejection(r);
  expect(err).toBeInstanceOf(PersistentTransferError);
  expect(err.code).toBe('SMCUDA_PERSISTENT_PEER_FAILED');
  expect(err.message).toMatch(cause);
}

function zeros(d: CudaDriver, n: number): DeviceBuffer {
  return deviceWith(d, new Uint8Array(n));
}

async function settle(d: CudaDriver, stream: bigint): Promise<void> {
  const ev = d.eventCreate({ disableTiming: true });
  d.eventRecord(ev, stream);
  try {
    await d.whenComplete(ev);
  } finally {
    d.eventDestroy(ev);
  }
}

/** A register pair that works: both resolve, with the same number, each mapping the other's bytes. */
async function goodRegisterPair(p: Pair, n = 256): Promise<[Registration, Registration]> {
  const [ra, rb] = await Promise.all([p.a.ep.register(deviceWith(p.a.driver, randomBytes(n, 5))), p.b.ep.register(zeros(p.b.driver, n))]);
  expect(ra.id).toBe(rb.id);
  const seen = new Uint8Array(n);
  p.b.driver.memcpyDtoH(seen, rb.peer.ptr);
  expect(Buffer.compare(seen, randomBytes(n, 5))).toBe(0);
  return [ra, rb];
}

/** A persistent pair that works: one round moves the sender's bytes. */
async function goodTransferPair(p: Pair, ra: Registration, rb: Registration, seed: number): Promise<void> {
  const n = ra.local.length;
  const [ta, tb] = await Promise.all([p.a.ep.persistent(ra, { role: 'send', length: n }), p.b.ep.persistent(rb, { role: 'recv', length: n })]);
  expect(ta.id).toBe(tb.id);
  p.a.driver.memcpyHtoD(ra.local.ptr, randomBytes(n, seed));
  const sa = p.a.driver.streamCreate();
  const sb = p.b.driver.streamCreate();
  ta.start(sa);
  tb.start(sb);
  await Promise.all([settle(p.a.driver, sa), settle(p.b.driver, sb)]);
  expect(Buffer.compare(readDevice(p.b.driver, rb.local), randomBytes(n, seed))).toBe(0);
  await Promise.all([ta.close(), tb.close()]);
}

describe('register(): a failure on one side fails both, and the next pair matches', () => {
  it('a bad buffer here: TypeError here, SMCUDA_PERSISTENT_PEER_FAILED (naming it) there, both within 1 s; the peer waiting first or calling later', async () => {
    pair = await open();
    const p = pair;
    // The peer is already waiting.
    const waiting = p.b.ep.register(zeros(p.b.driver, 64));
    const [ra, rb] = await Promise.all([within(1000, p.a.ep.register({ ptr: 'not a pointer' } as never)), within(1000, waiting)]);
    expect(rejection(ra)).toBeInstanceOf(ArgumentTypeError);
    expectPeerFailed(rb, /register\(\) takes device memory|ptr/);
    // The peer calls after the failure came: it fails at once.
    const bad = await within(1000, p.a.ep.register({ ptr: 1n << 40n, length: 0 }));
    expect(rejection(bad)).toBeInstanceOf(ArgumentRangeError);
    await new Promise((r) => setTimeout(r, 20));
    expectPeerFailed(await within(1000, p.b.ep.register(zeros(p.b.driver, 64))), /at least 1 byte/);
    const [ga] = await goodRegisterPair(p);
    expect(ga.id).toBe(3); // two numbers spent on both sides, none shifted
  });

  it('an unknown option key is refused with the close match, on both sides', async () => {
    pair = await open();
    const p = pair;
    const [ra, rb] = await Promise.all([
      within(1000, p.a.ep.register(zeros(p.a.driver, 64), { timeotuMs: 5 } as never)),
      within(1000, p.b.ep.register(zeros(p.b.driver, 64))),
    ]);
    const err = rejection(ra);
    expect(err).toBeInstanceOf(ConfigError);
    expect(err.message).toMatch(/"timeotuMs".*did you mean "timeoutMs"/);
    expectPeerFailed(rb, /timeotuMs/);
    await expect(p.a.ep.register(zeros(p.a.driver, 64), { timeoutMs: -1 })).rejects.toBeInstanceOf(ArgumentRangeError);
    await expect(p.b.ep.register(zeros(p.b.driver, 64))).rejects.toMatchObject({ code: 'SMCUDA_PERSISTENT_PEER_FAILED' });
    await goodRegisterPair(p);
  });

  it("no matching call within timeoutMs: SMCUDA_PERSISTENT_TIMEOUT here; the peer's late call of that number fails at once; the next pair works", async () => {
    pair = await open();
    const p = pair;
    const t0 = Date.now();
    const alone = await within(2000, p.a.ep.register(zeros(p.a.driver, 64), { timeoutMs: 100 }));
    const err = rejection(alone);
    expect(err).toBeInstanceOf(PersistentTransferError);
    expect(err.code).toBe('SMCUDA_PERSISTENT_TIMEOUT');
    expect(Date.now() - t0).toBeGreaterThanOrEqual(90);
    await new Promise((r) => setTimeout(r, 20));
    expectPeerFailed(await within(1000, p.b.ep.register(zeros(p.b.driver, 64))), /SMCUDA_PERSISTENT_TIMEOUT/);
    await goodRegisterPair(p);
  });

  it('the peer failing after this side resolved (its mapping of our buffer failed): the registration is void here, and deregisters without the peer', async () => {
    pair = await open();
    const p = pair;
    // B's mapping of A's buffer fails once; A's call has resolved by then or resolves and is voided.
    const bufA = zeros(p.a.driver, 64);
    p.b.driver.inject({ openFailures: ['CUDA_ERROR_OPERATING_SYSTEM'] });
    const [ra, rb] = await Promise.all([within(1000, p.a.ep.register(bufA)), within(1000, p.b.ep.register(zeros(p.b.driver, 64)))]);
    expect(rb.status).toBe('rejected');
    if (ra.status === 'fulfilled') {
      const reg = ra.value;
      for (let k = 0; k < 50 && reg.peerFailure === undefined; k++) await new Promise((r) => setTimeout(r, 5));
      expect(reg.peerFailure?.code).toBe('SMCUDA_PERSISTENT_PEER_FAILED');
      expect(reg.peerFailure?.message).toMatch(/CUDA_ERROR_OPERATING_SYSTEM/);
      await within(1000, reg.deregister()); // the peer will not deregister: this resolves anyway
    } else {
      expectPeerFailed(ra, /CUDA_ERROR_OPERATING_SYSTEM/);
    }
    await goodRegisterPair(p);
  });
});

describe('persistent(): a failure on one side fails both, and the next pair matches', () => {
  it('bad options on the first call (the one that makes the flag blocks): RangeError here, PEER_FAILED there within 1 s; the next pair moves bytes', async () => {
    pair = await open();
    const p = pair;
    const [ra, rb] = await goodRegisterPair(p);
    const [a, b] = await Promise.all([
      within(1000, p.a.ep.persistent(ra, { role: 'send', length: -1 })),
      within(1000, p.b.ep.persistent(rb, { role: 'recv', length: 256 })),
    ]);
    expect(rejection(a)).toBeInstanceOf(ArgumentRangeError);
    expectPeerFailed(b, /length must be a non-negative integer/);
    await goodTransferPair(p, ra, rb, 11);
    // A bad registration argument, on the other side this time.
    const [a2, b2] = await Promise.all([
      within(1000, p.a.ep.persistent(ra, { role: 'send', length: 256 })),
      within(1000, p.b.ep.persistent({ id: 1 } as never, { role: 'recv', length: 256 })),
    ]);
    expect(rejection(b2)).toBeInstanceOf(ArgumentTypeError);
    expectPeerFailed(a2, /Registration this endpoint made/);
    await goodTransferPair(p, ra, rb, 12);
  });

  it('unknown option keys are refused with the close match, on both sides', async () => {
    pair = await open();
    const p = pair;
    const [ra, rb] = await goodRegisterPair(p);
    const [a, b] = await Promise.all([
      within(1000, p.a.ep.persistent(ra, { role: 'send', length: 256, flag: 'kernel' } as never)),
      within(1000, p.b.ep.persistent(rb, { role: 'recv', length: 256 })),
    ]);
    const err = rejection(a);
    expect(err).toBeInstanceOf(ConfigError);
    expect(err.message).toMatch(/"flag".*did you mean "flags"/);
    expectPeerFailed(b, /"flag"/);
    await goodTransferPair(p, ra, rb, 13);
  });

  it("no matching call within timeoutMs: SMCUDA_PERSISTENT_TIMEOUT; the peer's late call fails at once; the next pair works", async () => {
    pair = await open();
    const p = pair;
    const [ra, rb] = await goodRegisterPair(p);
    await goodTransferPair(p, ra, rb, 14); // flag blocks made
    const alone = await within(2000, p.a.ep.persistent(ra, { role: 'send', length: 256, timeoutMs: 100 }));
    expect(rejection(alone).code).toBe('SMCUDA_PERSISTENT_TIMEOUT');
    await new Promise((r) => setTimeout(r, 20));
    expectPeerFailed(await within(1000, p.b.ep.persistent(rb, { role: 'recv', length: 256 })), /SMCUDA_PERSISTENT_TIMEOUT/);
    await goodTransferPair(p, ra, rb, 15);
  });

  it("the first call timing out (the flag block's registration with it): both numberings still agree afterwards", async () => {
    pair = await open();
    const p = pair;
    const [ra, rb] = await goodRegisterPair(p);
    expect(rejection(await within(2000, p.a.ep.persistent(ra, { role: 'send', length: 256, timeoutMs: 100 }))).code).toBe('SMCUDA_PERSISTENT_TIMEOUT');
    await new Promise((r) => setTimeout(r, 20));
    expectPeerFailed(await within(1000, p.b.ep.persistent(rb, { role: 'recv', length: 256 })), /./);
    await goodTransferPair(p, ra, rb, 16);
    await goodRegisterPair(p); // the registrations' numbering agrees too
  });

  it('flag slots that differ between the two sides are refused at set-up, with SMCUDA_PERSISTENT_MISMATCH on both sides', async () => {
    pair = await makePair({ a: { persistent: { flagSlots: 4 } }, b: { persistent: { flagSlots: 8 } } });
    const p = pair;
    const [ra, rb] = await goodRegisterPair(p);
    const results = await Promise.all([
      within(1000, p.a.ep.persistent(ra, { role: 'send', length: 256 })),
      within(1000, p.b.ep.persistent(rb, { role: 'recv', length: 256 })),
    ]);
    for (const r of results) {
      const err = rejection(r);
      expect(err).toBeInstanceOf(PersistentTransferError);
      expect(err.code).toBe('SMCUDA_PERSISTENT_MISMATCH');
      expect(err.message).toMatch(/persistent\.flagSlots/);
    }
  });
});

describe('the numbering never shifts, whatever fails (property)', () => {
  it('any sequence of register pairs, each good or bad on either side: a bad one fails on both, every good one matches', async () => {
    pair = await open();
    const p = pair;
    await fc.assert(
      fc.asyncProperty(fc.array(fc.constantFrom('good', 'badA', 'badB', 'timeoutA'), { minLength: 1, maxLength: 5 }), async (plan) => {
        for (const step of plan) {
          const bufA = step === 'badA' ? ({ ptr: -1n, length: 8 } as DeviceBuffer) : zeros(p.a.driver, 32);
          const bufB = step === 'badB' ? ({ ptr: 5, length: 8 } as never) : zeros(p.b.driver, 32);
          if (step === 'timeoutA') {
            expect(rejection(await within(2000, p.a.ep.register(bufA, { timeoutMs: 30 }))).code).toBe('SMCUDA_PERSISTENT_TIMEOUT');
            await new Promise((r) => setTimeout(r, 10));
            expectPeerFailed(await within(1000, p.b.ep.register(bufB)), /TIMEOUT/);
            continue;
          }
          const [a, b] = await Promise.all([within(1000, p.a.ep.register(bufA)), within(1000, p.b.ep.register(bufB))]);
          if (step === 'good') {
            expect(a.status === 'fulfilled' && b.status === 'fulfilled' && a.value.id === b.value.id).toBe(true);
          } else {
            expect(a.status).toBe('rejected');
            expect(b.status).toBe('rejected');
            expect([rejection(a).code, rejection(b).code]).toContain('SMCUDA_PERSISTENT_PEER_FAILED');
          }
        }
      }),
      { numRuns: 8 },
    );
  });
});

describe('PairedCalls alone', () => {
  it('a peer more than MAX_AHEAD calls ahead (offers or failures for calls never made here) is refused with a ProtocolError, not held without bound', async () => {
    const told: number[] = [];
    const calls = new PairedCalls<string>('register()', 'peer', (id) => told.push(id));
    for (let id = 1; id <= MAX_AHEAD / 2; id++) calls.onOffer(id, 'offer');
    for (let id = MAX_AHEAD / 2 + 1; id <= MAX_AHEAD; id++) calls.onPeerFailed(id, 'bad');
    expect(() => calls.onOffer(MAX_AHEAD + 5, 'offer')).toThrow(expect.objectContaining({ code: 'SMCUDA_BAD_REGISTRATION' }));
    expect(() => calls.onPeerFailed(MAX_AHEAD + 6, 'bad')).toThrow(/calls ahead/);
    // What was held is used by the calls as they come.
    await expect(calls.offerOf(calls.take(), 1000)).resolves.toBe('offer');
    expect(told).toEqual([]);
  });

  it('a call that failed here tells the peer once and drops the half that comes late; a failure the peer sends for it is not heard', async () => {
    const told: Array<[number, string]> = [];
    const calls = new PairedCalls<string>('persistent()', 'peer', (id, reason) => told.push([id, reason]));
    const id = calls.take();
    calls.fail(id, new RangeError('length must be a non-negative integer'));
    expect(told).toEqual([[id, 'RangeError: length must be a non-negative integer']]);
    calls.onOffer(id, 'late'); // dropped, not held for a later call
    const both = calls.take();
    calls.fail(both, new Error('here'));
    calls.onPeerFailed(both, 'there'); // both failed it: nothing waits, nothing is kept
    expect(calls.takePeerFailure(both)).toBeUndefined();
    const next = calls.take();
    calls.onOffer(next, 'next');
    await expect(calls.offerOf(next, 1000)).resolves.toBe('next');
  });
});
