/**
 * Simulated pinned host memory (cuMemHostAlloc) at an address the device
 * calls take (cuMemHostGetDevicePointer): copies, memsets, stream memory
 * operations and kernels given an address inside a live buffer work on the
 * buffer's own bytes, so what they write shows in `bytes`.
 *
 * The addresses are one span of its own, 0x7e00_0000_0000 up to
 * 0x7f00_0000_0000: just below device 0's space (ADDRESS_BASE; devices and
 * fd-shared memory only go up from there), so a pinned address is never a
 * device's, and SimMemory and SimFdMemory never see one. Buffers are 2 MiB
 * aligned as device allocations are; a freed buffer's range is released,
 * and a later access to it fails as one to an unknown device address does.
 */
import type { DevicePtr } from '../driver.js';
import { ADDRESS_BASE, AddressSpace, DEVICE_SPAN } from './address-space.js';
import { hex } from './memory.js';
import { cudaError } from './result-codes.js';

/** Start of the pinned host span: 0x7e00_0000_0000, one device span below device 0's. */
export const PINNED_HOST_BASE = ADDRESS_BASE - DEVICE_SPAN;

export interface PinnedHost {
  readonly ptr: DevicePtr;
  readonly bytes: Uint8Array;
}

export class SimPinnedHost {
  // AddressSpace(-1) starts at ADDRESS_BASE - DEVICE_SPAN: PINNED_HOST_BASE.
  private readonly space = new AddressSpace<PinnedHost>(-1);

  /** A new zeroed buffer at a fresh address, or CUDA_ERROR_OUT_OF_MEMORY when the span is full. */
  alloc(size: number): PinnedHost {
    const range = this.space.reserve(size, {} as PinnedHost);
    if (!range) throw cudaError('cuMemHostAlloc', 'CUDA_ERROR_OUT_OF_MEMORY', 'simulated pinned host address space exhausted');
    range.value = { ptr: range.base, bytes: new Uint8Array(size) };
    return range.value;
  }

  /** Releases the buffer at `ptr` (its base); its address then names nothing. */
  free(ptr: DevicePtr): void {
    this.space.release(ptr);
  }

  /** The live buffer holding `ptr`, or undefined. */
  find(ptr: DevicePtr): PinnedHost | undefined {
    return ptr >= this.space.start && ptr < this.space.end ? this.space.find(ptr)?.value : undefined;
  }

  /** The bytes [ptr, ptr+bytes) of the buffer holding `ptr`; past its end CUDA_ERROR_INVALID_VALUE, as SimMemory.view. */
  view(call: string, ptr: DevicePtr, bytes: number): { alloc: PinnedHost; bytes: Uint8Array } | undefined {
    const p = this.find(ptr);
    if (!p) return undefined;
    const offset = Number(ptr - p.ptr);
    if (offset + bytes > p.bytes.byteLength) {
      throw cudaError(
        call,
        'CUDA_ERROR_INVALID_VALUE',
        `${bytes} bytes at offset ${offset} overrun the ${p.bytes.byteLength}-byte pinned host buffer at ${hex(p.ptr)}`,
      );
    }
    return { alloc: p, bytes: p.bytes.subarray(offset, offset + bytes) };
  }
}
