/**
 * The native addon and NativeCudaDriver, on a machine without a GPU:
 *  - the built addon loads and says why CUDA is unavailable;
 *  - NativeCudaDriver refuses bad arguments before native code (an injected
 *    fake addon records every call) and types native errors;
 *  - with a fake libcuda.so.1 (fixtures/fake-libcuda.c, in a child process)
 *    the loader, the calls and the completion poller run for real.
 * GPU behaviour proper is the GPU contract suite's job (test/gpu/).
 */
import { execFile, execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { fc, test } from '@fast-check/vitest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadAddon } from '../../../src/cuda/addon.js';
import type { NativeAddon } from '../../../src/cuda/native-addon.js';
import { withoutSimHint } from '../../../src/cuda/without-sim-hint.js';
import { NativeCudaDriver, fromNativeError } from '../../../src/cuda/native-driver.js';
import { ClosedError, ConfigError, CudaError, DriverUnavailableError, SmcudaError } from '../../../src/errors.js';

const run = promisify(execFile);
const root = fileURLToPath(new URL('../../..', import.meta.url));

// ---- a fake addon that records calls -----------------------------------------

interface Call {
  name: string;
  args: unknown[];
}

/** Every property is a function that records its call, then returns `returns[name]` or throws `throws[name]`. */
function fakeAddon(returns: Record<string, unknown> = {}, throws: Record<string, unknown> = {}) {
  const calls: Call[] = [];
  const addon = new Proxy(
    {},
    {
      get:
        (_t, name: string) =>
        (...args: unknown[]) => {
          calls.push({ name, args });
          if (name in throws) throw throws[name];
          const r = returns[name];
          return typeof r === 'function' ? (r as (...a: unknown[]) => unknown)(...args) : r;
        },
    },
  ) as NativeAddon;
  return { addon, calls };
}

/** A native CUDA error as the addon throws it. */
function nativeCudaError(call: string, code: string, result: number, detail: string): Error {
  return Object.assign(new Error(`${call} failed: ${code} (${result}): ${detail}`), { code, call, result, detail });
}

// ---- the built addon, here without libcuda.so.1 --------------------------------

const addon = loadAddon();
const available = addon.cudaStatus().available;

describe('the built addon', () => {
  it('exports every function native-addon.ts declares', () => {
    const names = [
      'cudaStatus',
      'cuInit',
      'cuDeviceGetCount',
      'cuDeviceGetInfo',
      'cuDeviceCanAccessPeer',
      'cuDevicePrimaryCtxRetain',
      'cuDevicePrimaryCtxRelease',
      'cuCtxSetCurrent',
      'cuMemAlloc',
      'cuMemFree',
      'cuMemsetD8',
      'cuMemsetD8Async',
      'cuMemcpyHtoD',
      'cuMemcpyDtoH',
      'cuMemcpyDtoD',
      'cuMemcpyHtoDAsync',
      'cuMemcpyDtoHAsync',
      'cuMemcpyAsync',
      'cuMemGetAddressRange',
      'cuPointerGetAttributes',
      'cuPointerGetBufferId',
      'cuMemHostAlloc',
      'cuMemFreeHost',
      'cuMemHostGetDevicePointer',
      'cuMemHostRegister',
      'cuMemHostUnregister',
      'cuIpcGetMemHandle',
      'cuIpcOpenMemHandle',
      'cuIpcCloseMemHandle',
      'cuIpcGetEventHandle',
      'cuIpcOpenEventHandle',
      'cuStreamCreate',
      'cuStreamDestroy',
      'cuStreamSynchronize',
      'cuStreamWaitEvent',
      'cuEventCreate',
      'cuEventDestroy',
      'cuEventRecord',
      'cuEventQuery',
      'cuEventSynchronize',
      'cuEventElapsedTime',
      'whenEventComplete',
      'completionShutdown',
      'completionOpen',
      'completionClose',
      'gpuDrivenStatus',
      'cuStreamWaitValue32',
      'cuStreamWaitValue64',
      'cuStreamWriteValue32',
      'cuStreamWriteValue64',
      'cuStreamBatchMemOp',
      'cuStreamBeginCapture',
      'cuStreamEndCapture',
      'cuStreamIsCapturing',
      'cuGraphInstantiate',
      'cuGraphLaunch',
      'cuGraphExecDestroy',
      'cuGraphDestroy',
      'cuModuleLoadData',
      'cuModuleUnload',
      'cuModuleGetFunction',
      'cuLaunchKernel',
    ];
    const exported = addon as unknown as Record<string, unknown>;
    expect(names.filter((n) => typeof exported[n] !== 'function')).toEqual([]);
  });
});

describe.skipIf(available)('without an NVIDIA driver', () => {
  it('cudaStatus says libcuda.so.1 is missing and how to fix it', () => {
    const s = addon.cudaStatus();
    expect(s.available).toBe(false);
    expect(s.driverVersion).toBe(0);
    expect(s.reason).toContain('libcuda.so.1');
    expect(s.reason).toMatch(/install the NVIDIA driver/);
    expect(s.reason).toContain('--driver sim');
  });

  it('NativeCudaDriver.status() reports the same, without the CLI advice, and never throws', () => {
    const d = new NativeCudaDriver();
    const raw = addon.cudaStatus();
    expect(d.status()).toEqual({ ...raw, reason: withoutSimHint(raw.reason!) });
    expect(d.status().reason).not.toContain('--driver sim');
    expect(d.kind).toBe('native');
    expect(d.isReady()).toBe(false);
  });

  it('init() throws SMCUDA_DRIVER_UNAVAILABLE with the reason', () => {
    const d = new NativeCudaDriver();
    const err = (() => {
      try {
        d.init();
      } catch (e) {
        return e;
      }
    })();
    expect(err).toBeInstanceOf(DriverUnavailableError);
    expect(err).toMatchObject({ code: 'SMCUDA_DRIVER_UNAVAILABLE' });
    expect((err as Error).message).toContain('libcuda.so.1');
    expect(d.isReady()).toBe(false);
  });

  it('every driver call throws SMCUDA_DRIVER_UNAVAILABLE, typed, naming the call', () => {
    const d = new NativeCudaDriver();
    expect(() => d.deviceCount()).toThrow(DriverUnavailableError);
    expect(() => d.memAlloc(8)).toThrow(expect.objectContaining({ code: 'SMCUDA_DRIVER_UNAVAILABLE', message: expect.stringContaining('cuMemAlloc') }));
    expect(() => addon.whenEventComplete(1n, 1n)).toThrow(expect.objectContaining({ code: 'SMCUDA_DRIVER_UNAVAILABLE' }));
    expect(() => addon.completionShutdown()).not.toThrow();
  });
});

// ---- validation before native code -----------------------------------------------

describe('NativeCudaDriver validates before calling native code', () => {
  const handle = new Uint8Array(64);
  const cases: Array<[string, (d: NativeCudaDriver) => unknown, typeof TypeError | typeof RangeError]> = [
    ['memFree(number)', (d) => d.memFree(1 as unknown as bigint), TypeError],
    ['memFree(negative)', (d) => d.memFree(-1n), RangeError],
    ['memFree(2^64)', (d) => d.memFree(1n << 64n), RangeError],
    ['memAlloc(-1)', (d) => d.memAlloc(-1), RangeError],
    ['memAlloc(1.5)', (d) => d.memAlloc(1.5), TypeError],
    ['memAlloc(bigint)', (d) => d.memAlloc(8n as unknown as number), TypeError],
    ['memsetD8(value 256)', (d) => d.memsetD8(1n, 256, 8), RangeError],
    ['memsetD8Async(stream number)', (d) => d.memsetD8Async(1n, 0, 8, 0 as unknown as bigint), TypeError],
    ['memcpyHtoD(src array)', (d) => d.memcpyHtoD(1n, [1, 2] as unknown as Uint8Array), TypeError],
    ['memcpyHtoD(SharedArrayBuffer)', (d) => d.memcpyHtoD(1n, new Uint8Array(new SharedArrayBuffer(8))), TypeError],
    ['memcpyDtoH(src string)', (d) => d.memcpyDtoH(new Uint8Array(8), '1' as unknown as bigint), TypeError],
    ['memcpyDtoD(bytes -8)', (d) => d.memcpyDtoD(1n, 2n, -8), RangeError],
    ['memcpyAsync(bytes NaN)', (d) => d.memcpyAsync(1n, 2n, NaN, 0n), TypeError],
    ['ipcOpenMemHandle(63 bytes)', (d) => d.ipcOpenMemHandle(new Uint8Array(63)), RangeError],
    ['ipcOpenMemHandle(65 bytes)', (d) => d.ipcOpenMemHandle(new Uint8Array(65)), RangeError],
    ['ipcOpenEventHandle(ArrayBuffer)', (d) => d.ipcOpenEventHandle(handle.buffer as unknown as Uint8Array), TypeError],
    ['deviceInfo(-1)', (d) => d.deviceInfo(-1), RangeError],
    ['setDevice("0")', (d) => d.setDevice('0' as unknown as number), TypeError],
    ['canAccessPeer(0, 0.5)', (d) => d.canAccessPeer(0, 0.5), TypeError],
    ['hostAlloc(-1)', (d) => d.hostAlloc(-1), RangeError],
    ['hostRegister(Buffer-less)', (d) => d.hostRegister({} as Uint8Array), TypeError],
    ['eventRecord(event null)', (d) => d.eventRecord(null as unknown as bigint, 0n), TypeError],
    ['eventElapsedTime(end -1n)', (d) => d.eventElapsedTime(1n, -1n), RangeError],
    ['shmCreate(no slash)', (d) => d.shmCreate('seg', 8), RangeError],
    ['shmOpen(number)', (d) => d.shmOpen(5 as unknown as string), TypeError],
  ];

  it.each(cases)('%s', (_name, call, errorClass) => {
    const { addon: fake, calls } = fakeAddon();
    const d = new NativeCudaDriver(fake);
    expect(() => call(d)).toThrow(errorClass);
    expect(calls).toEqual([]);
  });

  test.prop([fc.anything().filter((v) => typeof v !== 'bigint')], { numRuns: 100 })(
    'any non-bigint pointer is a TypeError, and native code never runs',
    (value) => {
      const { addon: fake, calls } = fakeAddon();
      const d = new NativeCudaDriver(fake);
      expect(() => d.memcpyDtoD(value as bigint, 1n, 8)).toThrow(TypeError);
      expect(() => d.ipcCloseMemHandle(value as bigint)).toThrow(TypeError);
      expect(calls).toEqual([]);
    },
  );

  test.prop(
    [
      fc.oneof(
        fc.integer({ max: -1 }),
        fc.double().filter((x) => !Number.isInteger(x)),
      ),
    ],
    { numRuns: 100 },
  )('a negative or fractional size is refused, and native code never runs', (bytes) => {
    const { addon: fake, calls } = fakeAddon();
    const d = new NativeCudaDriver(fake);
    expect(() => d.memAlloc(bytes)).toThrow(bytes < 0 && Number.isInteger(bytes) ? RangeError : TypeError);
    expect(() => d.memcpyAsync(1n, 2n, bytes, 0n)).toThrow();
    expect(calls).toEqual([]);
  });

  test.prop([fc.nat({ max: 256 }).filter((n) => n !== 64)], { numRuns: 50 })('an IPC handle of any size but 64 bytes is a RangeError', (size) => {
    const { addon: fake, calls } = fakeAddon();
    const d = new NativeCudaDriver(fake);
    expect(() => d.ipcOpenMemHandle(new Uint8Array(size))).toThrow(RangeError);
    expect(() => d.ipcOpenEventHandle(new Uint8Array(size))).toThrow(RangeError);
    expect(calls).toEqual([]);
  });

  it('passes host memory as (ArrayBuffer, byteOffset, byteLength)', () => {
    const { addon: fake, calls } = fakeAddon({ cuIpcOpenMemHandle: 5n });
    const d = new NativeCudaDriver(fake);
    const backing = new Uint8Array(128);
    d.memcpyHtoDAsync(16n, backing.subarray(8, 40), 3n);
    d.memcpyDtoH(backing.subarray(64, 72), 16n);
    expect(d.ipcOpenMemHandle(backing.subarray(32, 96))).toBe(5n);
    expect(calls).toEqual([
      { name: 'cuMemcpyHtoDAsync', args: [16n, backing.buffer, 8, 32, 3n] },
      { name: 'cuMemcpyDtoH', args: [backing.buffer, 64, 8, 16n] },
      { name: 'cuIpcOpenMemHandle', args: [backing.buffer, 32] },
    ]);
  });
});

// ---- native errors become typed errors ------------------------------------------------

describe('native errors become typed errors', () => {
  it('a failing CUresult becomes CudaError with code, call and result', () => {
    const native = nativeCudaError('cuIpcOpenMemHandle', 'CUDA_ERROR_ALREADY_MAPPED', 208, 'resource already mapped');
    const { addon: fake } = fakeAddon({}, { cuIpcOpenMemHandle: native });
    const d = new NativeCudaDriver(fake);
    let err: unknown;
    try {
      d.ipcOpenMemHandle(new Uint8Array(64));
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(CudaError);
    expect(err).toMatchObject({
      code: 'CUDA_ERROR_ALREADY_MAPPED',
      call: 'cuIpcOpenMemHandle',
      result: 208,
      message: 'cuIpcOpenMemHandle failed: CUDA_ERROR_ALREADY_MAPPED (208): resource already mapped',
      cause: native,
    });
  });

  it('keeps the detail when only the message carries it', () => {
    const native = Object.assign(new Error('cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory'), {
      code: 'CUDA_ERROR_OUT_OF_MEMORY',
      call: 'cuMemAlloc',
      result: 2,
    });
    expect(fromNativeError(native)).toMatchObject({ message: native.message, result: 2 });
  });

  it('SMCUDA_DRIVER_UNAVAILABLE, SMCUDA_CLOSED and errno codes become DriverUnavailableError, ClosedError, SmcudaError', () => {
    const noDriver = fromNativeError(Object.assign(new Error('cuInit: CUDA is unavailable'), { code: 'SMCUDA_DRIVER_UNAVAILABLE' }));
    expect(noDriver).toBeInstanceOf(DriverUnavailableError);
    expect(noDriver).toMatchObject({ code: 'SMCUDA_DRIVER_UNAVAILABLE' });
    expect(fromNativeError(Object.assign(new Error('shut down'), { code: 'SMCUDA_CLOSED' }))).toBeInstanceOf(ClosedError);
    const errno = fromNativeError(Object.assign(new Error("shm_open('/x') failed: ENOENT"), { code: 'ENOENT', call: 'shm_open' }));
    expect(errno).toBeInstanceOf(SmcudaError);
    expect(errno).toMatchObject({ code: 'ENOENT' });
  });

  it('TypeError and RangeError from native checks pass through unchanged', () => {
    const t = new TypeError('ptr must be a BigInt');
    expect(fromNativeError(t)).toBe(t);
  });

  it('whenComplete rejects with the converted error', async () => {
    const native = nativeCudaError('cuEventQuery', 'CUDA_ERROR_LAUNCH_FAILED', 719, 'unspecified launch failure');
    const { addon: fake } = fakeAddon({ cuDevicePrimaryCtxRetain: 0xc0n, whenEventComplete: () => Promise.reject(native) });
    const d = new NativeCudaDriver(fake);
    d.setDevice(0);
    await expect(d.whenComplete(7n)).rejects.toMatchObject({ constructor: CudaError, code: 'CUDA_ERROR_LAUNCH_FAILED', call: 'cuEventQuery', result: 719 });
  });

  it('pointerAttributes of memory CUDA does not know is CUDA_ERROR_INVALID_VALUE', () => {
    const { addon: fake } = fakeAddon({ cuPointerGetAttributes: { bufferId: 0n, device: -2, memoryType: 0 } });
    expect(() => new NativeCudaDriver(fake).pointerAttributes(5n)).toThrow(
      expect.objectContaining({ code: 'CUDA_ERROR_INVALID_VALUE', call: 'cuPointerGetAttributes' }),
    );
  });
});

// ---- contexts, completion and close, over the fake addon -------------------------------

describe('NativeCudaDriver bookkeeping', () => {
  it('retains a primary context once per device, then only makes it current', () => {
    const { addon: fake, calls } = fakeAddon({ cuDevicePrimaryCtxRetain: (i: unknown) => 0x100n + BigInt(i as number) });
    const d = new NativeCudaDriver(fake);
    d.setDevice(1);
    d.setDevice(0);
    d.setDevice(1);
    expect(d.currentDevice()).toBe(1);
    expect(calls.map((c) => [c.name, ...c.args])).toEqual([
      ['cuDevicePrimaryCtxRetain', 1],
      ['cuDevicePrimaryCtxRetain', 0],
      ['cuCtxSetCurrent', 0x101n],
    ]);
    calls.length = 0;
    d.releaseDevices();
    expect(calls.map((c) => [c.name, ...c.args])).toEqual([
      ['cuCtxSetCurrent', 0n],
      ['cuDevicePrimaryCtxRelease', 0],
      ['cuDevicePrimaryCtxRelease', 1],
    ]);
    expect(d.currentDevice()).toBe(-1);
  });

  it('isReady() needs init and a device', () => {
    const { addon: fake } = fakeAddon({ cudaStatus: { available: true, driverVersion: 13000 }, cuDevicePrimaryCtxRetain: 1n });
    const d = new NativeCudaDriver(fake);
    expect(d.isReady()).toBe(false);
    d.init();
    expect(d.isReady()).toBe(false);
    d.setDevice(0);
    expect(d.isReady()).toBe(true);
  });

  it('whenComplete polls with the current context, and needs one', async () => {
    const { addon: fake, calls } = fakeAddon({ cuDevicePrimaryCtxRetain: 0xabcn, whenEventComplete: () => Promise.resolve(), completionOpen: 7 });
    const d = new NativeCudaDriver(fake);
    await expect(d.whenComplete(1n)).rejects.toBeInstanceOf(ConfigError);
    d.setDevice(3);
    await expect(d.whenComplete(9n)).resolves.toBeUndefined();
    await expect(d.whenComplete(9n)).resolves.toBeUndefined();
    // One client of the poller per driver, opened on its first wait.
    expect(calls.filter((c) => c.name === 'completionOpen')).toHaveLength(1);
    expect(calls.at(-1)).toEqual({ name: 'whenEventComplete', args: [9n, 0xabcn, 7] });
    await expect(d.whenComplete(9 as unknown as bigint)).rejects.toBeInstanceOf(TypeError);
  });

  it('close() rejects its pending waits with ClosedError, closes its own poller client (not the poller) and releases contexts', async () => {
    const { addon: fake, calls } = fakeAddon({ cuDevicePrimaryCtxRetain: 1n, whenEventComplete: () => new Promise(() => {}), completionOpen: 3 });
    const d = new NativeCudaDriver(fake);
    d.setDevice(0);
    const waiting = d.whenComplete(5n);
    d.close();
    await expect(waiting).rejects.toBeInstanceOf(ClosedError);
    expect(calls.map((c) => c.name)).toEqual([
      'cuDevicePrimaryCtxRetain',
      'completionOpen',
      'whenEventComplete',
      'completionClose',
      'cuCtxSetCurrent',
      'cuDevicePrimaryCtxRelease',
    ]);
    expect(calls.find((c) => c.name === 'completionClose')!.args).toEqual([3]);
  });

  it('canAccessPeer of a device with itself is true without asking the driver', () => {
    const { addon: fake, calls } = fakeAddon({ cuDeviceCanAccessPeer: false });
    const d = new NativeCudaDriver(fake);
    expect(d.canAccessPeer(2, 2)).toBe(true);
    expect(d.canAccessPeer(0, 1)).toBe(false);
    expect(calls).toEqual([{ name: 'cuDeviceCanAccessPeer', args: [0, 1] }]);
  });

  it('eventCreate maps options to CU_EVENT_* flags (interprocess implies timing disabled)', () => {
    const { addon: fake, calls } = fakeAddon({ cuEventCreate: 1n });
    const d = new NativeCudaDriver(fake);
    d.eventCreate();
    d.eventCreate({ disableTiming: true });
    d.eventCreate({ interprocess: true });
    expect(calls.map((c) => c.args[0])).toEqual([0, 2, 6]);
  });

  it('hostAlloc().free() and hostRegister() unregister run once', () => {
    const buffer = new ArrayBuffer(16);
    const { addon: fake, calls } = fakeAddon({ cuMemHostAlloc: buffer, cuMemHostGetDevicePointer: 0x7f12_3400_0000n });
    const d = new NativeCudaDriver(fake);
    const pinned = d.hostAlloc(16);
    expect(pinned.bytes.buffer).toBe(buffer);
    expect(pinned.devicePtr).toBe(0x7f12_3400_0000n);
    pinned.free();
    pinned.free();
    const host = new Uint8Array(32);
    const unregister = d.hostRegister(host.subarray(4, 20));
    unregister();
    unregister();
    expect(calls.map((c) => [c.name, ...c.args])).toEqual([
      ['cuMemHostAlloc', 16],
      ['cuMemHostGetDevicePointer', buffer],
      ['cuMemFreeHost', buffer],
      ['cuMemHostRegister', host.buffer, 4, 16],
      ['cuMemHostUnregister', host.buffer, 4],
    ]);
  });

  it('hostAlloc frees the buffer and throws typed when cuMemHostGetDevicePointer fails', () => {
    const buffer = new ArrayBuffer(16);
    const { addon: fake, calls } = fakeAddon(
      { cuMemHostAlloc: buffer },
      { cuMemHostGetDevicePointer: nativeCudaError('cuMemHostGetDevicePointer', 'CUDA_ERROR_NOT_SUPPORTED', 801, 'operation not supported') },
    );
    expect(() => new NativeCudaDriver(fake).hostAlloc(16)).toThrow(
      expect.objectContaining({ code: 'CUDA_ERROR_NOT_SUPPORTED', call: 'cuMemHostGetDevicePointer' }),
    );
    expect(calls.map((c) => [c.name, ...c.args])).toEqual([
      ['cuMemHostAlloc', 16],
      ['cuMemHostGetDevicePointer', buffer],
      ['cuMemFreeHost', buffer],
    ]);
  });

  it('shared segments close once, through shmClose', () => {
    const buffer = new ArrayBuffer(8);
    const { addon: fake, calls } = fakeAddon({ shmCreate: buffer });
    const seg = new NativeCudaDriver(fake).shmCreate('/smcuda-test', 8);
    expect(seg.name).toBe('/smcuda-test');
    expect(seg.bytes.byteLength).toBe(8);
    seg.close();
    seg.close();
    expect(seg.bytes.byteLength).toBe(0);
    expect(calls.map((c) => c.name)).toEqual(['shmCreate', 'shmClose']);
  });
});

// ---- the real addon over a fake libcuda.so.1 ---------------------------------------------

const fixture = join(root, 'test', 'fixtures', 'native-fake-cuda.mjs');
const compiled = existsSync(join(root, 'dist', 'src', 'cuda', 'native-driver.js'));
const cc = ['cc', 'gcc'].find((c) => {
  try {
    execFileSync(c, ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
});

describe.skipIf(available || !cc || !compiled)('the addon over a fake libcuda.so.1 (child processes)', () => {
  let libDir = '';

  beforeAll(() => {
    libDir = mkdtempSync(join(tmpdir(), 'smcuda-fake-cuda-'));
    execFileSync(cc!, ['-shared', '-fPIC', '-O1', '-o', join(libDir, 'libcuda.so.1'), join(root, 'test', 'fixtures', 'fake-libcuda.c')]);
  });
  afterAll(() => {
    if (libDir) rmSync(libDir, { recursive: true, force: true });
  });

  /** Runs a scenario; the child must exit by itself (an idle poller keeps nothing alive). */
  // biome-ignore lint/suspicious/noExplicitAny: the fixture's JSON result, read field by field
  async function scenario(name: string, env: Record<string, string> = {}): Promise<any> {
    const { stdout } = await run(process.execPath, [fixture, name], {
      env: { ...process.env, LD_LIBRARY_PATH: libDir, ...env },
      timeout: 20_000,
    });
    return JSON.parse(stdout.trim().split('\n').at(-1)!);
  }

  it('loads, resolves every entry point and reports the driver version', async () => {
    const { status, driverStatus } = await scenario('status');
    // The fake driver has no VMM/pool entry points: that turns off fd-shared memory only.
    expect(status).toEqual({
      available: true,
      driverVersion: 12080,
      memcpyBatch: 'cuMemcpyBatchAsync',
      fdMemory: false,
      fdMemoryReason: expect.stringMatching(/does not provide cuMemCreate .*update the NVIDIA driver/),
    });
    expect(driverStatus).toEqual(status);
  });

  it('queues copies in one cuMemcpyBatchAsync with the ABI of the driver, one by one without it', async () => {
    const expected = [
      ...Array.from({ length: 32 }, (_, i) => 65 + i),
      ...Array.from({ length: 32 }, (_, i) => 33 + i),
      ...Array.from({ length: 16 }, (_, i) => 1 + i),
    ];
    const runs = await Promise.all([
      scenario('batch', { FAKE_CUDA_VERSION: '13000' }),
      scenario('batch', { FAKE_CUDA_VERSION: '12080' }),
      scenario('batch', { FAKE_CUDA_VERSION: '12020' }),
    ]);
    expect(runs.map((r) => r.memcpyBatch)).toEqual(['cuMemcpyBatchAsync_v2', 'cuMemcpyBatchAsync', 'none']);
    for (const r of runs) {
      expect(r.copied).toEqual(expected);
      expect(r.legacyStream).toEqual(expected.slice(0, 64));
      expect(r.tooMany).toMatchObject({ name: 'ArgumentRangeError', code: 'SMCUDA_OUT_OF_RANGE' }); // a RangeError with a code
      // One by one, a refused copy says how many were queued before it (and they ran).
      expect(r.stoppedAt).toMatchObject({ isCudaError: true, call: 'cuMemcpyAsync', queued: 1 });
      expect(r.afterStop).toEqual([...expected.slice(0, 32), ...Array.from({ length: 48 }, () => 0)]);
    }
    // The batch entry point refuses a batch with a null pointer whole.
    expect(runs[0]!.refused).toMatchObject({ isCudaError: true, code: 'CUDA_ERROR_INVALID_VALUE', call: 'cuMemcpyBatchAsync' });
    expect(runs[1]!.refused).toMatchObject({ isCudaError: true, code: 'CUDA_ERROR_INVALID_VALUE', call: 'cuMemcpyBatchAsync' });
  });

  it('explains a driver that is too old, a missing entry point, and cuInit failures', async () => {
    const [old, missing, noDevice, stub, unknown] = await Promise.all([
      scenario('status', { FAKE_CUDA_VERSION: '11080' }),
      scenario('status', { FAKE_CUDA_MISSING: 'cuIpcOpenMemHandle' }),
      scenario('status', { FAKE_CUDA_INIT: '100' }),
      scenario('status', { FAKE_CUDA_INIT: '34' }), // unknown to the fake's cuGetErrorName: the addon's own table
      scenario('status', { FAKE_CUDA_INIT: '12345' }),
    ]);
    expect(old.status).toMatchObject({ available: false, driverVersion: 11080 });
    expect(old.status.reason).toMatch(/CUDA 11\.8.*needs CUDA 12\.0 or newer: update the NVIDIA driver/);
    expect(missing.status.reason).toMatch(/does not provide cuIpcOpenMemHandle for the CUDA 12\.0 ABI \(symbol not found/);
    expect(noDevice.status.reason).toBe(
      'cuInit failed: CUDA_ERROR_NO_DEVICE (100): no CUDA-capable device is detected; no GPU is visible to this process: check nvidia-smi and CUDA_VISIBLE_DEVICES',
    );
    expect(stub.status.reason).toMatch(/^cuInit failed: CUDA_ERROR_STUB_LIBRARY \(34\); .*stub library/);
    expect(unknown.status.reason).toMatch(/^cuInit failed: CUDA_ERROR_12345 \(12345\)/);
    expect(noDevice.driverStatus).toEqual(noDevice.status);
  });

  it('runs the driver end to end: devices, memory, IPC, pinned memory, events, completion, close', async () => {
    const out = await scenario('driver');
    expect(out).toMatchObject({
      readyBeforeDevice: false,
      readyAfterDevice: true,
      count: 2,
      info: {
        index: 0,
        name: 'Fake GPU Zero',
        uuid: 'GPU-f0f1f2f3-f4f5-f6f7-f8f9-fafbfcfdfeff',
        pciBusId: '0000:18:00.0',
        computeCapability: [9, 0],
        multiprocessors: 132,
        totalMemory: 80 * 2 ** 30,
      },
      current: 0,
      peer01: true,
      peer00: true,
      roundTrip: Array.from({ length: 16 }, (_, i) => i + 8),
      afterMemset: [7, 7, 7, 7, 12, 13],
      handleLength: 64,
      openedSame: true,
      openedFromOffsetView: true,
      alreadyMapped: {
        isCudaError: true,
        code: 'CUDA_ERROR_ALREADY_MAPPED',
        call: 'cuIpcOpenMemHandle',
        result: 208,
        message: 'cuIpcOpenMemHandle failed: CUDA_ERROR_ALREADY_MAPPED (208): resource already mapped',
      },
      attrs: { device: 1, memoryType: 'device' },
      unknownPointer: { isCudaError: true, code: 'CUDA_ERROR_INVALID_VALUE' },
      bufferIdMatches: true,
      unknownBufferId: { isCudaError: true, call: 'cuPointerGetAttribute' },
      range: { size: 4096 },
      pinnedLength: 32,
      pinnedViaDevicePtr: true,
      pinnedLengthAfterFree: 0, // detached: JS cannot touch freed pinned memory
      queryRightAfterRecord: false,
      completes: { resolved: true },
      queryAfterComplete: true,
      elapsed: 1.5,
      manyResolved: true,
      failing: { resolved: false, error: { isCudaError: true, code: 'CUDA_ERROR_LAUNCH_FAILED', call: 'cuEventQuery', result: 719 } },
      stuckAfterClose: { resolved: false, error: { isClosedError: true, code: 'SMCUDA_CLOSED' } },
      readyAfterClose: false,
      afterRestart: { resolved: true },
    });
  });

  it('the addon checks types and bounds itself, so nothing becomes a wild pointer', async () => {
    expect(await scenario('raw-args')).toEqual({
      pointerAsNumber: 'TypeError: ptr must be a BigInt',
      negativePointer: 'RangeError: ptr must fit in 64 unsigned bits',
      fractionalSize: 'RangeError: bytes must be a non-negative safe integer',
      hostPastEnd: 'RangeError: src: offset 8 + 9 bytes exceeds its 16 bytes',
      offsetPastEnd: 'RangeError: dst: offset 17 + 0 bytes exceeds its 16 bytes',
      notArrayBuffer: 'TypeError: dst must be an ArrayBuffer',
      shortHandle: 'RangeError: handle: offset 1 + 64 bytes exceeds its 64 bytes',
      freeForeignBuffer: 'Error: cuMemFreeHost: this ArrayBuffer is not from cuMemHostAlloc, or was already freed',
      eventNotBigInt: 'TypeError: whenEventComplete(event, ctx): both must be BigInt handles',
    });
  });

  it('a worker with a wait still pending tears down cleanly', async () => {
    expect(await scenario('worker-teardown')).toEqual({ messages: ['completed', 'completed', 'completed'] });
  });

  it("two drivers in one process: closing one rejects only its own waits; the other's complete, and the poller stops only with the last", async () => {
    const out = await scenario('two-drivers');
    expect(out.closedOnes).toEqual([
      { resolved: false, error: expect.objectContaining({ isClosedError: true }) },
      { resolved: false, error: expect.objectContaining({ isClosedError: true }) },
    ]);
    // B's waits were pending on the same poller thread when A closed.
    expect(out.otherAfterClose).toEqual([{ resolved: true }, { resolved: true }, { resolved: true }]);
    expect(out.otherLater).toEqual({ resolved: true });
    expect(out.rawClients).toMatchObject({
      closedClient: { resolved: false, error: { code: 'SMCUDA_CLOSED' } },
      otherClient: { resolved: true },
      anonymous: { resolved: true },
      badClient: expect.stringMatching(/^TypeError: completionClose\(client\)/),
    });
  });

  it("completionClose returns once the thread no longer queries the closed client's events (destroyed right after: never queried again)", async () => {
    const { stdout, stderr } = await run(process.execPath, [fixture, 'close-then-destroy'], {
      env: { ...process.env, LD_LIBRARY_PATH: libDir },
      timeout: 20_000,
    });
    expect(JSON.parse(stdout.trim().split('\n').at(-1)!)).toMatchObject({ rejected: 32, busy: { resolved: false, error: { code: 'SMCUDA_CLOSED' } } });
    expect(stderr).not.toMatch(/cuEventQuery of a destroyed event/);
  });

  it('completionShutdown rejects pending waits with SMCUDA_CLOSED', async () => {
    const out = await scenario('raw-shutdown');
    expect(out.stuck).toMatchObject({ resolved: false, error: { code: 'SMCUDA_CLOSED' } });
  });
});
