/**
 * Simulated device memory: every allocation is its own POSIX shm segment,
 * mapped here and placed at a simulated device address; IPC handles name the
 * segment, so another process (or another driver instance) can map the same
 * bytes.
 *
 * Lifetimes, as with the real driver:
 *  - memFree unmaps the owner's view and unlinks the segment; a process that
 *    opened it keeps its mapping until it closes it (POSIX keeps the pages);
 *    opening the handle after the free fails (the name is gone).
 *  - A new allocation always gets a new segment name and a new buffer id, so
 *    after free + realloc at the same address the handle bytes and the
 *    buffer id both change.
 *  - Opening a handle that is already open returns the same pointer; opens
 *    are counted and the last ipcCloseMemHandle unmaps.
 */
import { constants as bufferConstants } from 'node:buffer';
import type { DevicePtr, SharedSegment } from '../driver.js';
import type { NativeShm } from '../native-addon.js';
import { ADDRESS_BASE, AddressSpace, DEVICE_SPAN } from './address-space.js';
import { encodeHandle, segmentName, type SimHandle } from './ipc-handle.js';
import { cudaError } from './result-codes.js';
import { sharedSegment } from '../shared-segment.js';

/**
 * The largest allocation or range the simulator maps: each is one host
 * ArrayBuffer, and past the runtime's ArrayBuffer limit wrapping it aborted
 * the process (a 1 TiB sparse segment). Larger sizes are refused, typed,
 * before anything is made or mapped.
 */
export const SIM_MAX_MAPPING_BYTES = bufferConstants.MAX_LENGTH;

export interface Allocation {
  readonly ptr: DevicePtr;
  readonly size: number;
  /** Device ordinal as this process sees it. */
  readonly device: number;
  readonly bufferId: bigint;
  readonly segment: SharedSegment;
  /** True for a mapping opened from an IPC handle. */
  readonly opened: boolean;
  /** Own allocations: the IPC handle bytes. */
  readonly handle: Uint8Array | undefined;
  /** Opened mappings: how many opens are outstanding. */
  opens: number;
}

export interface MemoryOwner {
  shm: NativeShm;
  pid: number;
  /** Start time of the owning process (src/segment-owner.ts): part of every segment name. */
  start: number;
  /** Random tag of the driver instance (see ipc-handle.ts). */
  instance: number;
  /** Per ordinal: the device UUID and the bytes one may allocate. */
  devices: ReadonlyArray<{ uuid: string; totalMemory: number }>;
}

export class SimMemory {
  private readonly spaces: AddressSpace<Allocation>[];
  private readonly used: number[];
  /** Opened mappings by segment name. */
  private readonly opened = new Map<string, Allocation>();
  private counter = 0;

  constructor(private readonly owner: MemoryOwner) {
    this.spaces = owner.devices.map((_, i) => new AddressSpace<Allocation>(i));
    this.used = owner.devices.map(() => 0);
  }

  /** Bytes of own allocations (cuMemAlloc) not freed yet, all devices. */
  get allocatedBytes(): number {
    return this.used.reduce((a, b) => a + b, 0);
  }

  /** Distinct IPC mappings open now. */
  get openCount(): number {
    return this.opened.size;
  }

  /** A fresh number for segment names and buffer ids. */
  nextCounter(): number {
    this.counter = (this.counter + 1) >>> 0;
    return this.counter;
  }

  /** Unique across processes and driver instances: pid and instance tag in the high bits. */
  newBufferId(): bigint {
    const hi = (BigInt(this.owner.pid & 0xffff) << 48n) | (BigInt(this.owner.instance & 0xffff) << 32n);
    return hi | BigInt(this.nextCounter());
  }

