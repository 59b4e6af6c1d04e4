/**
 * Staging: device data through a pinned shared host ring (staging-ring.ts),
 * for endpoints not (yet, or ever) using CUDA IPC. Both sides of the
 * protocol (docs/protocol.md, "Staging"):
 *
 *   sender                                   receiver
 *   SEGMENT{STAGING_RING} ═══════════════▶  (once per endpoint and direction,
 *                                            on the descriptor channel)
 *   STAGE_BEGIN(seq, len, shape) ─────────▶  waits for a matching recv and the ring
 *                                  ◀───────  STAGE_ACK(seq, slot) × slots   (grant)
 *   D→H chunk into slot; STAGE_CHUNK ──────▶ H→D from slot; STAGE_ACK again if more
 *   ...                                      ...
 *                                  ◀───────  FIN(seq) after the last byte
 *
 * Only one staged message per direction uses the ring at a time, chosen by
 * the receiver among the messages it has matched (a queue of jobs), so an
 * unmatched message never holds the ring and no receive order can deadlock.
 * A failure fails that one message on both sides and the endpoint stays
 * open: a bad source fails send() before anything is announced; a receiver
 * that cannot take it answers FIN FAILED; a sender that cannot supply a chunk
 * answers FIN SENDER_FAILED once none of its copies is in flight.
 */
import { type DeviceBuffer, isDeviceBuffer, type MessageBuffer } from '../buffers.js';
import type { StreamHandle } from '../cuda/driver.js';
import type { GpuHold } from '../gpu/gpu-hold.js';
import { count } from '../endpoint-stats.js';
import { type MappedSegment, mapPeerSegment } from '../channel/sealed-segment.js';
import { DescriptorError, ProtocolError } from '../errors.js';
import type { StagingOptions } from '../options.js';
import type { PeerSegment, SegmentExchange } from '../segment-exchange.js';
import { FinStatus, type Frame, FrameType, SegmentKind, type StageBeginFrame } from '../wire/frames.js';
import type { Arrival, DataPath, PathContext, PendingRecv, Received, SendOptions } from './data-path.js';
import { receiveTarget, refuseTooSmall, releaseTarget } from './receive-target.js';
import type { Resender } from './rget.js';
import { debug } from '../debug.js';
import { checkStagedSource, chunkCount, PeerRing, type StagedRecv, type StagedSend, StagingRing } from './staging-ring.js';
import { closeFdQuietly } from '../cuda/close-fd.js';

/** A staged receive waiting for, or using, this direction's ring. */
interface StagedRecvJob extends StagedRecv {
  recv: PendingRecv;
  /** Where the bytes go: a device pointer or host bytes. */
  dst: bigint | Uint8Array;
  result: Received;
  /**
   * What the receive holds while chunks are copied into it (the endpoint's
   * GPU work's): a device buffer allocated for it, freed unless the receive
   * resolved with it. Each chunk's copy uses it (and the peer's ring); its
   * uses are the copies in flight. Taken when the receive starts.
   */
  target: GpuHold | undefined;
  /** Copies out of the peer's ring still in progress (its slots are not granted again before they complete). */
  inFlight: number;
  failed: boolean;
}

/** What staging alone uses, handed to its constructor (createPaths). */
export interface StagingParts {
  /** The sealed ring segments exchanged with the peer (the rings travel there). */
  readonly segments: SegmentExchange;
  /** options.staging: this side's ring, and the largest ring of the peer's it maps. */
  readonly options: StagingOptions;
  /** A peer that breaks the rules outside a frame handler (a bad ring segment): the endpoint fails with `err`. */
  failEndpoint(err: Error): void;
}

export class StagingPath implements DataPath, Resender {
  readonly kind = 'staging';
  readonly arrivals = [FrameType.STAGE_BEGIN] as const;
  readonly controls = [FrameType.STAGE_ACK, FrameType.STAGE_CHUNK] as const;
  // sender side
  private ring: StagingRing | undefined;
  /** The endpoint's GPU work holds each ring while copies use it (GpuHold): released after the last one. */
  private ringHold: GpuHold | undefined;
  private readonly staged = new Map<number, StagedSend>();
  // receiver side
  private peerRing: PeerRing | undefined;
  /** The peer's ring descriptor, held until the first STAGE_BEGIN gives its shape (ours to close). */
  private peerSegment: PeerSegment | undefined;
  /** Why the peer's ring could not be mapped (then no staged message of the peer can be received). */
  private ringLost: Error | undefined;
  /** The peer's ring, mapped (PeerRing pins it). */
  private peerMapped: MappedSegment | undefined;
  /**
   * The endpoint's GPU work holds the peer's mapping (and its PeerRing, once
   * pinned) while copies read it: unregistered, then unmapped, after the last one.
   */
  private peerRingHold: GpuHold | undefined;
  /** The PeerRing that hold releases (set once pinned). */
  private peerPinned: { ring?: PeerRing } | undefined;
  /** The active job waits for the peer's ring descriptor. */
  private waitingRing = false;
  private readonly queue: StagedRecvJob[] = [];
  private active: StagedRecvJob | undefined;
  /** Staged receives that failed: chunks still in flight for them are dropped. */
  private readonly failedSeqs = new Set<number>();

