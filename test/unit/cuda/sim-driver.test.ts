/**
 * What only the simulated driver does: injected faults of each kind,
 * SMCUDA_SIM / SMCUDA_SIM_VISIBLE, address reuse, clean /dev/shm, slow
 * copies that stay ordered. (What every driver does is in the contract,
 * driver-contract.ts.) Several driver instances in one process act as
 * separate processes, which keeps most of these tests in-process.
 */
import { execFileSync, spawn } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { fc, test as propTest } from '@fast-check/vitest';
import { afterEach, describe, expect, it } from 'vitest';
import { IPC_HANDLE_SIZE } from '../../../src/cuda/driver.js';
import { SimulatedCudaDriver, type SimDriverOptions } from '../../../src/cuda/sim-driver.js';
import { DEFAULT_SIM_DEVICES, simEnv, type SimDevice } from '../../../src/cuda/sim/config.js';
import { decodeHandle, encodeHandle, type SimHandle } from '../../../src/cuda/sim/ipc-handle.js';
import { sweepSimSegments } from '../../../src/cuda/sim/sweep.js';
import { CudaError, ConfigError } from '../../../src/errors.js';
import { IpcPeer } from '../../helpers/driver-contract.js';
import { patternBytes } from '../../helpers/bytes.js';

const here = dirname(fileURLToPath(import.meta.url));
const MiB = 1024 * 1024;
const [GPU0, GPU1] = DEFAULT_SIM_DEVICES.map((d) => d.uuid) as [string, string];

const open: SimulatedCudaDriver[] = [];
/** A driver, initialised, on `device`; closed after the test. `env: {}` keeps the test's environment out. */
function sim(options: SimDriverOptions = {}, device = 0): SimulatedCudaDriver {
  const d = new SimulatedCudaDriver({ env: {}, ...options });
  open.push(d);
  d.init();
  d.setDevice(device);
  return d;
}
afterEach(() => {
  for (const d of open.splice(0)) d.close();
});

function codeOf(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(CudaError);
    return (err as CudaError).code;
  }
  throw new Error('expected a CudaError, nothing was thrown');
}

/** This environment without SMCUDA_SIM*: the default world (an empty SMCUDA_SIM_VISIBLE would hide every device, as CUDA_VISIBLE_DEVICES does). */
function withoutSimEnv(): NodeJS.ProcessEnv {
  const { SMCUDA_SIM: _world, SMCUDA_SIM_VISIBLE: _visible, ...env } = process.env;
  return env;
}

function shmNamesOf(pid: number): string[] {
  return readdirSync('/dev/shm').filter((n) => n.startsWith(`smcuda-sim-${pid}-`));
}

