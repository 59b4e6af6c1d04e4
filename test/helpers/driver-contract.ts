/**
 * The CudaDriver contract: one list of cases that every driver must pass.
 * test/unit/cuda/driver-contract.test.ts runs it on the simulator (always);
 * test/gpu/driver-contract.gpu.test.ts runs it on the native driver where a
 * GPU is present, and reports every case as skipped where not.
 *
 * IPC cases use a REAL second process (test/fixtures/ipc-peer.mjs, compiled
 * code: `npx tsc -p .` first) that opens the same driver kind through
 * openDriver and serves the worker protocol (IpcPeer below).
 */
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { fc, test as propTest } from '@fast-check/vitest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CudaDriver, DriverKind } from '../../src/cuda/driver.js';
import { CudaError } from '../../src/errors.js';
import { DTYPE_BYTES, DTYPES, dtypeOpSupported, FLOAT_DTYPES, opCode, reduceArg, reduceEntry } from '../../src/kernels/dtypes.js';
import { reducePtx } from '../../src/kernels/reduce.ptx.js';
import { reduceInto } from '../../src/kernels/sim/reduce.js';
import { fdMemoryCases } from './driver-contract-fd.js';
import { patternBytes } from './bytes.js';
import { spawnPeer, type WorkerClient } from './child.js';

const here = dirname(fileURLToPath(import.meta.url));
const COMPILED_OPEN_DRIVER = join(here, '..', '..', 'dist', 'src', 'cuda', 'open-driver.js');

const MiB = 1024 * 1024;

export interface ContractOptions {
  /** Driver kind the child processes open (SMCUDA_CONTRACT_DRIVER). */
  kind: DriverKind;
  /** Devices the driver sees; cross-device cases need 2 (and peer access between 0 and 1). */
  devices: number;
  /** Skip every case, visibly (e.g. no GPU here); the string says why. */
  skip?: string | false;
  /** Extra environment of child processes (e.g. SMCUDA_SIM). */
  childEnv?: Record<string, string>;
}

// -- a second process ---------------------------------------------------------------

/** A child process running test/fixtures/ipc-peer.mjs, over the worker protocol (test/helpers/child.ts). */
export class IpcPeer {
  private constructor(private readonly client: WorkerClient) {}

  /** Starts a peer that opens driver `kind` on `device`; rejects with the child's stderr if it could not start. */
  static async start(kind: DriverKind, device: number, env: Record<string, string> = {}): Promise<IpcPeer> {
    if (!existsSync(COMPILED_OPEN_DRIVER)) {
      throw new Error(`${COMPILED_OPEN_DRIVER} is missing: build with \`npx tsc -p .\` before running the IPC tests`);
    }
    return new IpcPeer(await spawnPeer('ipc-peer.mjs', { env: { ...env, SMCUDA_CONTRACT_DRIVER: kind, SMCUDA_CONTRACT_DEVICE: String(device) } }));
  }

  /** Runs `cmd` in the child; a failure rejects with its error code (WorkerCommandError). */
  call(cmd: string, args: Record<string, unknown> = {}): Promise<Record<string, unknown>> {
    return this.client.call(cmd, args);
  }

  async open(handle: Uint8Array): Promise<bigint> {
    return BigInt((await this.call('open', { handle: hex(handle) })).ptr as string);
  }

  async read(ptr: bigint, length: number): Promise<Uint8Array> {
    return unhex((await this.call('read', { ptr: ptr.toString(), length })).hex as string);
  }

  stop(): Promise<void> {
    return this.client.exit();
  }
}

export const hex = (b: Uint8Array): string => Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString('hex');
export const unhex = (s: string): Uint8Array => new Uint8Array(Buffer.from(s, 'hex'));

function expectCudaError(fn: () => unknown, code?: string): CudaError {
  let caught: unknown;
  try {
    fn();
  } catch (err) {
    caught = err;
  }
  expect(caught).toBeInstanceOf(CudaError);
  if (code) expect((caught as CudaError).code).toBe(code);
  return caught as CudaError;
}

// -- the contract -------------------------------------------------------------------

