/**
 * The native driver's GPU-driven calls (stream memory operations, capture and
 * graphs, PTX modules, kernel launch) without a GPU:
 *  - NativeCudaDriver refuses bad arguments before native code (an injected
 *    fake addon records every call) and marshals good ones as the addon takes them;
 *  - kernel arguments are packed at aligned slots;
 *  - the real addon over the fake libcuda.so.1 (fixtures/fake-libcuda.c, in a
 *    child process): entry points fetched through cuGetProcAddress, the memory
 *    operations with cudaVersion 11070; what the fake was called with (values,
 *    condition flags, parameter bytes); CUresults as CudaError; a missing entry
 *    point turning its group off in gpuDrivenStatus, with the reason.
 * The GPU proper: test/gpu/gpu-driven.gpu.test.ts.
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
import type { KernelArg, StreamMemOp } from '../../../src/cuda/driver.js';
import { packKernelArgs } from '../../../src/cuda/kernel-args.js';
import type { NativeAddon } from '../../../src/cuda/native-addon.js';
import { NativeCudaDriver } from '../../../src/cuda/native-driver.js';
import { CudaError } from '../../../src/errors.js';
import { FILL_ENTRIES, FILL_PTX } from '../../../src/kernels/fill.ptx.js';

const run = promisify(execFile);
const root = fileURLToPath(new URL('../../..', import.meta.url));

interface Call {
  name: string;
  args: unknown[];
}

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

// ---- validation before native code ------------------------------------------------

describe('NativeCudaDriver validates GPU-driven arguments before native code', () => {
  const cases: Array<[string, (d: NativeCudaDriver) => unknown, typeof TypeError | typeof RangeError]> = [
    ['waitValue32(value -1)', (d) => d.streamWaitValue32(0n, 16n, -1, 'geq'), RangeError],
    ['waitValue32(value 2^32)', (d) => d.streamWaitValue32(0n, 16n, 2 ** 32, 'geq'), RangeError],
    ['waitValue32(value 1.5)', (d) => d.streamWaitValue32(0n, 16n, 1.5, 'eq'), TypeError],
    ['waitValue32(condition gt)', (d) => d.streamWaitValue32(0n, 16n, 1, 'gt' as 'eq'), TypeError],
    ['waitValue32(addr unaligned)', (d) => d.streamWaitValue32(0n, 18n, 1, 'eq'), RangeError],
    ['waitValue32(addr 0)', (d) => d.streamWaitValue32(0n, 0n, 1, 'eq'), RangeError],
    ['waitValue32(addr number)', (d) => d.streamWaitValue32(0n, 16 as unknown as bigint, 1, 'eq'), TypeError],
    ['waitValue64(addr 4-aligned)', (d) => d.streamWaitValue64(0n, 20n, 1n, 'eq'), RangeError],
    ['waitValue64(value number)', (d) => d.streamWaitValue64(0n, 16n, 1 as unknown as bigint, 'eq'), TypeError],
    ['writeValue64(value 2^64)', (d) => d.streamWriteValue64(0n, 16n, 1n << 64n), RangeError],
    ['writeValue32(stream number)', (d) => d.streamWriteValue32(0 as unknown as bigint, 16n, 1), TypeError],
    ['batch([])', (d) => d.streamBatchMemOp(0n, []), RangeError],
    [
      'batch(256 ops: cuStreamBatchMemOp takes fewer than 256)',
      (d) =>
        d.streamBatchMemOp(
          0n,
          Array.from({ length: 256 }, () => ({ op: 'barrier' }) as StreamMemOp),
        ),
      RangeError,
    ],
    ['batch(op copy)', (d) => d.streamBatchMemOp(0n, [{ op: 'copy' } as unknown as StreamMemOp]), TypeError],
    ['batch(write32 bigint value)', (d) => d.streamBatchMemOp(0n, [{ op: 'write32', addr: 16n, value: 1n } as unknown as StreamMemOp]), TypeError],
    ['batch(wait64 no condition)', (d) => d.streamBatchMemOp(0n, [{ op: 'wait64', addr: 16n, value: 1n } as unknown as StreamMemOp]), TypeError],
    [
      'batch(flush "yes")',
      (d) => d.streamBatchMemOp(0n, [{ op: 'wait32', addr: 16n, value: 1, condition: 'eq', flush: 'yes' } as unknown as StreamMemOp]),
      TypeError,
    ],
    ['beginCapture(mode strict)', (d) => d.streamBeginCapture(0n, 'strict' as 'global'), TypeError],
    ['graphLaunch(exec -1n)', (d) => d.graphLaunch(-1n, 0n), RangeError],
    ['moduleLoadData(Buffer)', (d) => d.moduleLoadData(Buffer.from(FILL_PTX) as unknown as string), TypeError],
    ['moduleLoadData("")', (d) => d.moduleLoadData(''), RangeError],
    ['moduleLoadData(NUL)', (d) => d.moduleLoadData('.version 8.0\0'), RangeError],
    ['moduleGetFunction(name with space)', (d) => d.moduleGetFunction(1n, 'a b'), RangeError],
    ['launch(grid [])', (d) => d.launchKernel(1n, { grid: [] as unknown as [number], block: [1] }, [], 0n), TypeError],
    ['launch(grid 0)', (d) => d.launchKernel(1n, { grid: [0], block: [1] }, [], 0n), RangeError],
    ['launch(block 2048)', (d) => d.launchKernel(1n, { grid: [1], block: [2048] }, [], 0n), RangeError],
    ['launch(block 32x64)', (d) => d.launchKernel(1n, { grid: [1], block: [32, 64] }, [], 0n), RangeError],
    ['launch(grid y 65536)', (d) => d.launchKernel(1n, { grid: [1, 65536], block: [1] }, [], 0n), RangeError],
    ['launch(shared -1)', (d) => d.launchKernel(1n, { grid: [1], block: [1], sharedMemBytes: -1 }, [], 0n), RangeError],
    ['launch(u32 -1)', (d) => d.launchKernel(1n, { grid: [1], block: [1] }, [{ type: 'u32', value: -1 }], 0n), RangeError],
    ['launch(i32 2^31)', (d) => d.launchKernel(1n, { grid: [1], block: [1] }, [{ type: 'i32', value: 2 ** 31 }], 0n), RangeError],
    ['launch(i64 2^63)', (d) => d.launchKernel(1n, { grid: [1], block: [1] }, [{ type: 'i64', value: 1n << 63n }], 0n), RangeError],
    ['launch(ptr number)', (d) => d.launchKernel(1n, { grid: [1], block: [1] }, [{ type: 'ptr', value: 5 } as unknown as KernelArg], 0n), TypeError],
    ['launch(f32 bigint)', (d) => d.launchKernel(1n, { grid: [1], block: [1] }, [{ type: 'f32', value: 1n } as unknown as KernelArg], 0n), TypeError],
    ['launch(type u8)', (d) => d.launchKernel(1n, { grid: [1], block: [1] }, [{ type: 'u8', value: 1 } as unknown as KernelArg], 0n), TypeError],
    [
      'launch(4104 bytes)',
      (d) =>
        d.launchKernel(
          1n,
          { grid: [1], block: [1] },
          Array.from({ length: 513 }, () => ({ type: 'u64' as const, value: 0n })),
          0n,
        ),
      RangeError,
    ],
  ];

  it.each(cases)('%s', (_name, call, errorClass) => {
    const { addon: fake, calls } = fakeAddon();
    const d = new NativeCudaDriver(fake);
    expect(() => call(d)).toThrow(errorClass);
    expect(calls).toEqual([]);
  });

  test.prop([fc.anything().filter((v) => !['geq', 'eq', 'and', 'nor'].includes(v as string))], { numRuns: 50 })(
    'any other wait condition is a TypeError, and native code never runs',
    (condition) => {
      const { addon: fake, calls } = fakeAddon();
      const d = new NativeCudaDriver(fake);
      expect(() => d.streamWaitValue32(0n, 64n, 1, condition as 'eq')).toThrow(TypeError);
      expect(() => d.streamBatchMemOp(0n, [{ op: 'wait64', addr: 64n, value: 1n, condition: condition as 'eq' }])).toThrow(TypeError);
      expect(calls).toEqual([]);
    },
  );
});

// ---- marshalling into the addon ------------------------------------------------------

describe('NativeCudaDriver marshals GPU-driven calls as the addon takes them', () => {
  it('maps conditions and flags to CU_STREAM_WAIT_VALUE_* / CU_STREAM_MEM_OP_* codes', () => {
    const { addon: fake, calls } = fakeAddon();
    const d = new NativeCudaDriver(fake);
    d.streamWaitValue32(7n, 64n, 1, 'geq');
    d.streamWaitValue32(7n, 64n, 2, 'eq');
    d.streamWaitValue32(7n, 64n, 3, 'and');
    d.streamWaitValue64(7n, 64n, 4n, 'nor');
    d.streamWriteValue32(7n, 68n, 0xffffffff);
    d.streamWriteValue64(7n, 72n, (1n << 64n) - 1n);
    d.streamBatchMemOp(7n, [
      { op: 'write32', addr: 64n, value: 9 },
      { op: 'write64', addr: 72n, value: 10n, noMemoryBarrier: true },
      { op: 'barrier' },
      { op: 'wait32', addr: 64n, value: 9, condition: 'eq', flush: true },
      { op: 'wait64', addr: 72n, value: 10n, condition: 'geq' },
    ]);
    expect(calls.slice(0, 6).map((c) => [c.name, ...c.args])).toEqual([
      ['cuStreamWaitValue32', 7n, 64n, 1, 0],
      ['cuStreamWaitValue32', 7n, 64n, 2, 1],
      ['cuStreamWaitValue32', 7n, 64n, 3, 2],
      ['cuStreamWaitValue64', 7n, 64n, 4n, 3],
      ['cuStreamWriteValue32', 7n, 68n, 0xffffffff, 0],
      ['cuStreamWriteValue64', 7n, 72n, (1n << 64n) - 1n, 0],
    ]);
    const batch = calls[6]!;
    expect(batch.name).toBe('cuStreamBatchMemOp');
    const [stream, count, codes, flags, addrs, values] = batch.args as [bigint, number, Uint32Array, Uint32Array, BigUint64Array, BigUint64Array];
    expect([stream, count]).toEqual([7n, 5]);
    expect(Array.from(codes)).toEqual([2, 5, 6, 1, 4]);
    expect(Array.from(flags)).toEqual([0, 1, 0, 0x40000001, 0]);
    expect(Array.from(addrs)).toEqual([64n, 72n, 0n, 64n, 72n]);
    expect(Array.from(values)).toEqual([9n, 10n, 0n, 9n, 10n]);
  });

  it('reuses its argument arrays from call to call, each call seeing only its own operations and parameters (a barrier clears its slot)', () => {
    const seen: unknown[] = [];
    const { addon: fake } = fakeAddon({
      cuStreamBatchMemOp: (_s: bigint, _n: number, codes: Uint32Array, flags: Uint32Array, addrs: BigUint64Array, values: BigUint64Array) =>
        seen.push([Array.from(codes), Array.from(flags), Array.from(addrs), Array.from(values)]),
      cuLaunchKernel: (_f: bigint, _d: Uint32Array, _s: bigint, params: ArrayBuffer) => seen.push(Buffer.from(params).toString('hex')),
    });
    const d = new NativeCudaDriver(fake);
    d.streamBatchMemOp(7n, [
      { op: 'write64', addr: 72n, value: 10n, noMemoryBarrier: true },
      { op: 'wait32', addr: 64n, value: 9, condition: 'eq', flush: true },
    ]);
    d.streamBatchMemOp(7n, [{ op: 'barrier' }, { op: 'barrier' }]);
    d.launchKernel(
      5n,
      { grid: [1], block: [1] },
      [
        { type: 'u64', value: 0x1122n },
        { type: 'u32', value: 7 },
      ],
      3n,
    );
    d.launchKernel(
      5n,
      { grid: [1], block: [1] },
      [
        { type: 'u64', value: 0x33n },
        { type: 'u32', value: 8 },
      ],
      3n,
    );
    expect(seen).toEqual([
      [
        [5, 1],
        [1, 0x40000001],
        [72n, 64n],
        [10n, 9n],
      ],
      [
        [6, 6],
        [0, 0],
        [0n, 0n],
        [0n, 0n],
      ],
      '22110000000000000700000000000000',
      '33000000000000000800000000000000',
    ]);
  });

  it("captures thread-local by default (the addon's poller thread keeps querying events), any mode on request", () => {
    const { addon: fake, calls } = fakeAddon({ cuStreamIsCapturing: 2 });
    const d = new NativeCudaDriver(fake);
    d.streamBeginCapture(3n);
    d.streamBeginCapture(3n, 'global');
    d.streamBeginCapture(3n, 'relaxed');
    expect(d.streamIsCapturing(3n)).toBe(true); // invalidated still has to be ended
    expect(calls.map((c) => [c.name, ...c.args])).toEqual([
      ['cuStreamBeginCapture', 3n, 1],
      ['cuStreamBeginCapture', 3n, 0],
      ['cuStreamBeginCapture', 3n, 2],
      ['cuStreamIsCapturing', 3n],
    ]);
  });

  it('launchKernel passes [grid, block, shared], the packed parameters and their layout', () => {
    const { addon: fake, calls } = fakeAddon();
    const d = new NativeCudaDriver(fake);
    d.launchKernel(
      5n,
      { grid: [4, 2], block: [256] },
      [
        { type: 'ptr', value: 0x1000n },
        { type: 'u32', value: 7 },
        { type: 'u64', value: 9n },
      ],
      3n,
    );
    const [fn, dims, stream, params, layout] = calls[0]!.args as [bigint, Uint32Array, bigint, ArrayBuffer, Uint32Array];
    expect([fn, stream]).toEqual([5n, 3n]);
    expect(Array.from(dims)).toEqual([4, 2, 1, 256, 1, 1, 0]);
    expect(Array.from(layout)).toEqual([0, 8, 8, 4, 16, 8]);
    expect(params.byteLength).toBe(24);
  });

  it('moduleLoadData times the load; a native CUDA error becomes CudaError', () => {
    const native = Object.assign(
      new Error('cuModuleLoadDataEx failed: CUDA_ERROR_INVALID_PTX (218): a PTX JIT compilation failed; JIT log: line 3: syntax error'),
      {
        code: 'CUDA_ERROR_INVALID_PTX',
        call: 'cuModuleLoadDataEx',
        result: 218,
        detail: 'a PTX JIT compilation failed; JIT log: line 3: syntax error',
      },
    );
    const { addon: ok } = fakeAddon({ cuModuleLoadData: 0x77n });
    const loaded = new NativeCudaDriver(ok).moduleLoadData(FILL_PTX);
    expect(loaded.module).toBe(0x77n);
    expect(loaded.loadMs).toBeGreaterThanOrEqual(0);
    const { addon: failing } = fakeAddon({}, { cuModuleLoadData: native });
    const load = () => new NativeCudaDriver(failing).moduleLoadData(FILL_PTX);
    expect(load).toThrow(CudaError);
    expect(load).toThrow(
      expect.objectContaining({ code: 'CUDA_ERROR_INVALID_PTX', call: 'cuModuleLoadDataEx', message: expect.stringContaining('JIT log: line 3') }),
    );
  });

  it('gpuDrivenStatus never throws: an addon that throws, CUDA unavailable, a group off, a device attribute 0', () => {
    const { addon: throwing } = fakeAddon({}, { gpuDrivenStatus: new Error('addon broke') });
    expect(new NativeCudaDriver(throwing).gpuDrivenStatus()).toEqual({
      streamMemOps: false,
      waitValueNor: false,
      memOps64: false,
      graphs: false,
      modules: false,
      reason: 'addon broke',
    });
    const { addon: none } = fakeAddon({ gpuDrivenStatus: { available: false, reason: 'libcuda.so.1 not found' } });
    expect(new NativeCudaDriver(none).gpuDrivenStatus()).toMatchObject({
      streamMemOps: false,
      graphs: false,
      modules: false,
      reason: 'CUDA is unavailable: libcuda.so.1 not found',
    });
    const { addon: partial, calls } = fakeAddon({
      gpuDrivenStatus: { available: true, memOps: true, graphs: false, graphsReason: 'no cuGraphLaunch', modules: true, waitValueNor: false, memOps64: true },
      cuDevicePrimaryCtxRetain: 1n,
    });
    const d = new NativeCudaDriver(partial);
    d.setDevice(2);
    expect(d.gpuDrivenStatus()).toEqual({
      streamMemOps: true,
      waitValueNor: false,
      memOps64: true,
      graphs: false,
      modules: true,
      reason: expect.stringMatching(/^no cuGraphLaunch; the device does not support CU_STREAM_WAIT_VALUE_NOR/),
    });
    expect(calls.at(-1)).toEqual({ name: 'gpuDrivenStatus', args: [2] }); // the current device's attributes
  });
});

describe('packKernelArgs', () => {
  it('puts each argument at a slot aligned to its size, little-endian', () => {
    const { params, layout } = packKernelArgs([
      { type: 'u32', value: 0x01020304 },
      { type: 'ptr', value: 0x1122334455667788n },
      { type: 'i32', value: -2 },
      { type: 'f32', value: -0.25 },
      { type: 'f64', value: 1.5 },
      { type: 'i64', value: -3n },
    ]);
    expect(Array.from(layout)).toEqual([0, 4, 8, 8, 16, 4, 20, 4, 24, 8, 32, 8]);
    const v = new DataView(params);
    expect(v.getUint32(0, true)).toBe(0x01020304);
    expect(v.getBigUint64(8, true)).toBe(0x1122334455667788n);
    expect(v.getInt32(16, true)).toBe(-2);
    expect(v.getFloat32(20, true)).toBe(-0.25);
    expect(v.getFloat64(24, true)).toBe(1.5);
    expect(v.getBigInt64(32, true)).toBe(-3n);
  });

  const arg = fc.oneof(
    fc.record({ type: fc.constantFrom('ptr' as const, 'u64' as const), value: fc.bigInt({ min: 0n, max: (1n << 64n) - 1n }) }),
    fc.record({ type: fc.constant('i64' as const), value: fc.bigInt({ min: -(1n << 63n), max: (1n << 63n) - 1n }) }),
    fc.record({ type: fc.constant('u32' as const), value: fc.integer({ min: 0, max: 2 ** 32 - 1 }) }),
    fc.record({ type: fc.constant('i32' as const), value: fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }) }),
    fc.record({ type: fc.constant('f64' as const), value: fc.double() }),
    fc.record({ type: fc.constant('f32' as const), value: fc.float() }),
  );

  test.prop([fc.array(arg, { maxLength: 40 })], { numRuns: 200 })('slots are aligned, disjoint, in order, and read back each value', (args) => {
    const { params, layout } = packKernelArgs(args as KernelArg[]);
    const v = new DataView(params);
    let end = 0;
    args.forEach((a, k) => {
      const [offset, size] = [layout[2 * k]!, layout[2 * k + 1]!];
      expect(offset % size).toBe(0);
      expect(offset).toBeGreaterThanOrEqual(end);
      end = offset + size;
      const read = {
        ptr: () => v.getBigUint64(offset, true),
        u64: () => v.getBigUint64(offset, true),
        i64: () => v.getBigInt64(offset, true),
        u32: () => v.getUint32(offset, true),
        i32: () => v.getInt32(offset, true),
        f64: () => v.getFloat64(offset, true),
        f32: () => v.getFloat32(offset, true),
      }[a.type]();
      expect(Object.is(read, a.value) || read === a.value).toBe(true);
    });
    expect(params.byteLength).toBeGreaterThanOrEqual(end);
    expect(params.byteLength % 8).toBe(0);
  });
});

describe('the shipped PTX', () => {
  it('fill.ptx.ts is PTX 8.0 with the entry it names and the parameters the tests pass (u64, u32, u64)', () => {
    expect(FILL_PTX).toMatch(/^\.version 8\.0\n\.target sm_75\n\.address_size 64\n/);
    expect(FILL_ENTRIES).toEqual(['smcuda_fill_u32']);
    const params = /\.entry smcuda_fill_u32\(([^)]*)\)/.exec(FILL_PTX)![1]!;
    expect([...params.matchAll(/\.param \.(\w+)/g)].map((m) => m[1])).toEqual(['u64', 'u32', 'u64']);
  });
});

// ---- the real addon over a fake libcuda.so.1 -------------------------------------------

const addonAvailable = loadAddon().cudaStatus().available;
const fixture = join(root, 'test', 'fixtures', 'native-fake-cuda.mjs');
const compiled = existsSync(join(root, 'dist', 'src', 'kernels', 'fill.ptx.js'));
const cc = ['cc', 'gcc'].find((c) => {
  try {
    execFileSync(c, ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
});

describe.skipIf(addonAvailable || !cc || !compiled)('GPU-driven calls of the addon over a fake libcuda.so.1 (child processes)', () => {
  let libDir = '';
  let logs = 0;

  beforeAll(() => {
    libDir = mkdtempSync(join(tmpdir(), 'smcuda-fake-cuda-gpu-'));
    execFileSync(cc!, ['-shared', '-fPIC', '-O1', '-o', join(libDir, 'libcuda.so.1'), join(root, 'test', 'fixtures', 'fake-libcuda.c')]);
  });
  afterAll(() => {
    if (libDir) rmSync(libDir, { recursive: true, force: true });
  });

  // biome-ignore lint/suspicious/noExplicitAny: the fixture's JSON result, read field by field
  async function scenario(name: string, env: Record<string, string> = {}): Promise<any> {
    const { stdout } = await run(process.execPath, [fixture, name], {
      env: { ...process.env, LD_LIBRARY_PATH: libDir, FAKE_CUDA_LOG: join(libDir, `log-${logs++}`), ...env },
      timeout: 20_000,
    });
    return JSON.parse(stdout.trim().split('\n').at(-1)!);
  }

  it('fetches every entry point through cuGetProcAddress: the memory operations with cudaVersion 11070, the rest 12000', async () => {
    const { log, status } = await scenario('gpu-driven');
    expect(status).toEqual({ streamMemOps: true, waitValueNor: true, memOps64: true, graphs: true, modules: true });
    const asked = new Map((log as string[]).filter((l) => l.startsWith('cuGetProcAddress ')).map((l) => l.split(' ').slice(1) as [string, string]));
    for (const name of ['cuStreamWaitValue32', 'cuStreamWaitValue64', 'cuStreamWriteValue32', 'cuStreamWriteValue64', 'cuStreamBatchMemOp']) {
      expect(asked.get(name)).toBe('11070');
    }
    for (const name of [
      'cuStreamBeginCapture',
      'cuStreamEndCapture',
      'cuStreamIsCapturing',
      'cuGraphInstantiateWithFlags',
      'cuGraphLaunch',
      'cuGraphExecDestroy',
      'cuGraphDestroy',
      'cuModuleLoadDataEx',
      'cuModuleUnload',
      'cuModuleGetFunction',
      'cuLaunchKernel',
    ]) {
      expect(asked.get(name)).toBe('12000');
    }
  });

  it('marshals values, condition flags, batches, capture modes and kernel parameter bytes; errors are CudaError', async () => {
    const out = await scenario('gpu-driven');
    const calls = (out.log as string[])
      .filter((l) => !l.startsWith('cuGetProcAddress '))
      .map((l) => l.replace(/(stream|addr)=0x[0-9a-f]+/g, '$1=X').replace(/(smcuda_fill_u32 .*params=)\S+ /, '$1PTR '));
    expect(calls).toEqual([
      'cuStreamWriteValue32_v2 stream=X addr=X value=3735928559 flags=0',
      'cuStreamWriteValue64_v2 stream=X addr=X value=18364758544493064720 flags=0',
      'cuStreamWaitValue32_v2 stream=X addr=X value=7 flags=0',
      'cuStreamWaitValue32_v2 stream=X addr=X value=7 flags=0x1',
      'cuStreamWaitValue32_v2 stream=X addr=X value=7 flags=0x2',
      'cuStreamWaitValue32_v2 stream=X addr=X value=7 flags=0x3',
      'cuStreamWaitValue64_v2 stream=X addr=X value=18446744073709551615 flags=0x3',
      'cuStreamBatchMemOp_v2 stream=X count=5 flags=0 size=48',
      '  op=2 addr=X value=42 flags=0',
      '  op=5 addr=X value=9223372036854775808 flags=0x1',
      '  barrier flags=0',
      '  op=1 addr=X value=42 flags=0x40000001',
      '  op=4 addr=X value=1 flags=0x2',
      'cuStreamBeginCapture_v2 stream=X mode=1',
      'cuStreamWriteValue32_v2 stream=X addr=X value=1 flags=0',
      'cuStreamEndCapture stream=X',
      'cuStreamEndCapture stream=X',
      'cuStreamBeginCapture_v2 stream=X mode=2',
      'cuStreamEndCapture stream=X',
      'cuGraphInstantiateWithFlags graph=set flags=0',
      'cuGraphLaunch exec=set stream=X',
      `cuModuleLoadDataEx bytes=${FILL_PTX.length} options=2`,
      'cuModuleGetFunction name=smcuda_fill_u32',
      'cuLaunchKernel smcuda_fill_u32 grid=2,1,1 block=128,1,1 shared=0 stream=X params=PTR 3412cdab 0400000000000000',
      'cuModuleGetFunction name=smcuda_nope',
      expect.stringMatching(/^cuModuleLoadDataEx bytes=\d+ options=2$/),
      'cuModuleGetFunction name=probe',
      // u32, ptr, i32, f64 1.5, f32 -0.25, i64 -3, u64 max: each slot read by the .param list's widths
      'cuLaunchKernel probe grid=3,2,1 block=32,4,1 shared=256 stream=X params=04030201 8877665544332211 feffffff 000000000000f83f 000080be fdffffffffffffff ffffffffffffffff',
      expect.stringMatching(/^cuModuleLoadDataEx bytes=\d+ options=2$/),
      'cuStreamWriteValue32_v2 stream=X addr=X value=1 flags=0',
      'cuGraphLaunch exec=set stream=X',
    ]);
    // The fill kernel's pointer parameter is the buffer's address + 32.
    const fillLine = (out.log as string[]).find((l) => l.startsWith('cuLaunchKernel smcuda_fill_u32'))!;
    const addrOfWrite = BigInt(/cuStreamWriteValue32_v2 stream=\S+ addr=(0x[0-9a-f]+)/.exec((out.log as string[]).join('\n'))![1]!);
    const ptrHex = /params=(\w+)/.exec(fillLine)![1]!;
    expect(BigInt(`0x${ptrHex.match(/../g)!.reverse().join('')}`)).toBe(addrOfWrite + 32n);

    expect(out.afterWrites).toMatchObject({ w0: 0xdeadbeef, w8: `${0xfedcba9876543210n}n` });
    expect(out.afterBatch).toMatchObject({ w16: 42, w24: `${1n << 63n}n` });
    expect(out.afterFill.fill).toEqual([0xabcd1234, 0xabcd1234, 0xabcd1234, 0xabcd1234, 0]);
    expect(out).toMatchObject({ capturing: true, capturingAfterEnd: false, loadMs: true });
    expect(out.endTwice.error).toMatchObject({ isCudaError: true, code: 'CUDA_ERROR_ILLEGAL_STATE', call: 'cuStreamEndCapture', result: 401 });
    expect(out.missingEntry.error).toMatchObject({ isCudaError: true, code: 'CUDA_ERROR_NOT_FOUND', call: 'cuModuleGetFunction' });
    expect(out.badPtx.error).toMatchObject({
      isCudaError: true,
      code: 'CUDA_ERROR_INVALID_PTX',
      call: 'cuModuleLoadDataEx',
      message: expect.stringContaining('fake JIT: no .version directive'),
    });
    expect(out.badStream.error).toMatchObject({ isCudaError: true, code: 'CUDA_ERROR_ILLEGAL_ADDRESS', call: 'cuStreamWriteValue32', result: 700 });
    expect(out.badStreamLaunch.error).toMatchObject({ isCudaError: true, code: 'CUDA_ERROR_ILLEGAL_ADDRESS', call: 'cuGraphLaunch' });
  });

  it("a missing entry point turns its group off with the reason; the group's calls are CUDA_ERROR_NOT_SUPPORTED; the driver stays usable", async () => {
    const [noWait64, noLaunch, noGraph, noNor, oldDriver] = await Promise.all([
      scenario('gpu-status', { FAKE_CUDA_MISSING: 'cuStreamWaitValue64' }),
      scenario('gpu-status', { FAKE_CUDA_MISSING: 'cuLaunchKernel' }),
      scenario('gpu-status', { FAKE_CUDA_MISSING: 'cuGraphLaunch' }),
      scenario('gpu-status', { FAKE_CUDA_NOR: '0' }),
      scenario('gpu-status', { FAKE_CUDA_VERSION: '11080' }),
    ]);
    expect(noWait64.status).toEqual({
      streamMemOps: false,
      waitValueNor: false,
      memOps64: false,
      graphs: true,
      modules: true,
      reason: expect.stringMatching(/does not provide cuStreamWaitValue64 for the CUDA 11\.7 ABI \(symbol not found.*update the NVIDIA driver/),
    });
    expect(noWait64.write32.error).toMatchObject({ isCudaError: true, code: 'CUDA_ERROR_NOT_SUPPORTED', call: 'cuStreamWriteValue32_v2', result: 801 });
    expect(noWait64.load).toEqual({ value: true });
    expect(noLaunch.status).toMatchObject({
      streamMemOps: true,
      graphs: true,
      modules: false,
      reason: expect.stringContaining('does not provide cuLaunchKernel'),
    });
    expect(noLaunch.load.error).toMatchObject({ code: 'CUDA_ERROR_NOT_SUPPORTED' });
    expect(noLaunch.write32).toEqual({});
    expect(noGraph.status).toMatchObject({ streamMemOps: true, graphs: false, modules: true, reason: expect.stringContaining('cuGraphLaunch') });
    expect(noGraph.capture.error).toMatchObject({ code: 'CUDA_ERROR_NOT_SUPPORTED', call: 'cuStreamIsCapturing' });
    expect(noNor.status).toEqual({
      streamMemOps: true,
      waitValueNor: false,
      memOps64: true,
      graphs: true,
      modules: true,
      reason: expect.stringContaining('CU_STREAM_WAIT_VALUE_NOR'),
    });
    expect(oldDriver.status).toMatchObject({
      streamMemOps: false,
      graphs: false,
      modules: false,
      reason: expect.stringMatching(/^CUDA is unavailable: .*CUDA 11\.8/),
    });
  });
});