describe('lifecycle like a real driver', () => {
  it('needs init before device calls, a device before memory, and refuses use after close', () => {
    const d = new SimulatedCudaDriver({ env: {} });
    open.push(d);
    expect(codeOf(() => d.deviceCount())).toBe('CUDA_ERROR_NOT_INITIALIZED');
    d.init();
    d.init(); // idempotent
    expect(d.isReady()).toBe(false);
    expect(codeOf(() => d.memAlloc(16))).toBe('CUDA_ERROR_INVALID_CONTEXT');
    d.setDevice(1);
    expect(d.isReady()).toBe(true);
    expect(codeOf(() => d.memAlloc(0))).toBe('CUDA_ERROR_INVALID_VALUE');
    d.close();
    expect(codeOf(() => d.memAlloc(16))).toBe('CUDA_ERROR_DEINITIALIZED');
  });

  it('cuEventDestroy returns at once while a record of the event is still queued, and waits queued on it still pass later', async () => {
    const d = new SimulatedCudaDriver({ env: {} });
    open.push(d);
    d.init();
    d.setDevice(0);
    const flag = d.memAlloc(4);
    d.memcpyHtoD(flag, new Uint32Array([0]));
    const [a, b] = [d.streamCreate(), d.streamCreate()];
    const ev = d.eventCreate();
    d.streamWaitValue32(a, flag, 1, 'geq'); // a flag nobody has written yet (a peer's, in a job)
    d.eventRecord(ev, a);
    d.streamWaitEvent(b, ev);
    d.eventDestroy(ev); // used to drain stream a, and so block on (or fail) the flag
    expect(codeOf(() => d.eventQuery(ev))).toBe('CUDA_ERROR_INVALID_HANDLE');
    d.memcpyHtoD(flag, new Uint32Array([1]));
    d.streamSynchronize(b); // b's wait on the destroyed event's record passes once the record lands
    d.streamSynchronize(a);
    expect(d.lifetimeViolations).toEqual([]);
  });

  it('refuses to open its own handle (CUDA_ERROR_INVALID_CONTEXT), but another instance may', () => {
    const a = sim();
    const b = sim();
    const p = a.memAlloc(100);
    const h = a.ipcGetMemHandle(p);
    expect(codeOf(() => a.ipcOpenMemHandle(h))).toBe('CUDA_ERROR_INVALID_CONTEXT');
    const q = b.ipcOpenMemHandle(h);
    expect(codeOf(() => b.ipcGetMemHandle(q))).toBe('CUDA_ERROR_INVALID_VALUE'); // no re-export of a mapping
    b.ipcCloseMemHandle(q);
    expect(codeOf(() => b.ipcCloseMemHandle(q))).toBe('CUDA_ERROR_INVALID_VALUE');
  });

  it('names the call and the reason when a copy overruns an allocation', () => {
    const d = sim();
    const p = d.memAlloc(1000);
    const err = (() => {
      try {
        d.memcpyHtoD(p + 900n, new Uint8Array(101));
      } catch (e) {
        return e as CudaError;
      }
    })();
    expect(err?.code).toBe('CUDA_ERROR_INVALID_VALUE');
    expect(err?.call).toBe('cuMemcpyHtoD');
    expect(err?.message).toMatch(/overrun/);
    d.memcpyHtoD(p + 900n, new Uint8Array(100)); // exactly to the end is fine
  });

  it('pinned host memory and registration are checked like the real calls', () => {
    const d = sim();
    const pinned = d.hostAlloc(64);
    expect(pinned.bytes.byteLength).toBe(64);
    // Pinned addresses have a span of their own, below every device's (0x7f00_0000_0000 + (device << 40)).
    const empty = d.hostAlloc(0);
    expect(pinned.devicePtr >= 0x7e00_0000_0000n && pinned.devicePtr < 0x7f00_0000_0000n).toBe(true);
    expect(empty.devicePtr >= 0x7e00_0000_0000n && empty.devicePtr < 0x7f00_0000_0000n).toBe(true);
    expect(empty.devicePtr).not.toBe(pinned.devicePtr);
    empty.free();
    pinned.free();
    expect(codeOf(() => pinned.free())).toBe('CUDA_ERROR_INVALID_VALUE');
    const seg = new Uint8Array(4096);
    const unregister = d.hostRegister(seg.subarray(0, 2048));
    expect(codeOf(() => d.hostRegister(seg.subarray(1024, 3000)))).toBe('CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED');
    const other = d.hostRegister(seg.subarray(2048));
    unregister();
    expect(codeOf(() => unregister())).toBe('CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED');
    other();
  });
});

describe('IPC handles', () => {
  const handleArb = fc.record({
    kind: fc.constantFrom<SimHandle['kind']>('memory', 'event'),
    size: fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER }),
    bufferId: fc.bigInt({ min: 0n, max: (1n << 64n) - 1n }),
    pid: fc.integer({ min: 0, max: 0xffffffff }),
    start: fc.integer({ min: 0, max: 0xffffffff }),
    counter: fc.integer({ min: 0, max: 0xffffffff }),
    nonce: fc.integer({ min: 0, max: 0xffffffff }),
    instance: fc.integer({ min: 0, max: 0xffffffff }),
    uuid: fc.uuid().map((u) => `GPU-${u}`),
  });

  propTest.prop([handleArb], { numRuns: 100 })('encode/decode round-trips in 64 bytes', (h) => {
    const bytes = encodeHandle(h);
    expect(bytes.byteLength).toBe(IPC_HANDLE_SIZE);
    expect(decodeHandle(bytes, h.kind)).toEqual(h);
    expect(decodeHandle(bytes, h.kind === 'memory' ? 'event' : 'memory')).toBeUndefined();
  });

  propTest.prop([handleArb, fc.nat({ max: 63 }), fc.integer({ min: 1, max: 255 })], { numRuns: 100 })(
    'any corrupted byte makes the handle garbage',
    (h, at, flip) => {
      const bytes = encodeHandle(h);
      bytes[at]! ^= flip;
      expect(decodeHandle(bytes, h.kind)).toBeUndefined();
    },
  );

  it('a handle of freed memory does not open (CUDA_ERROR_INVALID_VALUE); an existing mapping keeps its bytes', () => {
    const a = sim();
    const b = sim();
    const c = sim();
    const p = a.memAlloc(4096);
    a.memsetD8(p, 0x42, 4096);
    const h = a.ipcGetMemHandle(p);
    const q = b.ipcOpenMemHandle(h);
    a.memFree(p);
    expect(codeOf(() => c.ipcOpenMemHandle(h))).toBe('CUDA_ERROR_INVALID_VALUE');
    const out = new Uint8Array(4096);
    b.memcpyDtoH(out, q);
    expect(out.every((x) => x === 0x42)).toBe(true);
    b.ipcCloseMemHandle(q);
  });

  it('reopening an open handle counts opens: the mapping lives until the last close', () => {
    const a = sim();
    const b = sim();
    const p = a.memAlloc(64);
    const h = a.ipcGetMemHandle(p);
    const q = b.ipcOpenMemHandle(h);
    expect(b.ipcOpenMemHandle(h)).toBe(q);
    b.ipcCloseMemHandle(q);
    expect(b.memGetAddressRange(q)).toEqual({ base: q, size: 64 });
    b.ipcCloseMemHandle(q);
    expect(codeOf(() => b.memGetAddressRange(q))).toBe('CUDA_ERROR_NOT_FOUND');
  });
});