  /** Creates a segment with a fresh name, retrying on the (unlikely) name collision. */
  createSegment(kind: SimHandle['kind'], bytes: number, call: string): { segment: SharedSegment; counter: number; nonce: number } {
    for (let attempt = 0; ; attempt++) {
      const counter = this.nextCounter();
      const nonce = randomU32();
      const name = segmentName({ kind, pid: this.owner.pid, start: this.owner.start, counter, nonce });
      try {
        return { segment: sharedSegment(name, this.owner.shm.shmCreate(name, bytes), (b) => this.owner.shm.shmClose(b)), counter, nonce };
      } catch (err) {
        const code = (err as { code?: string }).code;
        if (code === 'EEXIST' && attempt < 8) continue;
        throw cudaError(call, 'CUDA_ERROR_OUT_OF_MEMORY', `shared memory for the simulated device is exhausted: ${(err as Error).message}`);
      }
    }
  }

  alloc(device: number, size: number): Allocation {
    const dev = this.owner.devices[device]!;
    if (!(size <= SIM_MAX_MAPPING_BYTES)) {
      throw cudaError(
        'cuMemAlloc',
        'CUDA_ERROR_OUT_OF_MEMORY',
        `${size} bytes: the simulated driver maps at most ${SIM_MAX_MAPPING_BYTES} bytes as one allocation (one host ArrayBuffer); use less, or the native driver`,
      );
    }
    if (this.used[device]! + size > dev.totalMemory) {
      throw cudaError(
        'cuMemAlloc',
        'CUDA_ERROR_OUT_OF_MEMORY',
        `${size} bytes requested, ${dev.totalMemory - this.used[device]!} free on simulated device ${device}`,
      );
    }
    const { segment, counter, nonce } = this.createSegment('memory', size, 'cuMemAlloc');
    const bufferId = this.newBufferId();
    const handle = encodeHandle({
      kind: 'memory',
      size,
      bufferId,
      pid: this.owner.pid,
      start: this.owner.start,
      counter,
      nonce,
      instance: this.owner.instance,
      uuid: dev.uuid,
    });
    const placeholder = {} as Allocation;
    const range = this.spaces[device]!.reserve(size, placeholder);
    if (!range) {
      this.unlinkAndClose(segment);
      throw cudaError('cuMemAlloc', 'CUDA_ERROR_OUT_OF_MEMORY', 'simulated address space exhausted');
    }
    const a: Allocation = { ptr: range.base, size, device, bufferId, segment, opened: false, handle, opens: 0 };
    range.value = a;
    this.used[device]! += size;
    return a;
  }

  /** Frees an own allocation given its base pointer. */
  free(ptr: DevicePtr): void {
    const a = this.find(ptr);
    if (!a || a.opened || a.ptr !== ptr) {
      throw cudaError('cuMemFree', 'CUDA_ERROR_INVALID_VALUE', `${hex(ptr)} is not the base of a live allocation of this process (double free?)`);
    }
    this.spaces[a.device]!.release(a.ptr);
    this.used[a.device]! -= a.size;
    this.unlinkAndClose(a.segment);
  }

  /** The allocation or opened mapping holding `ptr`. */
  find(ptr: DevicePtr): Allocation | undefined {
    if (ptr < ADDRESS_BASE) return undefined;
    const device = Number((ptr - ADDRESS_BASE) / DEVICE_SPAN);
    return this.spaces[device]?.find(ptr)?.value;
  }

  /** The bytes [ptr, ptr+bytes) as a view, or CUDA_ERROR_INVALID_VALUE from `call`. */
  view(call: string, ptr: DevicePtr, bytes: number): { alloc: Allocation; bytes: Uint8Array } {
    const a = this.find(ptr);
    if (!a) throw cudaError(call, 'CUDA_ERROR_INVALID_VALUE', `${hex(ptr)} is not in any allocation or IPC mapping of this process`);
    const offset = Number(ptr - a.ptr);
    if (offset + bytes > a.size) {
      throw cudaError(call, 'CUDA_ERROR_INVALID_VALUE', `${bytes} bytes at offset ${offset} overrun the ${a.size}-byte allocation at ${hex(a.ptr)}`);
    }
    return { alloc: a, bytes: a.segment.bytes.subarray(offset, offset + bytes) };
  }

