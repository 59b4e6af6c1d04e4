/**
 * The data path's warm-up (src/data-path-warm-up.ts): once per process, two
 * in-memory endpoints on simulated drivers move one message by EAGER and one
 * by RGET, so a fresh process's first real message runs compiled code; it
 * gives way to real work (src/warm-up-yield.ts): it stops after the step it
 * is in and closes later, or does not start. Transport.create starts it only
 * for the native driver; here it is called directly.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { DeviceBuffer } from '../../../src/buffers.js';
import type { SimulatedCudaDriver } from '../../../src/cuda/sim-driver.js';
import { runWarmUp, warmDataPath } from '../../../src/data-path-warm-up.js';
import type { Endpoint } from '../../../src/endpoint.js';
import { ConfigError } from '../../../src/errors.js';
import { Transport, type TransportCreateOptions } from '../../../src/transport.js';
import { firstRealWork, isYielding, markWarmUpDriver, resetRealWork } from '../../../src/warm-up-yield.js';
import { createMemoryChannelPair } from '../../../src/channel/memory-channel.js';
import { FdChannel } from '../../../src/channel/fd-channel.js';
import { deviceWith, makePair, makeSide, type Pair, randomBytes, readDevice, sameBytes, type Side } from '../../helpers/transport-pair.js';

const closers: Array<() => Promise<void>> = [];

beforeEach(() => {
  // Real work in an earlier test (this file's endpoints) must not stop this one's warm-up.
  resetRealWork();
});

afterEach(async () => {
  vi.restoreAllMocks();
  for (const close of closers.splice(0)) await close();
});

/** Transport.create that keeps each transport it made in `made` (and its driver in `drivers`); `tweak` sees each as it is made. */
function recordingCreate(
  made: Transport[],
  tweak?: (t: Transport) => void,
  drivers: SimulatedCudaDriver[] = [],
): (o: TransportCreateOptions) => Promise<Transport> {
  return async (o) => {
    const t = await Transport.create(o);
    made.push(t);
    drivers.push(o.driver as SimulatedCudaDriver);
    tweak?.(t);
    return t;
  };
}

/** A job token for this file's own pairs (no SMCUDA_NO_TOKEN warning: the first test checks the warm-up's). */
const token = { token: 'warm-up-test' };

/** A real pair of endpoints on simulated drivers, closed after the test. */
async function realPair(): Promise<Pair> {
  const pair = await makePair({ a: token, b: token });
  closers.push(() => pair.close());
  return pair;
}

describe('warmDataPath', () => {
  it('moves one message by EAGER and one by RGET, closes what it opened, and runs once per process', async () => {
    const made: Transport[] = [];
    const create = recordingCreate(made);
    const warn = vi.spyOn(process, 'emitWarning');
    const first = warmDataPath(create);
    const report = await first;
    expect(report).toMatchObject({
      outcome: 'done',
      steps: ['simulator', 'transport-0', 'transport-1', 'attached', 'eager', 'negotiated', 'rget'],
      paths: { eager: 1, rget: 1 },
    });
    // No real work: everything was closed before the report came; its own endpoints are no real work.
    expect(isYielding()).toBe(false);
    await report.closed;
    expect(made).toHaveLength(2);
    for (const t of made) {
      expect(t.endpoints()).toEqual([]);
      expect(() => t.useDevice()).toThrow(/closed/);
    }
    // Its transports carry a token: no SMCUDA_NO_TOKEN warning reaches the application.
    expect(made.map((t) => t.id)).toEqual(['warm-up-0', 'warm-up-1']);
    expect(warn).not.toHaveBeenCalled();
    expect(warmDataPath(create)).toBe(first);
    expect(made).toHaveLength(2);
  });
});

describe('runWarmUp', () => {
  it('gives up after its time limit and closes what it opened', async () => {
    const made: Transport[] = [];
    // A step that never completes: the second transport's attach hangs.
    const create = recordingCreate(made, (t) => {
      if (made.length === 2) t.attach = () => new Promise<never>(() => {});
    });
    const t0 = performance.now();
    const report = await runWarmUp(create, 200);
    expect(report).toMatchObject({ outcome: 'failed', steps: ['simulator', 'transport-0', 'transport-1'], error: 'not done within 200 ms' });
    expect(performance.now() - t0).toBeGreaterThanOrEqual(190);
    expect(made).toHaveLength(2);
    for (const t of made) expect(() => t.useDevice()).toThrow(/closed/);
    // The attach that did run was failed by its transport's close.
    expect(made[0]!.endpoints()).toEqual([]);
  });

  it("reports 'failed' when a step fails (a failed warm-up costs only speed)", async () => {
    const create = async (o: TransportCreateOptions) => Transport.create({ ...o, negotiation: { ipc: false } });
    await expect(runWarmUp(create)).resolves.toMatchObject({ outcome: 'failed', error: expect.stringMatching(/negotiation ended BAD/) });
  });
});