describe('address space', () => {
  it('reuses a freed address, aligned to 2 MiB, and places larger allocations after', () => {
    const d = sim();
    const a = d.memAlloc(100);
    const b = d.memAlloc(3 * MiB);
    expect(a % (2n * BigInt(MiB))).toBe(0n);
    expect(b - a).toBe(2n * BigInt(MiB));
    d.memFree(a);
    expect(d.memAlloc(2 * MiB)).toBe(a);
    const c = d.memAlloc(5 * MiB);
    expect(c).toBe(b + 4n * BigInt(MiB));
    expect(d.pointerAttributes(c).device).toBe(0);
  });

  it('each device has its own range', () => {
    const d = sim();
    const p0 = d.memAlloc(10);
    d.setDevice(1);
    const p1 = d.memAlloc(10);
    expect(d.pointerAttributes(p0).device).toBe(0);
    expect(d.pointerAttributes(p1).device).toBe(1);
    expect(p1 - p0).toBe(1n << 40n);
  });

  const opArb = fc.oneof(
    fc.record({ op: fc.constant('alloc' as const), size: fc.integer({ min: 1, max: 5 * MiB }) }),
    fc.record({ op: fc.constant('free' as const), pick: fc.nat() }),
  );

  propTest.prop([fc.array(opArb, { minLength: 1, maxLength: 30 })], { numRuns: 15 })(
    'live allocations never overlap and every interior pointer finds its own allocation',
    (ops) => {
      const d = new SimulatedCudaDriver({ env: {} });
      d.init();
      d.setDevice(0);
      const live: Array<{ ptr: bigint; size: number; id: bigint }> = [];
      try {
        for (const o of ops) {
          if (o.op === 'alloc') {
            const ptr = d.memAlloc(o.size);
            live.push({ ptr, size: o.size, id: d.pointerAttributes(ptr).bufferId });
          } else if (live.length > 0) {
            const [gone] = live.splice(o.pick % live.length, 1);
            d.memFree(gone!.ptr);
          }
          const sorted = [...live].sort((x, y) => (x.ptr < y.ptr ? -1 : 1));
          for (let i = 1; i < sorted.length; i++) {
            expect(sorted[i - 1]!.ptr + BigInt(sorted[i - 1]!.size)).toBeLessThanOrEqual(sorted[i]!.ptr);
          }
          for (const a of live) {
            const inner = a.ptr + BigInt(a.size - 1);
            expect(d.memGetAddressRange(inner)).toEqual({ base: a.ptr, size: a.size });
            expect(d.pointerAttributes(inner).bufferId).toBe(a.id);
          }
        }
        expect(new Set(live.map((a) => a.id)).size).toBe(live.length);
      } finally {
        d.close();
      }
    },
  );
});

