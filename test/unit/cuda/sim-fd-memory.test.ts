/**
 * The simulator's fd-shared memory (sim/fd-memory.ts) and its injected faults
 * (sim/fd-faults.ts): two driver instances in one process stand for two
 * processes (the descriptors are real memfds either way); every test counts
 * this process's descriptors back to where they started.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { SimulatedCudaDriver } from '../../../src/cuda/sim-driver.js';
import { ConfigError, CudaError } from '../../../src/errors.js';
import { patternBytes } from '../../helpers/bytes.js';
import { openFds } from '../../helpers/fd-peer.js';

const MiB = 1024 * 1024;

function driver(env: Record<string, string> = {}): SimulatedCudaDriver {
  const d = new SimulatedCudaDriver({ env });
  d.init();
  d.setDevice(0);
  return d;
}

function code(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(CudaError);
    return (err as CudaError).code;
  }
  return undefined;
}

let fdsAtStart = 0;
const made: SimulatedCudaDriver[] = [];
beforeEach(() => {
  fdsAtStart = openFds();
});
afterEach(() => {
  for (const d of made.splice(0)) d.close();
  expect(openFds()).toBe(fdsAtStart);
});

function two(env: Record<string, string> = {}): [SimulatedCudaDriver, SimulatedCudaDriver] {
  const pair: [SimulatedCudaDriver, SimulatedCudaDriver] = [driver(), driver(env)];
  made.push(...pair);
  return pair;
}

describe('simulated fd-shared memory', () => {
  it('an injected import failure is delivered once, with nothing held afterwards', () => {
    const [a, b] = two();
    const v = a.vmmAlloc(MiB);
    const ex = a.vmmExport(v.ptr, MiB);
    b.injectFdFaults({ importFailures: ['CUDA_ERROR_OUT_OF_MEMORY'] });
    expect(code(() => b.vmmImport(ex.chunks))).toBe('CUDA_ERROR_OUT_OF_MEMORY');
    expect(b.fdMemoryResources()).toEqual({ reservations: 0, mappings: 0, pools: 0, importedPools: 0, importedPointers: 0 });
    const im = b.vmmImport(ex.chunks);
    for (const c of ex.chunks) a.closeFd(c.fd);
    b.vmmRelease(im.ptr);
    a.vmmFree(v.ptr);
  });

  it('child processes get their faults from SMCUDA_SIM_FD_FAULTS; bad values are ConfigError', () => {
    const [a, b] = two({ SMCUDA_SIM_FD_FAULTS: JSON.stringify({ importFailures: ['CUDA_ERROR_INVALID_HANDLE'] }) });
    const pool = a.memPoolCreate();
    const fd = a.memPoolExport(pool);
    try {
      expect(code(() => b.memPoolImport(fd))).toBe('CUDA_ERROR_INVALID_HANDLE');
      b.memPoolRelease(b.memPoolImport(fd));
    } finally {
      a.closeFd(fd);
      a.memPoolDestroy(pool);
    }
    expect(() => new SimulatedCudaDriver({ env: { SMCUDA_SIM_FD_FAULTS: '{' } })).toThrow(ConfigError);
    expect(() => new SimulatedCudaDriver({ env: { SMCUDA_SIM_FD_FAULTS: '{"importFailures":["NOPE"]}' } })).toThrow(ConfigError);
  });

  it('a memfd of the wrong size, of another device, or not from the simulator is refused', () => {
    const [a, b] = two();
    a.setDevice(1);
    const other = a.vmmAlloc(MiB);
    a.setDevice(0);
    const v = a.vmmAlloc(MiB);
    const exOther = a.vmmExport(other.ptr, 1);
    const ex = a.vmmExport(v.ptr, 1);
    try {
      expect(code(() => b.vmmImport([{ ...ex.chunks[0]!, size: ex.chunks[0]!.size / 2 }]))).toBe('CUDA_ERROR_INVALID_VALUE');
      expect(code(() => b.vmmImport(exOther.chunks, { device: 0 }))).toBe('CUDA_ERROR_INVALID_DEVICE');
      expect(code(() => b.vmmImport([{ fd: 0, offset: 0, size: v.chunkSize }]))).toBe('CUDA_ERROR_INVALID_VALUE');
      expect(code(() => b.memPoolImport(ex.chunks[0]!.fd))).toBe('CUDA_ERROR_INVALID_VALUE');
      expect(b.fdMemoryResources().reservations).toBe(0);
    } finally {
      for (const c of [...ex.chunks, ...exOther.chunks]) a.closeFd(c.fd);
      a.vmmFree(v.ptr);
      a.vmmFree(other.ptr);
    }
  });

  it('pools: export data of another pool is refused; maxSize holds; a pool with allocations cannot be destroyed', () => {
    const [a, b] = two();
    const s = a.streamCreate();
    const p1 = a.memPoolCreate({ maxSize: 4 * MiB });
    const p2 = a.memPoolCreate();
    const x = a.memAllocFromPoolAsync(MiB, p1, s);
    const y = a.memAllocFromPoolAsync(MiB, p2, s);
    expect(code(() => a.memAllocFromPoolAsync(4 * MiB, p1, s))).toBe('CUDA_ERROR_OUT_OF_MEMORY');
    expect(code(() => a.memPoolDestroy(p1))).toBe('CUDA_ERROR_INVALID_VALUE');
    expect(code(() => a.memFree(x))).toBe('CUDA_ERROR_INVALID_VALUE'); // not cuMemAlloc memory
    const fd1 = a.memPoolExport(p1);
    const ip1 = b.memPoolImport(fd1);
    a.closeFd(fd1);
    a.closeFd(a.memPoolExport(p2)); // its pointers can be exported from now on
    const dataY = a.memPoolExportPointer(y);
    expect(code(() => b.memPoolImportPointer(ip1, dataY))).toBe('CUDA_ERROR_INVALID_VALUE');
    const ix = b.memPoolImportPointer(ip1, a.memPoolExportPointer(x));
    expect(code(() => b.memPoolRelease(ip1))).toBe('CUDA_ERROR_INVALID_VALUE'); // a pointer is still imported
    const data = patternBytes(MiB, 3);
    b.memcpyHtoD(ix, data); // the importer writes, the exporter sees it
    const out = new Uint8Array(MiB);
    a.memcpyDtoH(out, x);
    expect(Buffer.compare(out, data)).toBe(0);
    b.memPoolReleasePointer(ix);
    b.memPoolRelease(ip1);
    a.memFreeAsync(x, s);
    a.memFreeAsync(y, s);
    a.streamSynchronize(s);
    expect(code(() => a.memcpyDtoH(out, x))).toBe('CUDA_ERROR_INVALID_VALUE');
    a.memPoolDestroy(p1);
    a.memPoolDestroy(p2);
    expect(a.fdMemoryResources()).toEqual({ reservations: 0, mappings: 0, pools: 0, importedPools: 0, importedPointers: 0 });
  });

  it("pools: a destroyed pool's handle goes to the next pool made; a pool's pointers are exported only once the pool was", () => {
    // Both as seen on H100 (issue 24 item 2).
    const a = driver();
    made.push(a);
    const s = a.streamCreate();
    const p1 = a.memPoolCreate();
    a.memPoolDestroy(p1);
    const p2 = a.memPoolCreate();
    expect(p2).toBe(p1);
    const x = a.memAllocFromPoolAsync(MiB, p2, s);
    expect(code(() => a.memPoolExportPointer(x))).toBe('CUDA_ERROR_INVALID_VALUE');
    a.closeFd(a.memPoolExport(p2));
    expect(a.memPoolExportPointer(x)).toHaveLength(64);
    a.memFreeAsync(x, s);
    a.streamSynchronize(s);
    a.memPoolDestroy(p2);
  });

  it('close() releases every range, pool and descriptor still held', () => {
    const [a, b] = two();
    const v = a.vmmAlloc(3 * MiB, { chunks: 3 });
    const ex = a.vmmExport(v.ptr, 3 * MiB);
    b.vmmImport(ex.chunks);
    for (const c of ex.chunks) a.closeFd(c.fd);
    const pool = a.memPoolCreate();
    a.memAllocFromPoolAsync(MiB, pool, 0n);
    const fd = a.memPoolExport(pool);
    b.memPoolImport(fd);
    a.closeFd(fd);
    expect(openFds()).toBeGreaterThan(fdsAtStart);
    // afterEach closes both drivers and counts the descriptors back.
  });
});
