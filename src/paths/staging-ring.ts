/**
 * The staging ring: how device data crosses an endpoint that is not (yet,
 * or ever) using CUDA IPC. The protocol that drives it is staging.ts.
 *
 * Each direction of an endpoint has one ring: a sealed anonymous segment
 * (src/channel/sealed-segment.ts: no name in /dev/shm, cannot shrink or
 * grow) made by the sender, of `slots` slots of `chunkSize` bytes, passed to
 * the receiver on the descriptor channel and pinned on both sides
 * (cuMemHostRegister) so that both copies are real DMA. While the receiver
 * copies slot k host→device, the sender is already copying chunk k+1
 * device→host into another slot: the two sides overlap.
 */
import { createSealedSegment, type MappedSegment } from '../channel/sealed-segment.js';
import type { AddressRange, CudaDriver, DevicePtr, StreamHandle } from '../cuda/driver.js';
import type { StagingOptions } from '../options.js';
import { pastItsAllocation } from '../buffers.js';

/** The sender's side of one direction's ring. */
export class StagingRing {
  readonly segment: MappedSegment;
  private readonly unregister: () => void;

  constructor(
    driver: CudaDriver,
    readonly options: Pick<StagingOptions, 'chunkSize' | 'slots'>,
    create: (bytes: number) => MappedSegment = (bytes) => createSealedSegment(bytes, 'smcuda-stg'),
  ) {
    this.segment = create(options.chunkSize * options.slots);
    try {
      this.unregister = driver.hostRegister(this.segment.bytes);
    } catch (err) {
      this.segment.close();
      throw err;
    }
  }

  slot(index: number, length: number): Uint8Array {
    const start = index * this.options.chunkSize;
    return this.segment.bytes.subarray(start, start + length);
  }

  close(): void {
    this.unregister();
    this.segment.close();
  }
}

/** The receiver's view of the peer's ring: mapped from the descriptor it passed. */
export class PeerRing {
  private readonly unregister: () => void;

  constructor(
    driver: CudaDriver,
    readonly segment: MappedSegment,
    readonly chunkSize: number,
    readonly slots: number,
  ) {
    // A process without a CUDA context (host-only receiver) reads the ring as plain memory.
    this.unregister = driver.isReady() ? driver.hostRegister(segment.bytes) : () => {};
  }

  slot(index: number, length: number): Uint8Array {
    const start = index * this.chunkSize;
    return this.segment.bytes.subarray(start, start + length);
  }

  close(): void {
    this.unregister();
    this.segment.close();
  }
}

/** A staged send in progress on the sender. */
export interface StagedSend {
  seq: number;
  src: DevicePtr;
  length: number;
  /** Next byte to copy into a granted slot. */
  next: number;
  stream: StreamHandle;
  /** Device→host copies into the ring still running. */
  inFlight: number;
  /**
   * Why the send failed (a copy out of the source failed). It settles, and
   * its receiver is told (FIN SENDER_FAILED), once no copy of it is in
   * flight: the source is not the caller's again, and no slot the receiver
   * hands to the next message is still being written, before that.
   */
  failed?: Error;
}

/**
 * Throws unless `buf` lies inside live device memory: one allocation, or
 * contiguous mapped ranges (a VMM range of several cuMemCreate chunks, as
 * expandable segments make, where cuMemGetAddressRange answers one chunk's
 * range: walk range after range). Checked before a staged message is
 * announced — as RGET's export lookup does — so that a freed or invalid
 * source fails its send() at once and the peer never hears of it. Returns
 * the range of the mapping `buf` starts in (allocation-ranges.ts keeps it).
 */
export function checkStagedSource(driver: CudaDriver, buf: { ptr: DevicePtr; length: number }, name = 'buffer'): AddressRange {
  const first = driver.memGetAddressRange(buf.ptr);
  const want = buf.ptr + BigInt(buf.length);
  let end = first.base + BigInt(first.size);
  while (want > end) {
    let next: { base: DevicePtr; size: number } | undefined;
    try {
      next = driver.memGetAddressRange(end);
    } catch {
      next = undefined; // nothing mapped right after this range
    }
    if (next === undefined || next.base !== end || next.size <= 0) {
      throw pastItsAllocation(name, buf.length, buf.ptr - first.base, end - buf.ptr);
    }
    end += BigInt(next.size);
  }
  return first;
}

/** A staged receive in progress on the receiver. */
export interface StagedRecv {
  seq: number;
  length: number;
  /** Chunks granted so far (each grant is one chunk). */
  granted: number;
  /** Bytes copied out so far. */
  received: number;
  chunkSize: number;
  slots: number;
}

export function chunkCount(length: number, chunkSize: number): number {
  return Math.ceil(length / chunkSize);
}
