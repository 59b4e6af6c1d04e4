/**
 * NativeCudaDriver's fd-shared memory logic without a GPU: an injected fake
 * addon records every call, so the order of driver calls, the undo of a
 * half-done allocation or import, the chunk walk of an export and the
 * classification of memory kinds are checked here; the real driver's
 * behaviour is the GPU contract suite's job (test/gpu/).
 */
import { describe, expect, it } from 'vitest';
import type { NativeAddon, NativeMemoryInfo } from '../../../src/cuda/native-addon.js';
import { NativeCudaDriver } from '../../../src/cuda/native-driver.js';
import { CudaError } from '../../../src/errors.js';

const MiB = 1024 * 1024;

interface Call {
  name: string;
  args: unknown[];
}

function fake(returns: Record<string, unknown> = {}) {
  const calls: Call[] = [];
  const addon = new Proxy(
    {},
    {
      get:
        (_t, name: string) =>
        (...args: unknown[]) => {
          calls.push({ name, args });
          const r = returns[name];
          return typeof r === 'function' ? (r as (...a: unknown[]) => unknown)(...args) : r;
        },
    },
  ) as NativeAddon;
  const d = new NativeCudaDriver(addon);
  return { d, calls, names: () => calls.map((c) => c.name) };
}

function nativeCudaError(call: string, code: string, result: number): Error {
  return Object.assign(new Error(`${call} failed: ${code} (${result})`), { code, call, result, detail: '' });
}

function ready(returns: Record<string, unknown>) {
  const f = fake({ cuDevicePrimaryCtxRetain: 0xc0n, ...returns });
  f.d.setDevice(0);
  f.calls.length = 0;
  return f;
}

const info = (over: Partial<NativeMemoryInfo>): NativeMemoryInfo => ({
  memoryType: 2,
  bufferId: 9n,
  device: 0,
  legacyIpc: false,
  rangeStart: 0n,
  rangeSize: 0,
  allowedHandleTypes: 0,
  mempool: 0n,
  mappingBase: 0n,
  mappingSize: 0,
  ...over,
});

describe('NativeCudaDriver: VMM allocation', () => {
  it('needs a current device', () => {
    const { d } = fake();
    expect(() => d.vmmAlloc(MiB)).toThrow(CudaError);
  });

  it('rounds chunks up to the granularity, maps them one after another, releases each handle once mapped, grants access', () => {
    let h = 0x100n;
    const { d, calls } = ready({ cuMemGetAllocationGranularity: 2 * MiB, cuMemAddressReserve: 0x1000_0000n, cuMemCreate: () => h++ });
    const v = d.vmmAlloc(5 * MiB, { chunks: 3 });
    expect(v).toEqual({ ptr: 0x1000_0000n, size: 6 * MiB, chunkSize: 2 * MiB, chunks: 3 });
    expect(calls.map((c) => [c.name, ...c.args])).toEqual([
      ['cuMemGetAllocationGranularity', 0],
      ['cuMemAddressReserve', 6 * MiB, 0],
      ['cuMemCreate', 2 * MiB, 0],
      ['cuMemMap', 0x1000_0000n, 2 * MiB, 0x100n],
      ['cuMemRelease', 0x100n],
      ['cuMemCreate', 2 * MiB, 0],
      ['cuMemMap', 0x1000_0000n + BigInt(2 * MiB), 2 * MiB, 0x101n],
      ['cuMemRelease', 0x101n],
      ['cuMemCreate', 2 * MiB, 0],
      ['cuMemMap', 0x1000_0000n + BigInt(4 * MiB), 2 * MiB, 0x102n],
      ['cuMemRelease', 0x102n],
      ['cuMemSetAccess', 0x1000_0000n, 6 * MiB, 0],
    ]);
    expect(d.fdMemoryResources()).toMatchObject({ reservations: 1, mappings: 3 });
    calls.length = 0;
    d.vmmFree(v.ptr);
    expect(calls.map((c) => c.name)).toEqual(['cuMemUnmap', 'cuMemUnmap', 'cuMemUnmap', 'cuMemAddressFree']);
    expect(d.fdMemoryResources()).toMatchObject({ reservations: 0, mappings: 0 });
  });

  it('a failing map undoes what was done: unmaps mapped chunks, releases every handle, frees the range', () => {
    let maps = 0;
    let h = 0x100n;
    const { d, calls } = ready({
      cuMemGetAllocationGranularity: 2 * MiB,
      cuMemAddressReserve: 0x2000_0000n,
      cuMemCreate: () => h++,
      cuMemMap: () => {
        if (++maps === 2) throw nativeCudaError('cuMemMap', 'CUDA_ERROR_OUT_OF_MEMORY', 2);
      },
    });
    expect(() => d.vmmAlloc(4 * MiB, { chunks: 2 })).toThrow(expect.objectContaining({ code: 'CUDA_ERROR_OUT_OF_MEMORY' }));
    expect(calls.filter((c) => c.name === 'cuMemRelease').map((c) => c.args[0])).toEqual([0x100n, 0x101n]);
    expect(calls.filter((c) => c.name === 'cuMemUnmap').map((c) => c.args)).toEqual([[0x2000_0000n, 2 * MiB]]);
    expect(calls.filter((c) => c.name === 'cuMemAddressFree').map((c) => c.args)).toEqual([[0x2000_0000n, 4 * MiB]]);
    expect(d.fdMemoryResources()).toMatchObject({ reservations: 0, mappings: 0 });
  });
});