  /** Where there is no descriptor channel (no ring can reach the peer): the message goes inline instead (set by createPaths: EAGER). */
  inline: ((buf: MessageBuffer, tag: number, options: SendOptions) => Promise<void>) | undefined;

  /** Why a device message comes to staging (set by createPaths: the descriptor path knows); counted in stats().stagingReasons. */
  reasonOf: ((buf: DeviceBuffer) => string) | undefined;

  /** Staged device messages by reason (stats().stagingReasons). */
  readonly reasons: Record<string, number> = {};

  private readonly segments: SegmentExchange;
  private readonly options: StagingOptions;
  private readonly failEndpoint: (err: Error) => void;

  constructor(
    private readonly ctx: PathContext,
    own: StagingParts,
  ) {
    this.segments = own.segments;
    this.options = own.options;
    this.failEndpoint = own.failEndpoint;
    own.segments.take(SegmentKind.STAGING_RING, (seg) => {
      if (this.peerSegment !== undefined || this.peerMapped !== undefined || ctx.closed) return closeFdQuietly(ctx.driver, seg.fd);
      this.peerSegment = seg;
      if (this.waitingRing && this.active) this.start(this.active);
    });
    own.segments.onDown((err) => {
      // No ring can come any more: the staged receive waiting for one fails (and the next, in turn).
      if (this.waitingRing && this.active) this.failRecv(this.active, err);
    });
  }

  countReason(why: string): void {
    this.reasons[why] = (this.reasons[why] ?? 0) + 1;
  }

  /** Any device message the paths before it did not take. */
  canSend(buf: MessageBuffer): boolean {
    return isDeviceBuffer(buf);
  }

  inlineBytes(buf: MessageBuffer): number {
    return this.segments.state === 'none' && this.inline !== undefined ? (buf as DeviceBuffer).length : 0;
  }

  // ------------------------------------------------------------------ sender

  send(buffer: MessageBuffer, tag: number, options: SendOptions): Promise<void> {
    const buf = buffer as DeviceBuffer;
    const ctx = this.ctx;
    if (this.segments.state === 'none' && this.inline !== undefined) return this.inline(buf, tag, options);
    checkStagedSource(ctx.driver, buf); // a bad source fails this send() alone, before anything is announced
    if (this.reasonOf !== undefined) {
      const why = this.reasonOf(buf);
      this.countReason(why);
      debug('endpoint %s: %d-byte device message by staging: %s', ctx.peerId, buf.length, why);
    }
    // The ring first: one that cannot be made (no memory, no descriptor channel) fails this send before it uses a seq.
    this.sendRing();
    const seq = ctx.nextSeq();
    const done = ctx.sends.pend(seq, tag, buf.length, 'staging', options.signal, () => this.staged.delete(seq));
    try {
      this.announce(buf, tag, seq, options.stream);
      ctx.flow.charge(0);
    } catch (err) {
      ctx.sends.fail(seq, err as Error);
    }
    return done;
  }

  /** An RGET the peer could not map, announced again by staging (Resender). */
  resend(seq: number, buf: DeviceBuffer, stream: StreamHandle | undefined): void {
    const p = this.ctx.sends.get(seq)!;
    checkStagedSource(this.ctx.driver, buf);
    const release = p.cleanup;
    p.cleanup = () => {
      release();
      this.staged.delete(seq);
    };
    this.announce(buf, p.tag, seq, stream);
  }

  private sendRing(): StagingRing {
    if (!this.ring) {
      const segments = this.segments;
      if (segments.state === 'none') throw segments.downError!;
      const ring = new StagingRing(this.ctx.driver, this.options);
      this.ring = ring;
      this.ringHold = this.ctx.gpu().hold(() => ring.close());
      // Passed once; the receiver grants nothing before it has it. A failure shows there (its exchange goes down: FIN FAILED).
      segments
        .send(SegmentKind.STAGING_RING, ring.segment)
        .catch((err: Error) => debug('endpoint %s: staging ring not passed: %s', this.ctx.peerId, err.message));
    }
    return this.ring;
  }