  /** The mapping already open for this handle, with one more open counted. */
  reopen(h: SimHandle): Allocation | undefined {
    const a = this.opened.get(segmentName(h));
    if (a) a.opens++;
    return a;
  }

  /** Maps another owner's allocation at a fresh address in `device`'s space (the opener's current device). */
  open(h: SimHandle, device: number): Allocation {
    const name = segmentName(h);
    if (!(h.size <= SIM_MAX_MAPPING_BYTES)) {
      throw cudaError(
        'cuIpcOpenMemHandle',
        'CUDA_ERROR_INVALID_VALUE',
        `the handle claims ${h.size} bytes; the simulated driver maps at most ${SIM_MAX_MAPPING_BYTES} as one allocation: refused, not mapped`,
      );
    }
    let buffer: ArrayBuffer;
    try {
      buffer = this.owner.shm.shmOpen(name, h.size); // a segment of another size is refused before it is mapped
    } catch (err) {
      if ((err as { code?: unknown }).code === 'ESIZE')
        throw cudaError('cuIpcOpenMemHandle', 'CUDA_ERROR_INVALID_VALUE', `segment ${name} is not the ${h.size} bytes the handle says: refused, not mapped`);
      throw cudaError(
        'cuIpcOpenMemHandle',
        'CUDA_ERROR_INVALID_VALUE',
        `the allocation behind this handle is gone (freed, or its process exited): ${(err as Error).message}`,
      );
    }
    const segment = sharedSegment(name, buffer, (b) => this.owner.shm.shmClose(b));
    if (buffer.byteLength !== h.size) {
      segment.close();
      throw cudaError('cuIpcOpenMemHandle', 'CUDA_ERROR_INVALID_VALUE', `segment ${name} has ${buffer.byteLength} bytes, the handle says ${h.size}`);
    }
    const placeholder = {} as Allocation;
    const range = this.spaces[device]!.reserve(h.size, placeholder);
    if (!range) {
      segment.close();
      throw cudaError('cuIpcOpenMemHandle', 'CUDA_ERROR_OUT_OF_MEMORY', 'simulated address space exhausted');
    }
    const a: Allocation = { ptr: range.base, size: h.size, device, bufferId: this.newBufferId(), segment, opened: true, handle: undefined, opens: 1 };
    range.value = a;
    this.opened.set(name, a);
    return a;
  }

  /** One ipcCloseMemHandle; returns the mapping when this was the last open (now unmapped). */
  close(ptr: DevicePtr): Allocation | undefined {
    const a = this.find(ptr);
    if (!a?.opened || a.ptr !== ptr) {
      throw cudaError('cuIpcCloseMemHandle', 'CUDA_ERROR_INVALID_VALUE', `${hex(ptr)} is not a pointer returned by ipcOpenMemHandle that is still open`);
    }
    if (--a.opens > 0) return undefined;
    this.spaces[a.device]!.release(a.ptr);
    this.opened.delete(a.segment.name);
    a.segment.close();
    return a;
  }

  /** Names of the segments this process owns (to unlink at exit). */
  ownedSegmentNames(): string[] {
    return this.spaces.flatMap((s) =>
      s
        .values()
        .filter((a) => !a.opened)
        .map((a) => a.segment.name),
    );
  }

  /** Frees and unmaps everything. */
  closeAll(): void {
    for (const space of this.spaces) {
      for (const a of space.values()) {
        space.release(a.ptr);
        if (a.opened) a.segment.close();
        else this.unlinkAndClose(a.segment);
      }
    }
    this.opened.clear();
    this.used.fill(0);
  }

  private unlinkAndClose(segment: SharedSegment): void {
    try {
      this.owner.shm.shmUnlink(segment.name);
    } catch {
      // Already gone (e.g. removed by hand): nothing left to release.
    }
    segment.close();
  }
}

function randomU32(): number {
  return (Math.random() * 0x1_0000_0000) >>> 0;
}

export function hex(ptr: bigint): string {
  return `0x${ptr.toString(16)}`;
}