describe('NativeCudaDriver: VMM import', () => {
  const chunks = [
    { fd: 30, offset: 0, size: 2 * MiB },
    { fd: 31, offset: 2 * MiB, size: 2 * MiB },
  ];

  it('imports each descriptor, maps it at its offset, releases the handle, grants access; vmmRelease undoes it', () => {
    const { d, calls } = ready({
      cuMemAddressReserve: 0x3000_0000n,
      cuMemImportFromShareableHandle: (fd: unknown) => BigInt(fd as number) + 0x500n,
      cuMemGetAllocationPropertiesFromHandle: { type: 1, handleTypes: 1, locationType: 1, device: 0 },
    });
    const im = d.vmmImport(chunks, { device: 0 });
    expect(im).toEqual({ ptr: 0x3000_0000n, size: 4 * MiB });
    expect(calls.filter((c) => c.name === 'cuMemMap').map((c) => c.args)).toEqual([
      [0x3000_0000n, 2 * MiB, 30n + 0x500n],
      [0x3000_0000n + BigInt(2 * MiB), 2 * MiB, 31n + 0x500n],
    ]);
    expect(calls.filter((c) => c.name === 'cuMemRelease').length).toBe(2);
    expect(calls.some((c) => c.name === 'fdClose')).toBe(false); // the descriptors stay the caller's
    d.vmmRelease(im.ptr);
    expect(() => d.vmmRelease(im.ptr)).toThrow(CudaError);
    expect(d.fdMemoryResources()).toMatchObject({ reservations: 0, mappings: 0 });
  });

  it('a descriptor of another device than promised is CUDA_ERROR_INVALID_DEVICE, and all is undone', () => {
    const { d, calls } = ready({
      cuMemAddressReserve: 0x3000_0000n,
      cuMemImportFromShareableHandle: 0x77n,
      cuMemGetAllocationPropertiesFromHandle: { type: 1, handleTypes: 1, locationType: 1, device: 1 },
    });
    expect(() => d.vmmImport(chunks, { device: 0 })).toThrow(expect.objectContaining({ code: 'CUDA_ERROR_INVALID_DEVICE' }));
    expect(calls.filter((c) => c.name === 'cuMemRelease').map((c) => c.args[0])).toEqual([0x77n]);
    expect(calls.some((c) => c.name === 'cuMemMap')).toBe(false);
    expect(calls.filter((c) => c.name === 'cuMemAddressFree').length).toBe(1);
    expect(d.fdMemoryResources()).toMatchObject({ reservations: 0 });
  });

  it('a failing second import unmaps the first chunk and frees the range', () => {
    let n = 0;
    const { d, calls } = ready({
      cuMemAddressReserve: 0x3000_0000n,
      cuMemImportFromShareableHandle: () => {
        if (++n === 2) throw nativeCudaError('cuMemImportFromShareableHandle', 'CUDA_ERROR_INVALID_VALUE', 1);
        return 0x90n;
      },
    });
    expect(() => d.vmmImport(chunks)).toThrow(expect.objectContaining({ code: 'CUDA_ERROR_INVALID_VALUE', call: 'cuMemImportFromShareableHandle' }));
    expect(calls.filter((c) => c.name === 'cuMemUnmap').map((c) => c.args)).toEqual([[0x3000_0000n, 2 * MiB]]);
    expect(calls.filter((c) => c.name === 'cuMemAddressFree').length).toBe(1);
  });
});