describe('faults', () => {
  it('notReady: isReady() is false for the first N calls', () => {
    const d = sim({ faults: { notReady: { calls: 3 } } });
    expect([d.isReady(), d.isReady(), d.isReady(), d.isReady()]).toEqual([false, false, false, true]);
  });

  it('notReady: for a time window, and again after inject', () => {
    const d = sim({ faults: { notReady: { forMs: 60_000 } } });
    expect(d.isReady()).toBe(false);
    d.inject({ notReady: { untilEpochMs: Date.now() - 1 } });
    expect(d.isReady()).toBe(true);
    d.inject({ notReady: { calls: 1 } });
    expect(d.isReady()).toBe(false);
    expect(d.isReady()).toBe(true);
  });

  it('noPeerAccess: no peer access between the pair, and opens across it fail', () => {
    const a = sim({ faults: { noPeerAccess: [[GPU0, GPU1]] } }, 0);
    const b = sim({ faults: { noPeerAccess: [[0, 1]] } }, 1);
    expect(a.canAccessPeer(0, 1)).toBe(false);
    expect(a.canAccessPeer(1, 0)).toBe(false);
    expect(a.canAccessPeer(1, 1)).toBe(true);
    const h = a.ipcGetMemHandle(a.memAlloc(64));
    expect(codeOf(() => b.ipcOpenMemHandle(h))).toBe('CUDA_ERROR_PEER_ACCESS_UNSUPPORTED');
    b.setDevice(0); // same device: always fine
    b.ipcCloseMemHandle(b.ipcOpenMemHandle(h));
  });

  it("peerAccess 'none' and explicit pair lists", () => {
    const three: SimDevice[] = [0, 1, 2].map((i) => ({
      name: `GPU ${i}`,
      uuid: `GPU-00000000-0000-4000-8000-00000000000${i}`,
      pciBusId: `0000:0${i}:00.0`,
      computeCapability: [8, 0],
      totalMemory: 64 * MiB,
    }));
    const none = sim({ devices: three, peerAccess: 'none' });
    expect(none.canAccessPeer(0, 1)).toBe(false);
    const some = sim({ devices: three, peerAccess: [[0, 2]] });
    expect([some.canAccessPeer(0, 2), some.canAccessPeer(2, 0), some.canAccessPeer(0, 1)]).toEqual([true, true, false]);
  });

  it('openFailures: the next opens fail with the listed codes, in order; reopening an open handle is not affected', () => {
    const a = sim();
    const b = sim({ faults: { openFailures: ['CUDA_ERROR_ALREADY_MAPPED', 'CUDA_ERROR_OUT_OF_MEMORY'] } });
    const h1 = a.ipcGetMemHandle(a.memAlloc(64));
    const h2 = a.ipcGetMemHandle(a.memAlloc(64));
    expect(codeOf(() => b.ipcOpenMemHandle(h1))).toBe('CUDA_ERROR_ALREADY_MAPPED');
    expect(codeOf(() => b.ipcOpenMemHandle(h1))).toBe('CUDA_ERROR_OUT_OF_MEMORY');
    const q = b.ipcOpenMemHandle(h1);
    b.inject({ openFailures: ['CUDA_ERROR_TOO_MANY_PEERS'] });
    expect(b.ipcOpenMemHandle(h1)).toBe(q);
    expect(codeOf(() => b.ipcOpenMemHandle(h2))).toBe('CUDA_ERROR_TOO_MANY_PEERS');
    b.ipcOpenMemHandle(h2);
  });

  it('openFailureRate: seeded, so the same seed fails the same opens', () => {
    const a = sim();
    const handles = Array.from({ length: 12 }, () => a.ipcGetMemHandle(a.memAlloc(16)));
    const outcomes = (): string[] => {
      const b = sim({ faults: { openFailureRate: { probability: 0.5, seed: 7, codes: ['CUDA_ERROR_MAP_FAILED', 'CUDA_ERROR_OUT_OF_MEMORY'] } } });
      return handles.map((h) => {
        try {
          b.ipcOpenMemHandle(h);
          return 'ok';
        } catch (err) {
          return (err as CudaError).code;
        }
      });
    };
    const first = outcomes();
    expect(outcomes()).toEqual(first);
    expect(first).toContain('ok');
    expect(first.some((c) => c !== 'ok')).toBe(true);
    expect(first.every((c) => ['ok', 'CUDA_ERROR_MAP_FAILED', 'CUDA_ERROR_OUT_OF_MEMORY'].includes(c))).toBe(true);
  });

  it('maxOpenMappings: opens beyond the limit fail until one is closed', () => {
    const a = sim();
    const b = sim({ faults: { maxOpenMappings: 2 } });
    const hs = Array.from({ length: 3 }, () => a.ipcGetMemHandle(a.memAlloc(16)));
    const q0 = b.ipcOpenMemHandle(hs[0]!);
    b.ipcOpenMemHandle(hs[1]!);
    expect(codeOf(() => b.ipcOpenMemHandle(hs[2]!))).toBe('CUDA_ERROR_TOO_MANY_PEERS');
    b.ipcCloseMemHandle(q0);
    b.ipcOpenMemHandle(hs[2]!);
    b.inject({ maxOpenMappings: { limit: 0, code: 'CUDA_ERROR_OUT_OF_MEMORY' } });
    expect(codeOf(() => b.ipcOpenMemHandle(hs[0]!))).toBe('CUDA_ERROR_OUT_OF_MEMORY');
  });

  it('slow copies: an async copy never completes inside the call, and stream order holds', async () => {
    const d = sim({ faults: { copyDelayMs: 15, copyBandwidthGBs: 1 } });
    const size = 256 * 1024;
    const p = d.memAlloc(size);
    const s = d.streamCreate();
    const ev = d.eventCreate();
    const seen: number[][] = [];
    const outs = [1, 2, 3].map(() => new Uint8Array(size));
    outs.forEach((out, i) => {
      d.memsetD8Async(p, i + 1, size, s);
      d.memcpyDtoHAsync(out, p, s);
    });
    d.eventRecord(ev, s);
    expect(d.eventQuery(ev)).toBe(false);
    await d.whenComplete(ev);
    for (const out of outs) seen.push([out[0]!, out[size - 1]!]);
    expect(seen).toEqual([
      [1, 1],
      [2, 2],
      [3, 3],
    ]);
    // A synchronous drain runs slow work to completion too.
    d.memsetD8Async(p, 9, size, s);
    d.memcpyDtoHAsync(outs[0]!, p, s);
    d.streamSynchronize(s);
    expect(outs[0]!.every((x) => x === 9)).toBe(true);
  });

  it('rejects faults it does not understand, saying what is wrong', () => {
    expect(() => new SimulatedCudaDriver({ env: {}, faults: { openFailures: ['CUDA_ERROR_NOPE'] } })).toThrow(ConfigError);
    expect(() => new SimulatedCudaDriver({ env: {}, faults: { openFailureRate: { probability: 2 } } })).toThrow(/between 0 and 1/);
    expect(() => new SimulatedCudaDriver({ env: { SMCUDA_SIM: '{nope' } })).toThrow(/SMCUDA_SIM must be JSON/);
    expect(() => new SimulatedCudaDriver({ env: { SMCUDA_SIM_VISIBLE: '7' } })).toThrow(/out of range/);
    expect(() => new SimulatedCudaDriver({ env: {}, faults: { crashOn: { call: 'memAlloc' } } })).toThrow(/crashOn.call must name a driver call/);
    expect(() => new SimulatedCudaDriver({ env: {}, faults: { crashOn: { call: 'cuMemAlloc', after: -1 } } })).toThrow(ConfigError);
  });
});