describe('runWarmUp gives way to real work', () => {
  it('stops after the step it is in when a real endpoint sends meanwhile, closes later, and the real message arrives whole', async () => {
    const pair = await realPair();
    const bytes = randomBytes(64 << 10, 43);
    const src = deviceWith(pair.a.driver, bytes);
    const into: DeviceBuffer = { ptr: pair.b.driver.memAlloc(bytes.byteLength), length: bytes.byteLength };
    let real: Promise<unknown> | undefined;
    const made: Transport[] = [];
    const drivers: SimulatedCudaDriver[] = [];
    // While the warm-up's first message is in flight, the application sends its own.
    const create = recordingCreate(
      made,
      (t) => {
        if (made.length !== 1) return;
        const attach = t.attach.bind(t);
        t.attach = async (...args: Parameters<Transport['attach']>) => {
          const ep = await attach(...args);
          const send = ep.send.bind(ep);
          ep.send = (...sendArgs: Parameters<Endpoint['send']>) => {
            const sent = send(...sendArgs);
            real ??= Promise.all([pair.a.ep.send(src, { tag: 9 }), pair.b.ep.recv({ tag: 9, into })]);
            return sent;
          };
          return ep;
        };
      },
      drivers,
    );
    const report = await runWarmUp(create);
    expect(real).toBeDefined();
    expect(report).toMatchObject({ outcome: 'yielded', steps: ['simulator', 'transport-0', 'transport-1', 'attached', 'eager'], paths: { eager: 1 } });
    expect(firstRealWork()).toEqual({ peerId: 'b', what: 'a device send' });
    // Not closed yet: the close waits (a timer), off the real message's way.
    for (const t of made) expect(t.endpoints()).toHaveLength(1);
    await real;
    expect(sameBytes(readDevice(pair.b.driver, into), bytes)).toBe(true);
    await report.closed;
    for (const t of made) {
      expect(t.endpoints()).toEqual([]);
      expect(() => t.useDevice()).toThrow(/closed/);
    }
    expect(drivers).toHaveLength(2);
    for (const d of drivers) expect(d.lifetimeViolations).toEqual([]);
  });

  it('does not start when real work came first', async () => {
    const pair = await realPair();
    const into: DeviceBuffer = { ptr: pair.b.driver.memAlloc(16), length: 16 };
    const got = pair.b.ep.recv({ tag: 1, into });
    expect(isYielding()).toBe(true);
    const made: Transport[] = [];
    const report = await runWarmUp(recordingCreate(made));
    expect(report).toMatchObject({ outcome: 'skipped', steps: [], paths: {} });
    await report.closed;
    expect(made).toEqual([]);
    await pair.a.ep.send(deviceWith(pair.a.driver, randomBytes(16, 1)), { tag: 1 });
    await got;
  });
});

describe('real work (src/warm-up-yield.ts)', () => {
  /** Two endpoints, `a` on a driver marked as the warm-up's (its work is no real work), `b` a real one. */
  async function markedPair(): Promise<{ a: Side & { ep: Endpoint }; b: Side & { ep: Endpoint } }> {
    const a = await makeSide('a', 0, token);
    markWarmUpDriver(a.driver);
    const b = await makeSide('b', 1, token);
    closers.push(async () => {
      await a.transport.close();
      await b.transport.close();
      a.driver.close();
      b.driver.close();
    });
    const [ca, cb] = createMemoryChannelPair({ names: ['a', 'b'] });
    const [da, db] = FdChannel.pair();
    const [epA, epB] = await Promise.all([a.transport.attach(ca, { descriptors: da }), b.transport.attach(cb, { descriptors: db })]);
    return { a: { ...a, ep: epA }, b: { ...b, ep: epB } };
  }

  it('host messages and the handshake are none; a device receive posted or negotiate() is', async () => {
    const pair = await realPair();
    await Promise.all([pair.a.ep.send(new Uint8Array([1, 2, 3]), { tag: 1 }), pair.b.ep.recv({ tag: 1 })]);
    expect(isYielding()).toBe(false);
    const into: DeviceBuffer = { ptr: pair.b.driver.memAlloc(8), length: 8 };
    const got = pair.b.ep.recv({ tag: 2, into });
    expect(firstRealWork()).toEqual({ peerId: 'a', what: 'a device receive' });
    await Promise.all([pair.a.ep.send(deviceWith(pair.a.driver, randomBytes(8, 2)), { tag: 2 }), got]);

    resetRealWork();
    const other = await realPair();
    const negotiated = other.a.ep.negotiate();
    expect(firstRealWork()).toEqual({ peerId: 'b', what: 'negotiate()' });
    await expect(negotiated).resolves.toBe('OK');
  });

  it("the warm-up's own endpoints are none; a device message arriving at a real one, or the peer's negotiation, is", async () => {
    const pair = await markedPair();
    const sent = pair.a.ep.send(deviceWith(pair.a.driver, randomBytes(8, 3)), { tag: 1 });
    expect(isYielding()).toBe(false); // a's own work: a is the warm-up's
    await sent; // EAGER: resolved once the frame left
    await pair.b.ep.recv({ tag: 1 }); // a receive without `into`: no real work of its own
    expect(firstRealWork()).toEqual({ peerId: 'a', what: 'a device message arrived' });

    resetRealWork();
    const other = await markedPair();
    await expect(other.a.ep.negotiate()).resolves.toBe('OK');
    expect(firstRealWork()).toEqual({ peerId: 'a', what: "the peer's negotiation" });
  });
});

describe('Transport.create warmUp option', () => {
  it('refuses anything but a boolean', async () => {
    await expect(Transport.create({ driver: 'sim', token: 't', warmUp: 'yes' as unknown as boolean })).rejects.toThrow(ConfigError);
    await expect(Transport.create({ driver: 'sim', token: 't', warmUp: 'yes' as unknown as boolean })).rejects.toThrow(/warmUp must be a boolean/);
  });
});