  /** STAGE_BEGIN for message `seq`; its chunks follow the receiver's grants. */
  private announce(buf: DeviceBuffer, tag: number, seq: number, stream: StreamHandle | undefined): void {
    const ring = this.sendRing();
    this.staged.set(seq, { seq, src: buf.ptr, length: buf.length, next: 0, stream: stream ?? this.ctx.gpu().stream, inFlight: 0 });
    this.ctx.sendFrame({
      type: FrameType.STAGE_BEGIN,
      tag,
      seq,
      length: buf.length,
      chunkSize: ring.options.chunkSize,
      slots: ring.options.slots,
    });
  }

  onFrame(frame: Frame): void {
    if (frame.type === FrameType.STAGE_ACK) return this.onGrant(frame.seq, frame.slot);
    if (frame.type === FrameType.STAGE_CHUNK) return this.onChunk(frame.seq, frame.slot, frame.offset, frame.length);
  }

  /** Sender: the receiver granted `slot` to message `seq`: fill it with the next chunk. */
  private onGrant(seq: number, slot: number): void {
    const ctx = this.ctx;
    const staged = this.staged.get(seq);
    const ring = this.ring;
    if (!staged || !ring) {
      if (ctx.sends.has(seq)) throw new ProtocolError(`STAGE_ACK for message ${seq}, which is not staged`);
      return; // the send was cancelled or failed meanwhile
    }
    if (slot >= ring.options.slots) throw new ProtocolError(`STAGE_ACK grants slot ${slot} of a ${ring.options.slots}-slot ring`);
    if (staged.failed || staged.next >= staged.length) return;
    const offset = staged.next;
    const length = Math.min(ring.options.chunkSize, staged.length - offset);
    staged.next += length;
    try {
      // Fails for a source freed meanwhile or a bogus stream: this send alone fails.
      ctx.driver.memcpyDtoHAsync(ring.slot(slot, length), staged.src + BigInt(offset), staged.stream);
    } catch (err) {
      return this.abortSend(staged, err as Error);
    }
    staged.inFlight++;
    // Infinity: an event of its own, as for any large copy (a chunk's grant must not wait for later copies).
    // The ring's pages are the copy's destination until it completes (a use of its hold).
    ctx.gpu().whenDone(
      staged.stream,
      Infinity,
      (err) => {
        staged.inFlight--;
        if (err) return this.abortSend(staged, err);
        if (staged.failed) return this.abortSend(staged, staged.failed);
        if (ctx.closed || !this.staged.has(seq)) return;
        try {
          ctx.sendFrame({ type: FrameType.STAGE_CHUNK, seq, slot, offset, length });
        } catch (e) {
          ctx.sends.fail(seq, e as Error); // the channel failed: the endpoint is closing
        }
      },
      this.ringHold,
    );
  }

  /**
   * Sender: staged message `seq` cannot be supplied. Once none of its copies
   * is in flight, the send rejects and the receiver is told (FIN
   * SENDER_FAILED), so that its receive fails too; the endpoint stays open.
   */
  private abortSend(staged: StagedSend, err: Error): void {
    staged.failed ??= err;
    if (staged.inFlight !== 0 || !this.ctx.sends.has(staged.seq)) return;
    this.ctx.sends.fail(staged.seq, staged.failed);
    try {
      this.ctx.sendFin(staged.seq, FinStatus.SENDER_FAILED, staged.failed.message);
    } catch {
      // the channel failed: the endpoint closes and the receiver learns it that way
    }
  }

  onFin(): boolean {
    return false;
  }

  // ---------------------------------------------------------------- receiver

  /** A staged message matched a receive; it waits for the ring. */
  receive(recv: PendingRecv, arrival: Arrival): void {
    const frame = arrival as StageBeginFrame;
    const n = frame.length;
    if (refuseTooSmall(this.ctx, recv, frame)) return;
    const data = receiveTarget(this.ctx.driver, recv.into, n, this.ctx.driver.isReady());
    const job: StagedRecvJob = {
      seq: frame.seq,
      length: n,
      granted: 0,
      received: 0,
      chunkSize: frame.chunkSize,
      slots: frame.slots,
      recv,
      dst: isDeviceBuffer(data) ? data.ptr : data,
      result: { tag: frame.tag, length: n, path: 'staging', fromDevice: true, data },
      target: undefined,
      inFlight: 0,
      failed: false,
    };
    // Let go of when the receive settles: a new buffer is freed after the last copy into it, unless the receive resolved with it.
    job.target = this.ctx.gpu().hold(() => {
      if (job.failed) releaseTarget(this.ctx.driver, recv.into, data);
    });
    this.queue.push(job);
    if (!this.active) this.startNext();
  }