describe('a batch runs its copies in a seeded order', () => {
  /** Which of `n` copies into one byte a batch ran last, under `seed`. */
  function lastWriter(options: SimDriverOptions, n = 6): number {
    const d = sim(options);
    const srcs = new BigUint64Array(n);
    const dsts = new BigUint64Array(n);
    const sizes = new Float64Array(n).fill(1);
    const dst = d.memAlloc(1);
    for (let k = 0; k < n; k++) {
      srcs[k] = d.memAlloc(1);
      d.memsetD8(srcs[k]!, k + 1, 1);
      dsts[k] = dst;
    }
    const s = d.streamCreate();
    d.memcpyBatchAsync(dsts, srcs, sizes, n, s);
    d.streamSynchronize(s);
    const out = new Uint8Array(1);
    d.memcpyDtoH(out, dst);
    return out[0]! - 1;
  }

  it('the same seed runs the same order; seeds differ in it, so no test can rely on batch order', () => {
    const seeds = Array.from({ length: 16 }, (_, i) => i + 1);
    const first = seeds.map((seed) => lastWriter({ batchOrderSeed: seed }));
    expect(seeds.map((seed) => lastWriter({ batchOrderSeed: seed }))).toEqual(first);
    expect(new Set(first).size).toBeGreaterThan(1);
    expect(first.some((k) => k !== 5)).toBe(true); // not always submission order
  });

  it('the seed comes from SMCUDA_SIM too, is drawn per driver when none is given, and is checked', () => {
    const env = { SMCUDA_SIM: JSON.stringify({ batchOrderSeed: 7 }) };
    expect(sim({ env }).world.batchOrderSeed).toBe(7);
    expect(lastWriter({ env })).toBe(lastWriter({ batchOrderSeed: 7 }));
    const drawn = new Set(Array.from({ length: 4 }, () => sim().world.batchOrderSeed));
    expect(drawn.size).toBeGreaterThan(1);
    for (const bad of [-1, 1.5, 2 ** 32, '3']) {
      expect(() => new SimulatedCudaDriver({ env: {}, batchOrderSeed: bad as number })).toThrow(ConfigError);
    }
  });
});

