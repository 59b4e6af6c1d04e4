/**
 * The native floor: the same RGET ping-pong as the latency suite, run by the
 * addon (native/floor.cc) with no JavaScript in the loop, so each latency
 * figure can be shown as a multiple of what the hardware, the driver and two
 * processes spinning on shared host flags give in this very run.
 *
 * One worker side of it. Rank 0 creates the flag segment; each rank
 * allocates a buffer and exports it (`prepare`); each opens the peer's
 * buffer and both run the loop at once (`run`); `finish` undoes it all.
 *
 * On the simulated driver there is no device: the "copy" is a host memcpy
 * between two areas of the flag segment, so the floor is two processes
 * handing control back and forth through shared flags, plus a memcpy.
 */
import { loadAddon } from '../cuda/addon.js';
import type { CudaDriver, SharedSegment } from '../cuda/driver.js';
import type { Repeat } from './protocol.js';
import { ArgumentRangeError } from '../errors.js';

/** Two flags of 64 bytes each (one cache line per writer), as floor.cc lays them out. */
export const FLOOR_HEADER_BYTES = 128;

/** Bytes of the flag segment for a floor of `size` bytes; `device`: whether copies are device copies. */
export function floorSegmentBytes(size: number, device: boolean): number {
  return FLOOR_HEADER_BYTES + (device ? 0 : 2 * size);
}

export interface FloorPrepared {
  /** This rank's buffer as an IPC handle (absent without a device). */
  handle?: Uint8Array;
}

export interface FloorRun {
  segment: string;
  size: number;
  /** The peer's buffer, opened here (absent without a device). */
  peerHandle?: Uint8Array;
  timeoutMs: number;
}

export class FloorSide {
  private segment: SharedSegment | undefined;
  private local: bigint | undefined;
  private peer: bigint | undefined;

  constructor(
    private readonly driver: CudaDriver,
    private readonly rank: 0 | 1,
    private readonly device: number,
  ) {}

  private get onDevice(): boolean {
    return this.driver.kind !== 'sim';
  }

  prepare(segment: string, size: number): FloorPrepared {
    if (this.segment || this.local !== undefined) throw new Error('a native floor is prepared already: finish it first');
    if (!Number.isSafeInteger(size) || size <= 0) throw new ArgumentRangeError(`floor size must be a positive integer, got ${size}`);
    if (this.rank === 0) this.segment = this.driver.shmCreate(segment, floorSegmentBytes(size, this.onDevice));
    if (!this.onDevice) return {};
    this.local = this.driver.memAlloc(size);
    return { handle: this.driver.ipcGetMemHandle(this.local) };
  }

  async run(o: FloorRun, repeat: Repeat): Promise<number[]> {
    if (this.rank === 1) this.segment ??= this.driver.shmOpen(o.segment);
    const seg = this.segment;
    if (!seg) throw new Error('the native floor was not prepared on rank 0');
    if (this.onDevice) {
      if (!o.peerHandle || this.local === undefined) throw new Error('the native floor needs both ranks prepared with a device buffer');
      this.peer ??= this.driver.ipcOpenMemHandle(o.peerHandle);
    }
    const samples = await loadAddon().floorPingPong(seg.bytes.buffer as ArrayBuffer, seg.bytes.byteOffset, {
      role: this.rank,
      device: this.onDevice ? this.device : -1,
      ...(this.onDevice ? { local: this.local!, peer: this.peer! } : {}),
      size: o.size,
      iters: repeat.iters,
      warmup: repeat.warmup,
      timeoutMs: o.timeoutMs,
    });
    return Array.from(samples);
  }

  finish(): void {
    if (this.peer !== undefined) this.driver.ipcCloseMemHandle(this.peer);
    if (this.local !== undefined) this.driver.memFree(this.local);
    this.peer = this.local = undefined;
    const seg = this.segment;
    this.segment = undefined;
    if (seg) {
      seg.close();
      if (this.rank === 0) this.driver.shmUnlink(seg.name);
    }
  }
}