  private startNext(): void {
    if (this.ctx.closed) return;
    const job = this.queue.shift();
    this.active = job;
    this.waitingRing = false;
    if (job) this.start(job);
  }

  /** The active job gets the ring: every slot granted, once the peer's ring is mapped. */
  private start(job: StagedRecvJob): void {
    const ctx = this.ctx;
    this.waitingRing = false;
    try {
      if (!this.peerRing) {
        // The peer names the shape; this side bounds it before anything is mapped (staging.maxPeerBytes).
        const bytes = job.chunkSize * job.slots;
        const max = this.options.maxPeerBytes;
        if (bytes > max) {
          throw new ProtocolError(
            `STAGE_BEGIN ${job.seq} names a staging ring of ${job.slots} × ${job.chunkSize} = ${bytes} bytes, more than staging.maxPeerBytes (${max}); refused, not mapped`,
            'SMCUDA_BAD_SEGMENT',
          );
        }
        if (this.peerMapped === undefined) {
          const seg = this.peerSegment;
          if (seg === undefined) {
            if (this.ringLost !== undefined) throw this.ringLost;
            if (this.segments.state === 'none') {
              throw new DescriptorError(
                'SMCUDA_FD_CHANNEL',
                `staged message ${job.seq}: the peer's staging ring never came (${this.segments.downError?.message ?? 'no descriptor channel'})`,
              );
            }
            this.waitingRing = true; // granted when it comes
            return;
          }
          this.peerSegment = undefined;
          try {
            if (seg.bytes !== bytes) {
              closeFdQuietly(ctx.driver, seg.fd);
              throw new ProtocolError(
                `the peer's staging ring is ${seg.bytes} bytes, not the ${job.slots} × ${job.chunkSize} its STAGE_BEGIN says; refused, not mapped`,
                'SMCUDA_BAD_SEGMENT',
              );
            }
            const mapped = mapPeerSegment(seg.fd, seg.bytes, 'staging ring'); // checks seals and size; closes the descriptor
            this.peerMapped = mapped;
            const pinned = (this.peerPinned = {} as { ring?: PeerRing });
            // Unregistered (once pinned), then unmapped, after the last copy out of it.
            this.peerRingHold = ctx.gpu().hold(() => {
              try {
                pinned.ring?.close();
              } finally {
                mapped.close();
              }
            });
          } catch (err) {
            this.ringLost = err as Error; // its descriptor is gone: every later staged message fails the same way
            this.failRecv(job, err as Error);
            // A segment that is not what was announced (or not sealed): the peer is broken or hostile; this endpoint fails alone.
            if (err instanceof ProtocolError) this.failEndpoint(err);
            return;
          }
        } else if (this.peerMapped.bytes.byteLength !== bytes) {
          throw new ProtocolError(
            `STAGE_BEGIN ${job.seq} names a ${job.slots} × ${job.chunkSize} ring; the peer's ring is ${this.peerMapped.bytes.byteLength} bytes`,
          );
        }
        // Pinned here (a failure fails this message; the mapping stays for the next).
        this.peerRing = this.peerPinned!.ring = new PeerRing(ctx.driver, this.peerMapped, job.chunkSize, job.slots);
      } else if (this.peerRing.chunkSize !== job.chunkSize || this.peerRing.slots !== job.slots) {
        throw new ProtocolError(
          `STAGE_BEGIN ${job.seq} names a ${job.slots} × ${job.chunkSize} ring; the peer's ring is ${this.peerRing.slots} × ${this.peerRing.chunkSize}`,
        );
      }
      const grants = Math.min(job.slots, chunkCount(job.length, job.chunkSize));
      for (let slot = 0; slot < grants; slot++) this.grant(job, slot);
    } catch (err) {
      this.failRecv(job, err as Error);
    }
  }

  private grant(job: StagedRecvJob, slot: number): void {
    job.granted++;
    this.ctx.sendFrame({ type: FrameType.STAGE_ACK, seq: job.seq, slot });
  }