describe('the world from the environment', () => {
  it('SMCUDA_SIM carries devices and faults to a driver', () => {
    const devices: SimDevice[] = [
      { name: 'Env GPU', uuid: 'GPU-abcdef01-2345-4678-89ab-cdef01234567', pciBusId: '0000:99:00.0', computeCapability: [8, 6], totalMemory: 8 * MiB },
    ];
    const d = sim({ env: simEnv({ devices, faults: { notReady: { calls: 1 } } }) });
    expect(d.deviceCount()).toBe(1);
    expect(d.deviceInfo(0)).toMatchObject({ name: 'Env GPU', uuid: devices[0]!.uuid, computeCapability: [8, 6] });
    expect(d.isReady()).toBe(false);
    expect(d.isReady()).toBe(true);
    expect(codeOf(() => d.memAlloc(9 * MiB))).toBe('CUDA_ERROR_OUT_OF_MEMORY');
  });

  it('SMCUDA_SIM_VISIBLE reorders devices; handles still find the owner by UUID', () => {
    const swapped = sim({ env: { SMCUDA_SIM_VISIBLE: '1,0' } }, 0);
    const byUuid = sim({ env: { SMCUDA_SIM_VISIBLE: GPU1 } }, 0);
    const plain = sim({}, 0);
    expect(swapped.deviceInfo(0).uuid).toBe(GPU1);
    expect(swapped.deviceInfo(1).uuid).toBe(GPU0);
    expect(byUuid.deviceCount()).toBe(1);
    const p = swapped.memAlloc(64); // on world device 1
    const h = swapped.ipcGetMemHandle(p);
    const q = plain.ipcOpenMemHandle(h);
    // found by UUID; the mapping reports the opener's device (0), as the real driver does
    expect(plain.pointerAttributes(q).device).toBe(0);
    const r = byUuid.ipcOpenMemHandle(h);
    expect(byUuid.pointerAttributes(r).device).toBe(0);
    // A process that does not see the owner's device cannot open the handle.
    const onlyGpu1 = sim({ visible: [1] });
    const h0 = plain.ipcGetMemHandle(plain.memAlloc(64));
    expect(codeOf(() => onlyGpu1.ipcOpenMemHandle(h0))).toBe('CUDA_ERROR_INVALID_DEVICE');
  });

  it('a child process with another SMCUDA_SIM_VISIBLE numbers the same device differently', async () => {
    const d = sim({}, 1);
    const p = d.memAlloc(MiB);
    const data = patternBytes(MiB, 3);
    d.memcpyHtoD(p, data);
    const peer = await IpcPeer.start('sim', 0, { SMCUDA_SIM_VISIBLE: '1' });
    try {
      const info = await peer.call('info');
      expect(info.uuid).toBe(GPU1);
      const q = await peer.open(d.ipcGetMemHandle(p));
      expect((await peer.call('attrs', { ptr: q.toString() })).device).toBe(0);
      expect(Buffer.compare(await peer.read(q, MiB), data)).toBe(0);
    } finally {
      await peer.stop();
    }
  });
});

describe('nothing left in /dev/shm', () => {
  it('close() unlinks allocations and interprocess events, and unmaps what was opened', () => {
    const before = new Set(shmNamesOf(process.pid));
    const a = sim();
    const b = sim();
    const p = a.memAlloc(MiB);
    a.memAlloc(10);
    const ev = a.eventCreate({ interprocess: true });
    b.ipcOpenMemHandle(a.ipcGetMemHandle(p));
    b.ipcOpenEventHandle(a.ipcGetEventHandle(ev));
    expect(shmNamesOf(process.pid).filter((n) => !before.has(n)).length).toBe(3);
    b.close();
    a.close();
    expect(shmNamesOf(process.pid).filter((n) => !before.has(n))).toEqual([]);
  });

  it('memFree and eventDestroy unlink at once', () => {
    const before = new Set(shmNamesOf(process.pid));
    const a = sim();
    const p = a.memAlloc(100);
    const ev = a.eventCreate({ interprocess: true });
    a.memFree(p);
    a.eventDestroy(ev);
    expect(shmNamesOf(process.pid).filter((n) => !before.has(n))).toEqual([]);
  });

  it('a process that exits without close() leaves nothing behind', () => {
    const out = execFileSync(process.execPath, [join(here, '..', '..', 'fixtures', 'sim-exit-without-close.mjs')], { env: withoutSimEnv(), encoding: 'utf8' });
    const { pid, owned } = JSON.parse(out) as { pid: number; owned: string[] };
    expect(owned.length).toBe(3); // two allocations and an event existed before exit
    expect(shmNamesOf(pid)).toEqual([]);
  });
});