describe('NativeCudaDriver: memoryKind and export', () => {
  it('classifies each kind from the pointer attributes, with a reason for the rest', () => {
    const table: Array<[Partial<NativeMemoryInfo>, string, RegExp?]> = [
      [{ legacyIpc: true }, 'legacy-ipc'],
      [{ allowedHandleTypes: 1, mappingBase: 0x10n, mappingSize: 2 * MiB, rangeStart: 0x0n, rangeSize: 8 * MiB }, 'vmm'],
      [{ allowedHandleTypes: 1, mempool: 0xabn }, 'pool'],
      [{ mempool: 0xabn }, 'other', /pool created without POSIX file descriptor/],
      [{}, 'other', /not IPC capable/],
      [{ memoryType: 1 }, 'other', /host memory/],
    ];
    for (const [over, kind, reason] of table) {
      const { d } = ready({ cuPointerGetMemoryInfo: info(over) });
      const k = d.memoryKind(0x10n);
      expect(k.kind).toBe(kind);
      if (reason) expect(k.reason).toMatch(reason);
      if (kind === 'vmm') expect(k.chunk).toEqual({ base: 0x10n, size: 2 * MiB });
      if (kind === 'pool') expect(k.pool).toBe(0xabn);
    }
    const { d } = ready({ cuPointerGetMemoryInfo: info({ allowedHandleTypes: 1, rangeStart: 0x20n, rangeSize: MiB }) });
    expect(d.memoryKind(0x30n).chunk).toEqual({ base: 0x20n, size: MiB }); // older drivers: the range names the mapping
    const unknown = ready({ cuPointerGetMemoryInfo: info({ memoryType: 0 }) });
    expect(() => unknown.d.memoryKind(0x10n)).toThrow(CudaError);
  });

  it('vmmExport walks the chunks the span touches; a failure closes the descriptors already made', () => {
    const chunkAt = (p: bigint) => {
      const k = (p - 0x100000n) / BigInt(2 * MiB);
      return info({ allowedHandleTypes: 1, mappingBase: 0x100000n + k * BigInt(2 * MiB), mappingSize: 2 * MiB });
    };
    let fd = 40;
    const ok = ready({ cuPointerGetMemoryInfo: chunkAt, cuMemRetainAllocationHandle: 0x5n, cuMemExportToShareableHandle: () => fd++ });
    const ex = ok.d.vmmExport(0x100000n + BigInt(MiB), 3 * MiB);
    expect(ex).toEqual({
      base: 0x100000n,
      size: 4 * MiB,
      chunks: [
        { fd: 40, offset: 0, size: 2 * MiB },
        { fd: 41, offset: 2 * MiB, size: 2 * MiB },
      ],
    });
    expect(ok.calls.filter((c) => c.name === 'cuMemRelease').length).toBe(2);

    let n = 0;
    const bad = ready({
      cuPointerGetMemoryInfo: chunkAt,
      cuMemRetainAllocationHandle: 0x5n,
      cuMemExportToShareableHandle: () => {
        if (++n === 2) throw nativeCudaError('cuMemExportToShareableHandle', 'CUDA_ERROR_OUT_OF_MEMORY', 2);
        return 50;
      },
    });
    expect(() => bad.d.vmmExport(0x100000n, 4 * MiB)).toThrow(CudaError);
    expect(bad.calls.filter((c) => c.name === 'fdClose').map((c) => c.args[0])).toEqual([50]);
    expect(bad.calls.filter((c) => c.name === 'cuMemRelease').length).toBe(2); // every retained handle is released
  });

  it('memPoolImport grants the current device access only where the pool is on another, and undoes a failed grant', () => {
    const same = ready({ cuMemPoolImportFromShareableHandle: 0x900n });
    same.d.memPoolImport(5, { device: 0 });
    expect(same.calls.some((c) => c.name === 'cuMemPoolSetAccess')).toBe(false);
    const other = ready({
      cuMemPoolImportFromShareableHandle: 0x900n,
      cuMemPoolSetAccess: () => {
        throw nativeCudaError('cuMemPoolSetAccess', 'CUDA_ERROR_PEER_ACCESS_UNSUPPORTED', 217);
      },
    });
    expect(() => other.d.memPoolImport(5, { device: 1 })).toThrow(expect.objectContaining({ code: 'CUDA_ERROR_PEER_ACCESS_UNSUPPORTED' }));
    expect(other.calls.filter((c) => c.name === 'cuMemPoolDestroy').map((c) => c.args[0])).toEqual([0x900n]);
    expect(other.d.fdMemoryResources().importedPools).toBe(0);
  });
});