export function driverContract(name: string, makeDriver: () => CudaDriver | Promise<CudaDriver>, opts: ContractOptions): void {
  describe.skipIf(Boolean(opts.skip))(`CudaDriver contract: ${name}${opts.skip ? ` (skipped: ${opts.skip})` : ''}`, () => {
    let d: CudaDriver;

    beforeAll(async () => {
      d = await makeDriver();
      d.init();
      d.setDevice(0);
    });
    afterAll(() => d?.close());

    describe('devices', () => {
      it('reports devices with UUIDs and a current device', () => {
        expect(d.status().available).toBe(true);
        expect(d.isReady()).toBe(true);
        expect(d.deviceCount()).toBeGreaterThanOrEqual(1);
        const info = d.deviceInfo(0);
        expect(info.index).toBe(0);
        expect(info.uuid).toMatch(/^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
        expect(info.totalMemory).toBeGreaterThan(0);
        expect(Number.isSafeInteger(info.multiprocessors) && info.multiprocessors > 0).toBe(true);
        expect(d.canAccessPeer(0, 0)).toBe(true);
        expect(d.currentDevice()).toBe(0);
      });

      it('refuses a device that does not exist', () => {
        expectCudaError(() => d.setDevice(d.deviceCount()), 'CUDA_ERROR_INVALID_DEVICE');
        expect(d.currentDevice()).toBe(0);
      });
    });

    describe('memory', () => {
      it('allocates and frees; a double free is CUDA_ERROR_INVALID_VALUE', () => {
        const p = d.memAlloc(4096);
        expect(p).toBeGreaterThan(0n);
        d.memFree(p);
        expectCudaError(() => d.memFree(p), 'CUDA_ERROR_INVALID_VALUE');
      });

      it('refuses bad arguments before the driver sees them', () => {
        expect(() => d.memAlloc(-1)).toThrow(RangeError);
        expect(() => d.memAlloc('8' as unknown as number)).toThrow(TypeError);
        expect(() => d.memFree(1 as unknown as bigint)).toThrow(TypeError);
        expect(() => d.ipcOpenMemHandle(new Uint8Array(10))).toThrow(RangeError);
        expect(() => d.memsetD8(1n, 256, 1)).toThrow(RangeError);
      });

      propTest.prop([fc.integer({ min: 1, max: 3 * MiB }), fc.integer({ min: 0, max: 255 })], { numRuns: 6 })(
        'memsetD8 fills exactly the bytes asked',
        (size, value) => {
          const p = d.memAlloc(size + 64);
          try {
            d.memsetD8(p, value ^ 0xff, size + 64);
            d.memsetD8(p, value, size);
            const out = new Uint8Array(size + 64);
            d.memcpyDtoH(out, p);
            expect(out.subarray(0, size).every((b) => b === value)).toBe(true);
            expect(out.subarray(size).every((b) => b === (value ^ 0xff))).toBe(true);
          } finally {
            d.memFree(p);
          }
        },
      );

      propTest.prop([fc.integer({ min: 1, max: 4 * MiB }), fc.integer()], { numRuns: 6 })('HtoD then DtoH returns the same bytes', (size, seed) => {
        const data = patternBytes(size, seed);
        const p = d.memAlloc(size);
        try {
          d.memcpyHtoD(p, data);
          const out = new Uint8Array(size);
          d.memcpyDtoH(out, p);
          expect(Buffer.compare(out, data)).toBe(0);
        } finally {
          d.memFree(p);
        }
      });

      propTest.prop(
        [
          fc.integer({ min: 1, max: MiB }).chain((size) =>
            fc.record({
              size: fc.constant(size),
              srcOff: fc.integer({ min: 0, max: size - 1 }),
              dstOff: fc.integer({ min: 0, max: size - 1 }),
              seed: fc.integer(),
            }),
          ),
        ],
        { numRuns: 8 },
      )('DtoD copies a range between allocations at any offsets', ({ size, srcOff, dstOff, seed }) => {
        const len = Math.min(size - srcOff, size - dstOff);
        const data = patternBytes(size, seed);
        const src = d.memAlloc(size);
        const dst = d.memAlloc(size);
        try {
          d.memcpyHtoD(src, data);
          d.memsetD8(dst, 0, size);
          d.memcpyDtoD(dst + BigInt(dstOff), src + BigInt(srcOff), len);
          const out = new Uint8Array(size);
          d.memcpyDtoH(out, dst);
          expect(Buffer.compare(out.subarray(dstOff, dstOff + len), data.subarray(srcOff, srcOff + len))).toBe(0);
          expect(out.subarray(0, dstOff).every((b) => b === 0)).toBe(true);
          expect(out.subarray(dstOff + len).every((b) => b === 0)).toBe(true);
        } finally {
          d.memFree(src);
          d.memFree(dst);
        }
      });

      it('memGetAddressRange and pointerAttributes of an interior pointer name the allocation', () => {
        const size = 3 * MiB + 5;
        const p = d.memAlloc(size);
        try {
          const inner = p + 12345n;
          expect(d.memGetAddressRange(inner)).toEqual({ base: p, size });
          const a = d.pointerAttributes(inner);
          const b = d.pointerAttributes(p);
          expect(a.bufferId).toBe(b.bufferId);
          expect(d.bufferId(inner)).toBe(a.bufferId);
          expect(a.device).toBe(0);
          expect(a.memoryType).toBe('device');
        } finally {
          d.memFree(p);
        }
      });

      it('a copy far outside any allocation fails with a CudaError', () => {
        const p = d.memAlloc(4096);
        try {
          expectCudaError(() => d.memcpyDtoH(new Uint8Array(16), p + (1n << 39n)));
          expectCudaError(() => d.memcpyHtoD(p + (1n << 39n), new Uint8Array(16)));
        } finally {
          d.memFree(p);
        }
      });

      it('free then allocate the same size: new buffer id and new IPC handle bytes', () => {
        const size = 2 * MiB;
        const p1 = d.memAlloc(size);
        const id1 = d.pointerAttributes(p1).bufferId;
        const h1 = d.ipcGetMemHandle(p1);
        d.memFree(p1);
        const p2 = d.memAlloc(size);
        try {
          // The real driver typically hands back the same address; the simulator always does.
          if (opts.kind === 'sim') expect(p2).toBe(p1);
          expect(d.pointerAttributes(p2).bufferId).not.toBe(id1);
          expect(d.bufferId(p2)).toBe(d.pointerAttributes(p2).bufferId);
          expect(hex(d.ipcGetMemHandle(p2))).not.toBe(hex(h1));
        } finally {
          d.memFree(p2);
        }
      });

      it('memAllocBuffer: an allocation that knows its length and device, and that it was freed (its address given again too)', () => {
        const a = d.memAllocBuffer(2 * MiB);
        expect(a).toMatchObject({ length: 2 * MiB, device: 0, freed: false });
        expect(d.memGetAddressRange(a.ptr)).toEqual({ base: a.ptr, size: 2 * MiB });
        d.memFree(a.ptr); // behind the object's back: it knows
        expect(a.freed).toBe(true);
        const b = d.memAllocBuffer(2 * MiB);
        expect([a.freed, b.freed]).toEqual([true, false]);
        b.free();
        expect(b.freed).toBe(true);
        b.free(); // twice: nothing
        expectCudaError(() => d.memFree(b.ptr), 'CUDA_ERROR_INVALID_VALUE');
      });
    });

    describe('pinned host memory through its device address', () => {
      it('memcpyAsync reads what JS wrote into bytes through devicePtr, at any offset', () => {
        const size = 64 * 1024 + 3;
        const data = patternBytes(size, 31);
        const pinned = d.hostAlloc(size);
        const p = d.memAlloc(size);
        const s = d.streamCreate();
        try {
          expect(pinned.devicePtr).toBeTypeOf('bigint');
          expect(pinned.devicePtr).toBeGreaterThan(0n);
          pinned.bytes.set(data);
          d.memcpyAsync(p, pinned.devicePtr, size, s);
          d.streamSynchronize(s);
          const out = new Uint8Array(size);
          d.memcpyDtoH(out, p);
          expect(Buffer.compare(out, data)).toBe(0);
          d.memcpyAsync(p, pinned.devicePtr + 1000n, 24, s);
          d.streamSynchronize(s);
          d.memcpyDtoH(out.subarray(0, 24), p);
          expect(Buffer.compare(out.subarray(0, 24), data.subarray(1000, 1024))).toBe(0);
        } finally {
          d.streamDestroy(s);
          d.memFree(p);
          pinned.free();
        }
      });

      it('a device-to-pinned copy and a memset to devicePtr show in bytes', () => {
        const size = 256 * 1024;
        const data = patternBytes(size, 32);
        const pinned = d.hostAlloc(size);
        const p = d.memAlloc(size);
        const s = d.streamCreate();
        try {
          d.memcpyHtoD(p, data);
          d.streamSynchronize(0n); // pageable HtoD may return before the device has the bytes
          d.memcpyAsync(pinned.devicePtr, p, size, s);
          d.streamSynchronize(s);
          expect(Buffer.compare(pinned.bytes, data)).toBe(0);
          d.memsetD8Async(pinned.devicePtr + 100n, 0x5a, 50, s);
          d.streamSynchronize(s);
          expect(pinned.bytes.subarray(100, 150).every((b) => b === 0x5a)).toBe(true);
          expect(Buffer.compare(pinned.bytes.subarray(0, 100), data.subarray(0, 100))).toBe(0);
          expect(Buffer.compare(pinned.bytes.subarray(150), data.subarray(150))).toBe(0);
        } finally {
          d.streamDestroy(s);
          d.memFree(p);
          pinned.free();
        }
      });

      it('a kernel writes its output through devicePtr', (ctx) => {
        if (!d.gpuDrivenStatus().modules) ctx.skip(`modules: ${d.gpuDrivenStatus().reason ?? 'not supported'}`);
        const count = 1000;
        const inputs = [0, 1].map((k) => patternBytes(count * 4, 55 + k));
        const want = new Uint8Array(count * 4);
        reduceInto('sum', 'i32', want, inputs, count);
        const { module } = d.moduleLoadData(reducePtx());
        const fn = d.moduleGetFunction(module, reduceEntry('i32'));
        const ptrs = inputs.map((b) => {
          const p = d.memAlloc(b.byteLength);
          d.memcpyHtoD(p, b);
          return p;
        });
        const table = d.memAlloc(8 * 2);
        d.memcpyHtoD(table, new Uint8Array(new BigUint64Array(ptrs).buffer));
        const pinned = d.hostAlloc(count * 4);
        const s = d.streamCreate();
        try {
          d.launchKernel(
            fn,
            { grid: [4], block: [128] },
            [
              { type: 'ptr', value: pinned.devicePtr },
              { type: 'ptr', value: table },
              { type: 'u32', value: 2 },
              { type: 'u64', value: 0n },
              { type: 'u64', value: BigInt(count) },
              { type: 'u32', value: opCode('sum') },
              { type: 'f64', value: 1 },
            ],
            s,
          );
          d.streamSynchronize(s);
          expect(Buffer.compare(pinned.bytes, want)).toBe(0);
        } finally {
          d.streamDestroy(s);
          for (const p of [...ptrs, table]) d.memFree(p);
          pinned.free();
          d.moduleUnload(module);
        }
      });

      // A real driver does not bound-check host memory (a copy past the end reads or writes whatever lies
      // there) and keeps no record of freed host addresses: these are the simulator's checks.
      // (Inside a skipped suite, a nested skipIf would hide the case from the skip count.)
      const notSim = opts.kind !== 'sim' && !opts.skip;
      const simOnly = notSim ? " (skipped: the simulator's check; a real driver neither bound-checks host memory nor tracks freed host addresses)" : '';
      it.skipIf(notSim)(`the simulator refuses a copy past the end of a pinned buffer as one past the end of an allocation${simOnly}`, () => {
        const size = 4096;
        const pinned = d.hostAlloc(size);
        const p = d.memAlloc(size);
        const s = d.streamCreate();
        try {
          const device = expectCudaError(() => d.memcpyDtoH(new Uint8Array(size + 1), p));
          expectCudaError(() => d.memcpyAsync(p, pinned.devicePtr + BigInt(size - 8), 16, s), device.code);
          expectCudaError(() => d.memcpyAsync(pinned.devicePtr + BigInt(size - 8), p, 16, s), device.code);
          expectCudaError(() => d.memcpyDtoH(new Uint8Array(size + 1), pinned.devicePtr), device.code);
          expectCudaError(() => d.memsetD8Async(pinned.devicePtr, 0, size + 1, s), device.code);
          expect(device.code).toBe('CUDA_ERROR_INVALID_VALUE');
          d.memcpyAsync(p, pinned.devicePtr + BigInt(size - 16), 16, s); // exactly to the end is fine
          d.streamSynchronize(s);
        } finally {
          d.streamDestroy(s);
          d.memFree(p);
          pinned.free();
        }
      });

      it.skipIf(notSim)(`the simulator refuses a freed pinned buffer's address; pointer attributes refuse pinned addresses as unknown${simOnly}`, () => {
        const pinned = d.hostAlloc(4096);
        const p = d.memAlloc(4096);
        const s = d.streamCreate();
        try {
          expectCudaError(() => d.pointerAttributes(pinned.devicePtr), 'CUDA_ERROR_INVALID_VALUE');
          expectCudaError(() => d.bufferId(pinned.devicePtr), 'CUDA_ERROR_INVALID_VALUE');
          expectCudaError(() => d.memGetAddressRange(pinned.devicePtr), 'CUDA_ERROR_NOT_FOUND');
          d.memcpyAsync(p, pinned.devicePtr, 4096, s);
          d.streamSynchronize(s);
          pinned.free();
          expectCudaError(() => d.memcpyAsync(p, pinned.devicePtr, 16, s), 'CUDA_ERROR_INVALID_VALUE');
          expectCudaError(() => d.memcpyDtoH(new Uint8Array(16), pinned.devicePtr), 'CUDA_ERROR_INVALID_VALUE');
          expectCudaError(() => pinned.free(), 'CUDA_ERROR_INVALID_VALUE');
        } finally {
          d.streamDestroy(s);
          d.memFree(p);
        }
      });
    });

    describe('streams and events', () => {
      it('async copies run in stream order and whenComplete resolves after them', async () => {
        const size = 256 * 1024;
        const data = patternBytes(size, 7);
        const a = d.memAlloc(size);
        const b = d.memAlloc(size);
        const s = d.streamCreate();
        const ev = d.eventCreate();
        const out = new Uint8Array(size);
        try {
          d.memsetD8Async(a, 1, size, s);
          d.memcpyHtoDAsync(a, data, s);
          d.memcpyAsync(b, a, size, s);
          d.memcpyDtoHAsync(out, b, s);
          d.eventRecord(ev, s);
          await d.whenComplete(ev);
          expect(d.eventQuery(ev)).toBe(true);
          expect(Buffer.compare(out, data)).toBe(0);
        } finally {
          d.eventDestroy(ev);
          d.streamDestroy(s);
          d.memFree(a);
          d.memFree(b);
        }
      });

      it('memcpyBatchAsync queues several copies in one call; the batch as a whole is in stream order', async () => {
        const size = 64 * 1024;
        const parts = 4;
        const data = patternBytes(size * parts, 11);
        const a = d.memAlloc(size * parts);
        const b = d.memAlloc(size * parts);
        const s = d.streamCreate();
        const ev = d.eventCreate({ disableTiming: true });
        const out = new Uint8Array(size * parts);
        try {
          d.memsetD8Async(b, 0, size * parts, s);
          d.memcpyHtoDAsync(a, data, s);
          const dsts = new BigUint64Array(parts);
          const srcs = new BigUint64Array(parts);
          const sizes = new Float64Array(parts);
          for (let k = 0; k < parts; k++) {
            // part k of a goes to part (parts - 1 - k) of b; the last one only half
            srcs[k] = a + BigInt(k * size);
            dsts[k] = b + BigInt((parts - 1 - k) * size);
            sizes[k] = k === parts - 1 ? size / 2 : size;
          }
          d.memcpyBatchAsync(dsts, srcs, sizes, parts, s);
          d.memcpyDtoHAsync(out, b, s);
          d.eventRecord(ev, s);
          await d.whenComplete(ev);
          for (let k = 0; k < parts; k++) {
            const got = out.subarray((parts - 1 - k) * size, (parts - 1 - k) * size + sizes[k]!);
            expect(Buffer.compare(got, data.subarray(k * size, k * size + sizes[k]!))).toBe(0);
          }
          expect(out.subarray(size / 2, size).every((x) => x === 0)).toBe(true);
          expect(() => d.memcpyBatchAsync(dsts, srcs, sizes, 0, s)).toThrow(RangeError);
          expect(() => d.memcpyBatchAsync(dsts, srcs, sizes, parts + 1, s)).toThrow(RangeError);
        } finally {
          d.eventDestroy(ev);
          d.streamDestroy(s);
          d.memFree(a);
          d.memFree(b);
        }
      });

      it('streamSynchronize and eventSynchronize complete queued work', () => {
        const size = 64 * 1024;
        const p = d.memAlloc(size);
        const s = d.streamCreate();
        const ev = d.eventCreate({ disableTiming: true });
        const out = new Uint8Array(size);
        try {
          d.memsetD8Async(p, 0x5a, size, s);
          d.memcpyDtoHAsync(out, p, s);
          d.eventRecord(ev, s);
          d.eventSynchronize(ev);
          expect(d.eventQuery(ev)).toBe(true);
          expect(out.every((b) => b === 0x5a)).toBe(true);
          d.memsetD8Async(p, 0x11, size, s);
          d.memcpyDtoHAsync(out, p, s);
          d.streamSynchronize(s);
          expect(out.every((b) => b === 0x11)).toBe(true);
        } finally {
          d.eventDestroy(ev);
          d.streamDestroy(s);
          d.memFree(p);
        }
      });

      it('streamWaitEvent orders one stream after another', async () => {
        const size = 128 * 1024;
        const data = patternBytes(size, 99);
        const p = d.memAlloc(size);
        const s1 = d.streamCreate();
        const s2 = d.streamCreate();
        const written = d.eventCreate({ disableTiming: true });
        const read = d.eventCreate({ disableTiming: true });
        const out = new Uint8Array(size);
        try {
          d.memcpyHtoDAsync(p, data, s1);
          d.eventRecord(written, s1);
          d.streamWaitEvent(s2, written);
          d.memcpyDtoHAsync(out, p, s2);
          d.eventRecord(read, s2);
          await d.whenComplete(read);
          expect(Buffer.compare(out, data)).toBe(0);
        } finally {
          d.eventDestroy(written);
          d.eventDestroy(read);
          d.streamDestroy(s1);
          d.streamDestroy(s2);
          d.memFree(p);
        }
      });

      it('eventElapsedTime between two timing events is a non-negative number', async () => {
        const s = d.streamCreate();
        const e1 = d.eventCreate();
        const e2 = d.eventCreate();
        const p = d.memAlloc(MiB);
        try {
          d.eventRecord(e1, s);
          d.memsetD8Async(p, 3, MiB, s);
          d.eventRecord(e2, s);
          await d.whenComplete(e2);
          const ms = d.eventElapsedTime(e1, e2);
          expect(Number.isFinite(ms)).toBe(true);
          expect(ms).toBeGreaterThanOrEqual(0);
        } finally {
          d.eventDestroy(e1);
          d.eventDestroy(e2);
          d.streamDestroy(s);
          d.memFree(p);
        }
      });

      it('an event that was never recorded counts as complete', async () => {
        const ev = d.eventCreate({ disableTiming: true });
        try {
          expect(d.eventQuery(ev)).toBe(true);
          await d.whenComplete(ev);
        } finally {
          d.eventDestroy(ev);
        }
      });
    });

    fdMemoryCases(() => d, opts);

    describe('PTX modules and kernels (the shipped reduction kernels)', () => {
      // Every dtype's sum, avg, max, prod, premul (factor 0.3) and bitwise ops (where the dtype takes
      // them) of 3 inputs at an offset, compared with the TypeScript twin's result bit for bit: on a GPU
      // this checks that the PTX and the twin the simulated driver runs compute the same bits.
      for (const dtype of DTYPES) {
        for (const op of (['sum', 'avg', 'max', 'prod', 'premul', 'band', 'bor', 'bxor'] as const).filter((o) => dtypeOpSupported(dtype, o))) {
          const arg = reduceArg(op, op === 'premul' ? 0.3 : undefined);
          it(`${op} ${dtype}: a launch on a stream writes what the twin computes`, (ctx) => {
            if (!d.gpuDrivenStatus().modules) ctx.skip(`modules: ${d.gpuDrivenStatus().reason ?? 'not supported'}`);
            const es = DTYPE_BYTES[dtype];
            const count = 1000;
            const offset = 3;
            const inputs = [0, 1, 2].map((k) => {
              const b = patternBytes((count + offset) * es, 77 + k);
              // Keep floats finite: clear each element's top exponent bit (f16/bf16/f32/f64 little-endian sign+exponent byte).
              if (FLOAT_DTYPES.includes(dtype)) for (let i = es - 1; i < b.length; i += es) b[i]! &= 0xbf;
              return b;
            });
            const want = new Uint8Array(count * es);
            reduceInto(
              arg,
              dtype,
              want,
              inputs.map((b) => b.subarray(offset * es)),
              count,
            );
            const { module } = d.moduleLoadData(reducePtx());
            const fn = d.moduleGetFunction(module, reduceEntry(dtype));
            const ptrs = inputs.map((b) => {
              const p = d.memAlloc(b.byteLength);
              d.memcpyHtoD(p, b);
              return p;
            });
            const table = d.memAlloc(8 * 3);
            d.memcpyHtoD(table, new Uint8Array(new BigUint64Array(ptrs).buffer));
            const out = d.memAlloc(count * es);
            const s = d.streamCreate();
            try {
              d.launchKernel(
                fn,
                { grid: [4], block: [128] },
                [
                  { type: 'ptr', value: out },
                  { type: 'ptr', value: table },
                  { type: 'u32', value: 3 },
                  { type: 'u64', value: BigInt(offset) },
                  { type: 'u64', value: BigInt(count) },
                  { type: 'u32', value: opCode(op) },
                  { type: 'f64', value: 0.3 },
                ],
                s,
              );
              d.streamSynchronize(s);
              const got = new Uint8Array(count * es);
              d.memcpyDtoH(got, out);
              expect(Buffer.compare(Buffer.from(got), Buffer.from(want))).toBe(0);
            } finally {
              d.streamDestroy(s);
              for (const p of [...ptrs, table, out]) d.memFree(p);
              d.moduleUnload(module);
            }
          });
        }
      }
    });

    describe('IPC with a second process', () => {
      let peer: IpcPeer;
      beforeAll(async () => {
        peer = await IpcPeer.start(opts.kind, 0, opts.childEnv);
      });
      afterAll(async () => peer?.stop());

      it('a garbage handle is CUDA_ERROR_INVALID_VALUE', () => {
        const garbage = patternBytes(64, 1234);
        expectCudaError(() => d.ipcOpenMemHandle(garbage), 'CUDA_ERROR_INVALID_VALUE');
      });

      it('the child reads the allocation through the handle, writes back, and the parent sees it', async () => {
        const size = MiB + 77;
        const data = patternBytes(size, 42);
        const p = d.memAlloc(size);
        try {
          d.memcpyHtoD(p, data);
          d.streamSynchronize(0n); // pageable HtoD may return before the device has the bytes
          const q = await peer.open(d.ipcGetMemHandle(p));
          expect(Buffer.compare(await peer.read(q, size), data)).toBe(0);
          // The RGET path: cuMemcpyAsync from the mapping into the child's own memory.
          const via = unhex((await peer.call('copyVia', { ptr: q.toString(), length: size })).hex as string);
          expect(Buffer.compare(via, data)).toBe(0);
          const reply = patternBytes(4096, 777);
          await peer.call('write', { ptr: (q + 1000n).toString(), hex: hex(reply) });
          const attrs = await peer.call('attrs', { ptr: (q + 5n).toString() });
          expect(attrs.device).toBe(0);
          expect(attrs.memoryType).toBe('device');
          await peer.call('close', { ptr: q.toString() });
          const out = new Uint8Array(size);
          d.memcpyDtoH(out, p);
          expect(Buffer.compare(out.subarray(1000, 1000 + 4096), reply)).toBe(0);
          expect(Buffer.compare(out.subarray(0, 1000), data.subarray(0, 1000))).toBe(0);
          expect(Buffer.compare(out.subarray(5096), data.subarray(5096))).toBe(0);
        } finally {
          d.memFree(p);
        }
      });

      it('opening an already open handle returns the same pointer; each open is closed', async () => {
        const p = d.memAlloc(4096);
        try {
          const h = d.ipcGetMemHandle(p);
          const q1 = await peer.open(h);
          const q2 = await peer.open(h);
          expect(q2).toBe(q1);
          await peer.call('close', { ptr: q1.toString() });
          await peer.call('close', { ptr: q2.toString() });
        } finally {
          d.memFree(p);
        }
      });

      it('after free and realloc at the same address the child sees the new data through the new handle', async () => {
        const size = 2 * MiB;
        const p1 = d.memAlloc(size);
        d.memsetD8(p1, 0xaa, size);
        d.streamSynchronize(0n); // memsets are asynchronous: finish before another process reads
        const h1 = d.ipcGetMemHandle(p1);
        const q1 = await peer.open(h1);
        expect((await peer.read(q1, 16)).every((b) => b === 0xaa)).toBe(true);
        await peer.call('close', { ptr: q1.toString() });
        d.memFree(p1);
        const p2 = d.memAlloc(size);
        try {
          d.memsetD8(p2, 0xbb, size);
          d.streamSynchronize(0n);
          const h2 = d.ipcGetMemHandle(p2);
          expect(hex(h2)).not.toBe(hex(h1));
          const q2 = await peer.open(h2);
          expect((await peer.read(q2, 16)).every((b) => b === 0xbb)).toBe(true);
          await peer.call('close', { ptr: q2.toString() });
        } finally {
          d.memFree(p2);
        }
      });

      it('an interprocess event orders the child after the parent’s stream', async () => {
        const size = 512 * 1024;
        const data = patternBytes(size, 5);
        const p = d.memAlloc(size);
        const s = d.streamCreate();
        const ev = d.eventCreate({ interprocess: true });
        try {
          const local = d.eventCreate({ disableTiming: true });
          expectCudaError(() => d.ipcGetEventHandle(local), 'CUDA_ERROR_INVALID_HANDLE'); // as the real driver answers
          d.eventDestroy(local);
          const q = await peer.open(d.ipcGetMemHandle(p));
          const remote = (await peer.call('openEvent', { handle: hex(d.ipcGetEventHandle(ev)) })).event as string;
          d.memcpyHtoDAsync(p, data, s);
          d.eventRecord(ev, s);
          await peer.call('waitEvent', { event: remote });
          expect(Buffer.compare(await peer.read(q, size), data)).toBe(0);
          await peer.call('close', { ptr: q.toString() });
        } finally {
          d.streamSynchronize(s);
          d.eventDestroy(ev);
          d.streamDestroy(s);
          d.memFree(p);
        }
      });
    });

    // (Inside a skipped suite, a nested skipIf would hide the case from the skip count.)
    const fewDevices = opts.devices < 2 && !opts.skip;
    describe.skipIf(fewDevices)(`across devices${fewDevices ? ' (skipped: fewer than 2 devices)' : ''}`, () => {
      let peer: IpcPeer;
      beforeAll(async () => {
        peer = await IpcPeer.start(opts.kind, 1, opts.childEnv);
      });
      afterAll(async () => peer?.stop());

      it('a handle from device 0 opened by a process on device 1 copies correctly', async (ctx) => {
        if (!d.canAccessPeer(1, 0)) ctx.skip('device 1 has no peer access to device 0');
        const size = 3 * MiB;
        const data = patternBytes(size, 2024);
        const p = d.memAlloc(size);
        try {
          d.memcpyHtoD(p, data);
          d.streamSynchronize(0n);
          const info = await peer.call('info');
          expect(info.device).toBe(1);
          expect(info.uuid).toBe(d.deviceInfo(1).uuid);
          const q = await peer.open(d.ipcGetMemHandle(p));
          const attrs = await peer.call('attrs', { ptr: q.toString() });
          expect(attrs.device).toBe(1); // the opener's device: the real driver reports the context that mapped it
          const via = unhex((await peer.call('copyVia', { ptr: q.toString(), length: size })).hex as string);
          expect(Buffer.compare(via, data)).toBe(0);
          await peer.call('close', { ptr: q.toString() });
        } finally {
          d.memFree(p);
        }
      });
    });
  });
}