describe('segments of killed processes', () => {
  it('stay behind after SIGKILL, and sweepSimSegments removes them', async () => {
    const child = spawn(process.execPath, [join(here, '..', '..', 'fixtures', 'sim-exit-without-close.mjs'), '--hang'], {
      env: withoutSimEnv(),
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const line = await new Promise<string>((resolve) => child.stdout.once('data', (d: Buffer) => resolve(d.toString())));
    const { pid } = JSON.parse(line) as { pid: number };
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGKILL');
    await exited;
    expect(shmNamesOf(pid).length).toBe(3);
    const removed = sweepSimSegments();
    expect(shmNamesOf(pid)).toEqual([]);
    expect(removed.filter((n) => n.startsWith(`smcuda-sim-${pid}-`)).length).toBe(3);
  });
});

describe('interprocess events', () => {
  it('another instance waits on an event recorded behind slow work', async () => {
    const a = sim({ faults: { copyDelayMs: 10 } });
    const b = sim();
    const size = 64 * 1024;
    const p = a.memAlloc(size);
    const s = a.streamCreate();
    const ev = a.eventCreate({ interprocess: true });
    const remote = b.ipcOpenEventHandle(a.ipcGetEventHandle(ev));
    const q = b.ipcOpenMemHandle(a.ipcGetMemHandle(p));
    const data = patternBytes(size, 11);
    a.memcpyHtoDAsync(p, data, s);
    a.eventRecord(ev, s);
    expect(b.eventQuery(remote)).toBe(false);
    // b's stream waits for a's event, then copies out of the mapping.
    const bs = b.streamCreate();
    const out = new Uint8Array(size);
    b.streamWaitEvent(bs, remote);
    b.memcpyDtoHAsync(out, q, bs);
    const done = b.eventCreate({ disableTiming: true });
    b.eventRecord(done, bs);
    await b.whenComplete(done);
    expect(b.eventQuery(remote)).toBe(true);
    expect(Buffer.compare(out, data)).toBe(0);
  });

  it('eventElapsedTime needs timing events that completed', async () => {
    const d = sim();
    const s = d.streamCreate();
    const e1 = d.eventCreate();
    const e2 = d.eventCreate();
    expect(codeOf(() => d.eventElapsedTime(e1, e2))).toBe('CUDA_ERROR_INVALID_HANDLE');
    d.eventRecord(e1, s);
    d.eventRecord(e2, s);
    expect(codeOf(() => d.eventElapsedTime(e1, e2))).toBe('CUDA_ERROR_NOT_READY');
    await d.whenComplete(e2);
    expect(d.eventElapsedTime(e1, e2)).toBeGreaterThanOrEqual(0);
    const ipc = d.eventCreate({ interprocess: true });
    expect(codeOf(() => d.eventElapsedTime(e1, ipc))).toBe('CUDA_ERROR_INVALID_HANDLE');
  });

  it('close() rejects pending whenComplete promises', async () => {
    const d = sim({ faults: { copyDelayMs: 50 } });
    const s = d.streamCreate();
    const ev = d.eventCreate();
    d.memsetD8Async(d.memAlloc(16), 1, 16, s);
    d.eventRecord(ev, s);
    const pending = d.whenComplete(ev);
    d.close();
    await expect(pending).rejects.toMatchObject({ code: 'SMCUDA_CLOSED' });
  });
});

describe('eventQuery runs the due work ahead of its event', () => {
  /** An allocation holding `data`, another zeroed, and a read-back of the second. */
  function copyPair(d: SimulatedCudaDriver, data: Uint8Array) {
    const src = d.memAlloc(data.byteLength);
    const dst = d.memAlloc(data.byteLength);
    d.memcpyHtoD(src, data);
    d.memsetD8(dst, 0, data.byteLength);
    const read = (): Uint8Array => {
      const out = new Uint8Array(data.byteLength);
      d.memcpyDtoH(out, dst);
      return out;
    };
    return { src, dst, read };
  }
  const zeros = (n: number) => new Uint8Array(n);

  it('an async copy does not complete inside the call; the first query runs it and returns true', () => {
    const d = sim();
    const s = d.streamCreate();
    const ev = d.eventCreate({ disableTiming: true });
    const data = patternBytes(4096, 3);
    const { src, dst, read } = copyPair(d, data);
    d.memcpyAsync(dst, src, data.byteLength, s);
    d.eventRecord(ev, s);
    expect(read()).toEqual(zeros(data.byteLength));
    expect(d.eventQuery(ev)).toBe(true);
    expect(read()).toEqual(data);
    expect(d.eventQuery(ev)).toBe(true);
  });

  it('on the default stream too, and for every kind of async work queued before the event', () => {
    const d = sim();
    const ev = d.eventCreate();
    const data = patternBytes(1000, 4);
    const p = d.memAlloc(1000);
    const back = new Uint8Array(1000);
    d.memcpyHtoDAsync(p, data, 0n);
    d.memcpyDtoHAsync(back, p, 0n);
    d.memsetD8Async(p, 7, 10, 0n);
    d.eventRecord(ev, 0n);
    expect(back).toEqual(zeros(1000));
    expect(d.eventQuery(ev)).toBe(true);
    expect(back).toEqual(data);
    const out = new Uint8Array(10);
    d.memcpyDtoH(out, p);
    expect(out).toEqual(new Uint8Array(10).fill(7));
  });

  it('stops at its event: work queued after the event is left for later', async () => {
    const d = sim();
    const s = d.streamCreate();
    const ev = d.eventCreate({ disableTiming: true });
    const first = patternBytes(512, 5);
    const second = patternBytes(512, 6);
    const a = copyPair(d, first);
    const b = copyPair(d, second);
    d.memcpyAsync(a.dst, a.src, 512, s);
    d.eventRecord(ev, s);
    d.memcpyAsync(b.dst, b.src, 512, s);
    expect(d.eventQuery(ev)).toBe(true);
    expect(a.read()).toEqual(first);
    expect(b.read()).toEqual(zeros(512));
    const end = d.eventCreate({ disableTiming: true });
    d.eventRecord(end, s);
    await d.whenComplete(end);
    expect(b.read()).toEqual(second);
  });

  it('does not complete work whose simulated duration has not elapsed', () => {
    const d = sim();
    const s = d.streamCreate();
    const ev = d.eventCreate({ disableTiming: true });
    const data = patternBytes(256, 7);
    const { src, dst, read } = copyPair(d, data);
    // Only this copy is slow (a copy's duration is fixed when it is queued; synchronous copies take it too).
    // The test never comes near its end: the driver closes with it still queued.
    d.inject({ copyDelayMs: 60_000 });
    d.memcpyAsync(dst, src, 256, s);
    d.inject({ copyDelayMs: 0 });
    d.eventRecord(ev, s);
    for (let i = 0; i < 3; i++) expect(d.eventQuery(ev)).toBe(false);
    expect(read()).toEqual(zeros(256));
  });

  it('completes work whose simulated duration elapsed meanwhile, without the event loop turning', () => {
    const d = sim();
    const s = d.streamCreate();
    const ev = d.eventCreate({ disableTiming: true });
    const data = patternBytes(256, 8);
    const { src, dst, read } = copyPair(d, data);
    d.inject({ copyDelayMs: 30 });
    d.memcpyAsync(dst, src, 256, s);
    d.inject({ copyDelayMs: 0 });
    d.eventRecord(ev, s);
    // Block the thread past the copy's duration: its timer cannot fire meanwhile, so only the query can run it.
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 40);
    expect(read()).toEqual(zeros(256));
    expect(d.eventQuery(ev)).toBe(true);
    expect(read()).toEqual(data);
  });

  it('an event recorded behind a wait on an incomplete event reads false, and the later work does not run', async () => {
    const d = sim();
    const [s1, s2] = [d.streamCreate(), d.streamCreate()];
    const gate = d.eventCreate({ disableTiming: true });
    const ev = d.eventCreate({ disableTiming: true });
    const first = patternBytes(512, 9);
    const second = patternBytes(512, 10);
    const a = copyPair(d, first);
    const b = copyPair(d, second);
    d.memcpyAsync(a.dst, a.src, 512, s1);
    d.eventRecord(gate, s1); // recorded, not yet complete
    d.streamWaitEvent(s2, gate);
    d.memcpyAsync(b.dst, b.src, 512, s2);
    d.eventRecord(ev, s2);
    expect(d.eventQuery(ev)).toBe(false);
    expect(b.read()).toEqual(zeros(512)); // behind the wait: not run
    expect(a.read()).toEqual(zeros(512)); // a query of ev does not run the other stream's work either
    expect(d.eventQuery(ev)).toBe(false);
    // Once the gate completes (its own query runs s1), a query of ev gets through the wait.
    expect(d.eventQuery(gate)).toBe(true);
    expect(a.read()).toEqual(first);
    expect(d.eventQuery(ev)).toBe(true);
    expect(b.read()).toEqual(second);
  });

  // A query that drops a ready wait (here: another instance's event completed
  // before this instance's 1 ms poll noticed) must start the slow work behind
  // it, or that work never becomes due.
  it('a query that gets past a remote wait starts the slow work behind it', () => {
    const a = sim();
    const b = sim();
    const as = a.streamCreate();
    const remoteSide = a.eventCreate({ interprocess: true });
    a.eventRecord(remoteSide, as);
    const gate = b.ipcOpenEventHandle(a.ipcGetEventHandle(remoteSide));
    const bs = b.streamCreate();
    const ev = b.eventCreate({ disableTiming: true });
    const data = patternBytes(128, 12);
    const pair = copyPair(b, data);
    b.streamWaitEvent(bs, gate);
    b.inject({ copyDelayMs: 5 });
    b.memcpyAsync(pair.dst, pair.src, 128, bs);
    b.inject({ copyDelayMs: 0 });
    b.eventRecord(ev, bs);
    expect(a.eventQuery(remoteSide)).toBe(true); // the other instance's event completes
    expect(b.eventQuery(ev)).toBe(false); // through the wait; the copy starts now
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 20); // past the copy's 5 ms
    expect(b.eventQuery(ev)).toBe(true);
    expect(pair.read()).toEqual(data);
  });

  it('a wait on an event of another instance that is held by slow work keeps the query false', () => {
    const a = sim({ faults: { copyDelayMs: 60_000 } });
    const b = sim();
    const as = a.streamCreate();
    const remoteSide = a.eventCreate({ interprocess: true });
    a.memsetD8Async(a.memAlloc(64), 1, 64, as);
    a.eventRecord(remoteSide, as);
    const gate = b.ipcOpenEventHandle(a.ipcGetEventHandle(remoteSide));
    const bs = b.streamCreate();
    const ev = b.eventCreate({ disableTiming: true });
    const data = patternBytes(128, 11);
    const pair = copyPair(b, data);
    b.streamWaitEvent(bs, gate);
    b.memcpyAsync(pair.dst, pair.src, 128, bs);
    b.eventRecord(ev, bs);
    expect(b.eventQuery(ev)).toBe(false);
    expect(pair.read()).toEqual(zeros(128));
  });
});