  /** Receiver: chunk `offset..offset+length` of the active staged message is in `slot`. */
  private onChunk(seq: number, slot: number, offset: number, length: number): void {
    const ctx = this.ctx;
    const job = this.active;
    const ring = this.peerRing;
    if (this.failedSeqs.has(seq)) return; // its FIN(FAILED) is on the way to the sender
    if (!job || job.seq !== seq || !ring) throw new ProtocolError(`STAGE_CHUNK for message ${seq}, which is not being received`);
    if (slot >= job.slots || length > job.chunkSize || offset + length > job.length) {
      throw new ProtocolError(`STAGE_CHUNK ${seq}: slot ${slot}, bytes ${offset}..${offset + length} outside the message or ring`);
    }
    if (job.failed) return;
    const src = ring.slot(slot, length);
    const finishChunk = () => {
      try {
        job.received += length;
        if (job.granted < chunkCount(job.length, job.chunkSize)) this.grant(job, slot);
        if (job.received === job.length) this.finishRecv(job);
      } catch (err) {
        this.failRecv(job, err as Error); // the channel failed: the endpoint is closing
      }
    };
    if (typeof job.dst === 'bigint') {
      const stream = job.recv.stream ?? ctx.gpu().stream;
      try {
        // Fails for a bad `into` (freed, too short for the driver): this receive alone fails.
        ctx.driver.memcpyHtoDAsync(job.dst + BigInt(offset), src, stream);
      } catch (err) {
        return this.failRecv(job, err as Error);
      }
      job.inFlight++;
      // Infinity: an event of its own, as for any large copy (a chunk's grant must not wait for later copies).
      // The copy uses the peer ring's pages (its source) and the target until it completes.
      ctx.gpu().whenDone(
        stream,
        Infinity,
        (err) => {
          job.inFlight--;
          if (err) return this.failRecv(job, err);
          if (job.failed) return this.nextAfterFailed(job);
          if (!ctx.closed) finishChunk();
        },
        [this.peerRingHold!, job.target!],
      );
    } else {
      job.dst.set(src, offset);
      finishChunk();
    }
  }

  private finishRecv(job: StagedRecvJob): void {
    count(this.ctx.received, 'staging', job.length);
    this.ctx.sendFin(job.seq, FinStatus.OK, '');
    job.target?.close(); // resolved with it: the caller's now
    job.recv.resolve(job.result);
    this.startNext();
  }

  /** `tell`: FIN the sender with the status (not when the sender is the one who failed it). */
  private failRecv(job: StagedRecvJob, err: Error, tell = true): void {
    if (job.failed) return this.nextAfterFailed(job);
    job.failed = true;
    this.failedSeqs.add(job.seq);
    job.target?.close(); // a new device buffer is freed once no copy into it is in flight
    try {
      if (tell) this.ctx.sendFin(job.seq, err instanceof ProtocolError ? FinStatus.REFUSED : FinStatus.FAILED, err.message);
    } catch {
      // closing
    }
    job.recv.reject(err);
    this.nextAfterFailed(job);
  }

  /**
   * The ring goes to the next staged receive once no copy out of it is in
   * flight for the failed one: a slot granted again must not still be read.
   */
  private nextAfterFailed(job: StagedRecvJob): void {
    if (this.active === job && job.inFlight === 0) this.startNext();
  }

  /** Receiver: the sender of message `seq` could not supply it (FIN SENDER_FAILED). */
  senderFailed(seq: number, err: Error): boolean {
    const job = this.active?.seq === seq ? this.active : this.queue.find((j) => j.seq === seq);
    if (!job) return false;
    const i = this.queue.indexOf(job);
    if (i >= 0) this.queue.splice(i, 1);
    this.failRecv(job, err, false);
    return true;
  }

  close(reason: Error): void {
    this.staged.clear();
    const jobs = [this.active, ...this.queue];
    this.active = undefined;
    this.queue.length = 0;
    for (const job of jobs) if (job) this.failRecv(job, reason);
    // Unregistered and unmapped once the GPU is done with them: the holds
    // release them at the last copy's completion (at once if none is in flight).
    this.ringHold?.close();
    this.peerRingHold?.close();
    this.ring = undefined;
    this.ringHold = undefined;
    this.peerRing = undefined;
    this.peerRingHold = undefined;
    this.peerMapped = undefined;
    this.peerPinned = undefined;
    if (this.peerSegment !== undefined) closeFdQuietly(this.ctx.driver, this.peerSegment.fd);
    this.peerSegment = undefined;
  }
}
