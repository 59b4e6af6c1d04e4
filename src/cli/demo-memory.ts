/**
 * The kinds of GPU memory `smcuda demo --memory` (and bench) can allocate
 * buffers from, through the driver:
 *  - legacy: cuMemAlloc (shared by cuIpcGetMemHandle);
 *  - vmm: one cuMemCreate chunk mapped into a reserved range (by descriptor);
 *  - vmm-chunked: four chunks mapped one after another, and every message
 *    placed across the boundary of the first two, so that it spans chunks
 *    (what PyTorch's expandable segments produce, and what a data path must
 *    map contiguously);
 *  - pool: cuMemAllocFromPoolAsync from a pool made with the POSIX fd handle type.
 */
import type { DeviceBuffer } from '../buffers.js';
import type { CudaDriver, DevicePtr, PoolHandle, StreamHandle } from '../cuda/driver.js';
import { ConfigError } from '../errors.js';
import { GpuRuntime } from '../gpu/gpu-runtime.js';

export const MEMORY_OPTIONS = ['legacy', 'vmm', 'vmm-chunked', 'pool'] as const;
export type MemoryOption = (typeof MEMORY_OPTIONS)[number];

/** The chunks of a vmm-chunked buffer. */
export const DEMO_CHUNKS = 4;

/** A buffer for messages up to the size it was made for; `view(size)` is where a message of `size` bytes goes. */
export interface DemoBuffer {
  view(size: number): DeviceBuffer;
  /** Base of the whole allocation (where memoryKind is asked). */
  readonly base: DevicePtr;
}

export interface MemoryDescription {
  kind: string;
  reason?: string;
  chunkSize?: number;
  chunksTouched?: number;
}

export interface DemoMemory {
  readonly option: MemoryOption;
  alloc(maxSize: number): DemoBuffer;
  /** What the driver says of `buf` (memoryKind), and for vmm-chunked how many chunks a `maxSize` message touches. */
  describe(buf: DemoBuffer | undefined, maxSize: number): MemoryDescription;
  /** Frees every buffer (and the pool). */
  freeAll(): void;
}

const EMPTY: DemoBuffer = { base: 0n, view: () => ({ ptr: 0n, length: 0 }) };

export function isMemoryOption(value: string): value is MemoryOption {
  return (MEMORY_OPTIONS as readonly string[]).includes(value);
}

/** Allocator of `option` memory on the current device; refuses the descriptor kinds where the driver cannot make them. */
/** `gpu`: the runtime that waits for the pool's allocations (a transport's; else one of its own). */
export function allocDemoMemory(driver: CudaDriver, option: MemoryOption, gpu: GpuRuntime = new GpuRuntime(driver)): DemoMemory {
  if (option !== 'legacy') {
    const st = driver.status();
    if (st.fdMemory !== true) {
      throw new ConfigError(
        `--memory ${option} needs VMM/pool memory shareable by file descriptor, which this driver cannot make` +
          `${st.fdMemoryReason ? `: ${st.fdMemoryReason}` : ''}; use --memory legacy`,
      );
    }
  }
  const frees: Array<() => void> = [];
  let pool: PoolHandle | undefined;
  let stream: StreamHandle | undefined;
  const chunkSizes = new Map<DevicePtr, number>();

  const alloc = (maxSize: number): DemoBuffer => {
    if (maxSize === 0) return EMPTY;
    switch (option) {
      case 'legacy': {
        const ptr = driver.memAlloc(maxSize);
        frees.push(() => driver.memFree(ptr));
        return { base: ptr, view: (size) => ({ ptr, length: size }) };
      }
      case 'vmm': {
        const v = driver.vmmAlloc(maxSize);
        frees.push(() => driver.vmmFree(v.ptr));
        return { base: v.ptr, view: (size) => ({ ptr: v.ptr, length: size }) };
      }
      case 'vmm-chunked': {
        // Twice the size in four chunks: each chunk holds at least half the largest message,
        // so a message centred on the first boundary fits and always crosses it.
        const v = driver.vmmAlloc(2 * maxSize, { chunks: DEMO_CHUNKS });
        frees.push(() => driver.vmmFree(v.ptr));
        chunkSizes.set(v.ptr, v.chunkSize);
        return { base: v.ptr, view: (size) => ({ ptr: v.ptr + BigInt(straddle(v.chunkSize, size)), length: size }) };
      }
      case 'pool': {
        if (pool === undefined) {
          stream = driver.streamCreate();
          pool = driver.memPoolCreate();
        }
        const ptr = driver.memAllocFromPoolAsync(maxSize, pool, stream!);
        gpu.synchronize(stream!); // usable by other streams (and the peer) from here on
        frees.push(() => driver.memFreeAsync(ptr, stream!));
        return { base: ptr, view: (size) => ({ ptr, length: size }) };
      }
    }
  };

  return {
    option,
    alloc,
    describe(buf, maxSize) {
      if (buf === undefined || buf === EMPTY) return { kind: 'none' };
      const k = driver.memoryKind(buf.base);
      const out: MemoryDescription = { kind: k.kind };
      if (k.reason !== undefined) out.reason = k.reason;
      const chunkSize = chunkSizes.get(buf.base);
      if (chunkSize !== undefined) {
        const start = straddle(chunkSize, maxSize);
        out.chunkSize = chunkSize;
        out.chunksTouched = Math.floor((start + maxSize - 1) / chunkSize) - Math.floor(start / chunkSize) + 1;
      }
      return out;
    },
    freeAll() {
      for (const free of frees.splice(0)) free();
      if (pool !== undefined) {
        gpu.synchronize(stream!);
        driver.memPoolDestroy(pool);
        driver.streamDestroy(stream!);
        pool = undefined;
      }
    },
  };
}

/** Offset of a `size`-byte message centred on the first chunk boundary. */
function straddle(chunkSize: number, size: number): number {
  return chunkSize - Math.floor(size / 2);
}
