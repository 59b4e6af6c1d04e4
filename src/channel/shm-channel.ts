/**
 * ShmChannel: a ControlChannel that moves an endpoint's frames through
 * shared-memory rings (shm-ring.ts) once both sides agree, keeping the
 * channel underneath (a Unix socket, or a runtime's own) for wake-ups, for
 * frames too large for the ring, and to learn that the peer is gone.
 *
 * Why: a Unix-socket hop in Node costs more than an 8 B GPU copy
 * (docs/benchmarks.md, 'socket ping-pong'). A frame written to the peer's ring is seen by a spinning peer at
 * once (the transport's progress engine, src/progress/engine.ts), and a busy peer reads many frames per wake-up.
 *
 * Upgrade, each direction on its own (after HELLO, when both HELLOs carry
 * Feature.RING and Feature.DESCRIPTORS, once the descriptor channel is up):
 *   1. Each side creates a ring it will read, a sealed anonymous segment
 *      (sealed-segment.ts: no name, cannot shrink or grow), passes its
 *      descriptor on the descriptor channel (SEGMENT{CONTROL_RING}; the
 *      endpoint's segment exchange carries it) and sends RING_OFFER{capacity}
 *      on the channel.
 *   2. Once it has both the peer's offer and its descriptor (they travel on
 *      two sockets: either may come first), a side checks the capacity and
 *      the segment (seals, size) against its limits, maps the peer's ring and
 *      sends RING_SWITCH:
 *      its last frame written to the channel directly. Every later frame gets
 *      a sequence number (from 0) and goes into the ring, or — too large, or
 *      the ring full — onto the channel as SPILL{seq, frame}.
 *   3. The reader starts reading its ring only after RING_SWITCH, so frames
 *      sent before the switch are delivered first; after it, it delivers by
 *      sequence number, merging ring and SPILLs, so order is kept.
 *   A side that cannot create or map a segment simply stays on the channel.
 *
 * Wake-ups: the writer sends DOORBELL after a ring write unless the reader's
 * bell word says it is watching or a DOORBELL is already on its way (one per
 * wake-up, not one per frame). The reader clears the bell when a DOORBELL
 * arrives, or when it stops spinning, and then looks at its ring again.
 *
 * Close: frames already in the ring are delivered before 'close', so a
 * peer's last frames (its CLOSE) are not lost to the socket's end.
 */
import { EventEmitter } from 'node:events';
import { debug } from '../debug.js';
import { ClosedError, PeerLimitError, ProtocolError } from '../errors.js';
import { decodeFrame, decodeFrameType, encodeFrame, spillHead } from '../wire/codec.js';
import { FrameType } from '../wire/frames.js';
import type { ControlChannel, ControlChannelEvents } from './channel.js';
import { sendFrameParts } from './bytes.js';
import { RingReader, RingWriter, ringSegmentBytes } from './shm-ring.js';
import type { ProgressEngine, ProgressSource } from '../progress/engine.js';
import { createSealedSegment, type MappedSegment, mapPeerSegment, type SegmentNative } from './sealed-segment.js';

/** How ring segments travel between the two sides (the endpoint's segment exchange, on its descriptor channel). */
export interface RingSegmentPort {
  /** Passes our ring's descriptor; resolves once the kernel has it, rejects where there is no descriptor channel. */
  send(segment: MappedSegment): Promise<void>;
  /** Hands the peer's ring descriptor (ours to close) and announced size to `taker` when it comes. */
  take(taker: (segment: { fd: number; bytes: number }) => void): void;
  /** Closes a descriptor of the peer's we do not map. */
  closeFd(fd: number): void;
}

export interface ShmChannelOptions {
  /** The addon's sealed-segment calls (default: the addon). */
  native?: SegmentNative;
  /** The transport's progress engine: it polls our ring while frames flow. */
  progress: ProgressEngine;
  /** Data bytes of the ring this side reads. Default 256 KiB. */
  capacity?: number;
  /** Frames up to this size go through the ring. Default 16 KiB. */
  maxRingFrame?: number;
  /** The largest ring (data bytes) a peer may offer; a larger offer fails the channel before anything is mapped. Default 16 MiB. */
  maxPeerCapacity?: number;
}

export const DEFAULT_RING_CAPACITY = 256 << 10;
export const DEFAULT_MAX_RING_FRAME = 16 << 10;
/** 16 MiB: 64 times the default ring; a peer offering more is broken or hostile. */
export const DEFAULT_MAX_PEER_RING_CAPACITY = 16 << 20;

const DOORBELL = encodeFrame({ type: FrameType.DOORBELL });
const RING_SWITCH = encodeFrame({ type: FrameType.RING_SWITCH });
const U32_HALF = 0x8000_0000;
const EMPTY = new Uint8Array(0);
/** The smallest ring entry: 8 bytes of entry header and a 4-byte frame header, padded to 8 (shm-ring.ts). */
const MIN_RING_ENTRY = 16;

export class ShmChannel extends EventEmitter<ControlChannelEvents> implements ControlChannel, ProgressSource {
  readonly label: string;
  hotUntil = 0;
  kicked = false;
  /** The progress engine polls our ring (watch(true)): the peer need not ring. */
  private watching = false;
  private readonly base: ControlChannel;
  private readonly opts: Required<Omit<ShmChannelOptions, 'native' | 'progress'>> & ShmChannelOptions;
  private port: RingSegmentPort | undefined;
  // inbound: our ring
  private inSegment: MappedSegment | undefined;
  private reader: RingReader | undefined;
  private peerSwitched = false;
  private expected = 0;
  private readonly spills: { seq: number; frame: Uint8Array }[] = [];
  /** Bytes of `spills`, and the endpoint's budget they count against (limitBuffered). */
  private spilledBytes = 0;
  private room: (() => number) | undefined;
  // outbound: the peer's ring, once both its offer and its descriptor are here
  private offeredCapacity: number | undefined;
  private peerFd: { fd: number; bytes: number } | undefined;
  private outSegment: MappedSegment | undefined;
  private writer: RingWriter | undefined;
  private outSeq = 0;
  private readonly onePart: Uint8Array[] = [EMPTY];
  private closed_ = false;
  private closeEmitted = false;

  constructor(base: ControlChannel, opts: ShmChannelOptions) {
    super();
    this.base = base;
    this.label = `${base.label}+ring`;
    this.opts = { capacity: DEFAULT_RING_CAPACITY, maxRingFrame: DEFAULT_MAX_RING_FRAME, maxPeerCapacity: DEFAULT_MAX_PEER_RING_CAPACITY, ...opts };
    base.on('frame', this.onBaseFrame);
    base.on('drain', this.onBaseDrain);
    base.on('close', this.onBaseClose);
  }

  /**
   * How ring segments travel (the endpoint's descriptor channel): from now
   * on this side offers its ring and takes the peer's. Without it the
   * channel never upgrades: every frame stays on the channel underneath.
   */
  useSegments(port: RingSegmentPort): void {
    if (this.port !== undefined || this.closed_) return;
    this.port = port;
    port.take((seg) => this.onPeerSegment(seg));
    this.offer();
  }

  get closed(): boolean {
    return this.closed_;
  }

  /** Out-of-order SPILLs count against the endpoint's budget, and the base channel refuses what would not fit. */
  limitBuffered(room: () => number): void {
    this.room = () => room() - this.spilledBytes;
    this.base.limitBuffered?.(this.room);
  }

  /** Whether frames to the peer go through its ring (for stats and tests). */
  get ringOut(): boolean {
    return this.writer !== undefined;
  }

  /** Whether the peer's frames come through our ring. */
  get ringIn(): boolean {
    return this.peerSwitched;
  }

  send(frame: Uint8Array): boolean {
    if (this.closed_) throw new ClosedError(`${this.label}: send after close; the channel is closed, open a new endpoint`);
    this.opts.progress.kick(this);
    const w = this.writer;
    if (!w) return this.base.send(frame);
    const length = frame.byteLength;
    const seq = this.outSeq;
    const one = this.onePart;
    one[0] = frame; // the ring writer takes parts; one array for every send, none allocated per frame
    const written = length <= w.maxFrame && w.tryWrite(seq, one, length);
    one[0] = EMPTY;
    if (written) {
      this.outSeq = (seq + 1) >>> 0;
      if (w.needsDoorbell()) this.base.send(DOORBELL);
      return true;
    }
    // The sequence number is taken only once the SPILL is accepted: a frame
    // the channel refuses (above its maxFrameBytes, checked before anything
    // is written) then fails alone, instead of leaving the peer waiting
    // forever for a number that never comes, behind which every later frame
    // would queue. Through the channel, not copied into a SPILL frame first
    // (bytes.ts: sendFrameParts).
    const ok = sendFrameParts(this.base, [spillHead(seq, length), frame]);
    this.outSeq = (seq + 1) >>> 0;
    return ok;
  }

  ref(): void {
    this.base.ref?.();
  }

  unref(): void {
    this.base.unref?.();
  }

  close(): void {
    if (this.closed_) return;
    this.stop();
    this.base.close();
    process.nextTick(() => this.emitClose(undefined));
  }

  // ------------------------------------------------------------ ProgressSource

  poll(): boolean {
    if (!this.peerSwitched || this.closed_ || !this.reader!.ready) return false;
    return this.safePump();
  }

  watch(on: boolean): void {
    this.watching = on;
    if (!this.reader || this.closed_) return;
    this.reader.setBell(on ? 1 : 0);
    if (!on) this.safePump();
  }

  /** pump() from the progress engine: a corrupt ring fails this channel, never the process. */
  private safePump(): boolean {
    try {
      return this.pump();
    } catch (err) {
      this.fail(err instanceof Error ? err : new ProtocolError(String(err)));
      return false;
    }
  }

  // ------------------------------------------------------------ internals

  private offer(): void {
    const port = this.port!;
    let seg: MappedSegment;
    try {
      seg = createSealedSegment(ringSegmentBytes(this.opts.capacity), 'smcuda-ctl', this.opts.native);
      this.inSegment = seg;
      this.reader = new RingReader(seg.bytes, this.opts.capacity);
    } catch (err) {
      debug('channel %s: no control ring of our own (%s); the peer writes to the channel', this.label, (err as Error).message);
      this.release();
      return;
    }
    // The descriptor first, then the offer (the peer copes with either order: two sockets).
    port.send(seg).then(
      () => {
        if (this.closed_ || this.inSegment !== seg) return;
        try {
          this.base.send(encodeFrame({ type: FrameType.RING_OFFER, capacity: this.opts.capacity }));
        } catch (err) {
          debug('channel %s: RING_OFFER not sent (%s)', this.label, (err as Error).message);
        }
      },
      (err: Error) => {
        debug('channel %s: our ring could not be passed (%s); the peer writes to the channel', this.label, err.message);
        if (!this.closed_ && !this.peerSwitched && this.inSegment === seg) {
          this.reader = undefined;
          this.inSegment = undefined;
          seg.close();
        }
      },
    );
  }

  private readonly onBaseFrame = (bytes: Uint8Array): void => {
    if (this.closed_) return;
    try {
      const type = decodeFrameType(bytes);
      switch (type) {
        case FrameType.RING_OFFER:
          return this.onOffer(bytes);
        case FrameType.RING_SWITCH:
          if (!this.reader) throw new ProtocolError(`${this.label}: RING_SWITCH, but this side offered no ring`);
          if (this.peerSwitched) throw new ProtocolError(`${this.label}: a second RING_SWITCH`);
          decodeFrame(bytes);
          this.peerSwitched = true;
          this.opts.progress.kick(this);
          this.pump();
          return;
        case FrameType.DOORBELL:
          if (!this.peerSwitched) throw new ProtocolError(`${this.label}: DOORBELL before RING_SWITCH`);
          // The bell's claim is over. Back to "watching" while the engine
          // polls us: clearing it then made the peer ring again after its
          // next write, a socket write and read for nothing.
          this.reader!.setBell(this.watching ? 1 : 0);
          this.pump();
          return;
        case FrameType.SPILL: {
          if (!this.peerSwitched) throw new ProtocolError(`${this.label}: SPILL before RING_SWITCH`);
          const f = decodeFrame(bytes);
          if (f.type !== FrameType.SPILL) return;
          this.checkSpill(f.seq);
          this.spills.push({ seq: f.seq, frame: f.frame });
          this.spilledBytes += f.frame.byteLength;
          // A base channel without limitBuffered checked nothing before buffering: check what we hold now.
          if (this.room !== undefined && this.room() < 0) {
            throw new PeerLimitError(
              'SMCUDA_PEER_BUFFER_LIMIT',
              `${this.label}: the peer's out-of-order SPILLs hold ${this.spilledBytes} bytes, past maxBufferedBytes`,
            );
          }
          this.pump();
          return;
        }
        default:
          if (this.peerSwitched) throw new ProtocolError(`${this.label}: a ${FrameType[type]} frame written to the channel after RING_SWITCH`);
          this.opts.progress.kick(this);
          this.emit('frame', bytes);
      }
    } catch (err) {
      this.fail(err instanceof Error ? err : new ProtocolError(String(err)));
    }
  };

  private onOffer(bytes: Uint8Array): void {
    const f = decodeFrame(bytes);
    if (f.type !== FrameType.RING_OFFER) return;
    if (this.offeredCapacity !== undefined) throw new ProtocolError(`${this.label}: a second RING_OFFER`);
    if (this.port === undefined) throw new ProtocolError(`${this.label}: RING_OFFER, but there is no descriptor channel for its segment`, 'SMCUDA_BAD_SEGMENT');
    // Checked before anything is mapped: a peer names the size, this side bounds it.
    const c = f.capacity;
    if (c < 4096 || c > this.opts.maxPeerCapacity || (c & (c - 1)) !== 0) {
      throw new ProtocolError(
        `${this.label}: RING_OFFER of a ${c}-byte ring: a ring must be a power of two of 4096..${this.opts.maxPeerCapacity} bytes; refused, not mapped`,
        'SMCUDA_BAD_SEGMENT',
      );
    }
    this.offeredCapacity = c;
    this.upgrade();
  }

  /** The peer's ring descriptor (SEGMENT{CONTROL_RING}): ours to close. */
  private onPeerSegment(seg: { fd: number; bytes: number }): void {
    if (this.closed_ || this.peerFd !== undefined || this.outSegment !== undefined) {
      this.port!.closeFd(seg.fd);
      return;
    }
    this.peerFd = seg;
    try {
      if (seg.bytes > ringSegmentBytes(this.opts.maxPeerCapacity)) {
        throw new ProtocolError(
          `${this.label}: the peer's ring segment of ${seg.bytes} bytes is larger than a ring of ${this.opts.maxPeerCapacity} bytes; refused, not mapped`,
          'SMCUDA_BAD_SEGMENT',
        );
      }
      this.upgrade();
    } catch (err) {
      this.fail(err instanceof Error ? err : new ProtocolError(String(err)));
    }
  }

  /** Both the offer and the descriptor are here: check, map, switch. Throws ProtocolError for a segment that is not what was offered. */
  private upgrade(): void {
    const c = this.offeredCapacity;
    const got = this.peerFd;
    if (c === undefined || got === undefined || this.writer !== undefined) return;
    this.peerFd = undefined;
    if (got.bytes !== ringSegmentBytes(c)) {
      this.port!.closeFd(got.fd);
      throw new ProtocolError(
        `${this.label}: the peer's ring segment is ${got.bytes} bytes, not the ${ringSegmentBytes(c)} its RING_OFFER of ${c} needs; refused, not mapped`,
        'SMCUDA_BAD_SEGMENT',
      );
    }
    let seg: MappedSegment | undefined;
    try {
      seg = mapPeerSegment(got.fd, got.bytes, 'control ring', this.opts.native); // checks seals and size; closes the descriptor
      this.writer = new RingWriter(seg.bytes, c, this.opts.maxRingFrame);
      this.outSegment = seg;
    } catch (err) {
      seg?.close();
      this.writer = undefined;
      if (err instanceof ProtocolError) throw err; // unsealed, another size, not a ring: the peer is broken or hostile
      debug('channel %s: cannot map the peer ring (%s): staying on the channel', this.label, (err as Error).message);
      return;
    }
    this.base.send(RING_SWITCH);
    debug('channel %s: frames to the peer go through its ring (%d bytes)', this.label, c);
  }

  /**
   * A SPILL may run ahead of the next expected frame only by frames already
   * in our ring: the writer puts a frame in the ring before it sends any
   * later one as a SPILL, and the smallest ring entry takes 16 bytes, so at
   * most capacity / 16 frames lie between. One further ahead, behind the
   * expected frame, repeated or out of order can only come from a broken or
   * hostile peer: a protocol error that closes the channel, instead of a
   * buffer of SPILLs that grows without bound and a reader that waits forever.
   */
  private checkSpill(seq: number): void {
    const ahead = (seq - this.expected) >>> 0;
    const window = this.reader!.capacity / MIN_RING_ENTRY;
    const last = this.spills.length > 0 ? this.spills[this.spills.length - 1]!.seq : undefined;
    const afterLast = last === undefined ? 1 : (seq - last) >>> 0; // SPILLs come in order: each after the one before
    if (ahead >= window || afterLast === 0 || afterLast >= window) {
      throw new ProtocolError(
        `${this.label}: SPILL ${seq} is outside the window of ${window} frames after ${this.expected} (repeated, out of order or too far ahead)`,
      );
    }
  }

  /** Delivers ring entries and SPILLs in sequence order; true if any was delivered. */
  private pump(): boolean {
    const reader = this.reader;
    if (!reader || !this.peerSwitched) return false;
    let delivered = false;
    while (!this.closed_) {
      const seq = reader.peekSeq();
      if (seq === this.expected) {
        // Handed over where it lies; the listener copies what it keeps
        // (ControlChannel). Copying every entry off the ring was 3.5 % of the
        // receiver's time streaming 1 MiB on 2xH200, and an RGET or FIN keeps
        // nothing of its bytes.
        this.deliver(reader.peek(), true);
        if (this.reader !== reader) break; // closed meanwhile: the segment is gone
        reader.consume();
      } else if (this.spills.length > 0 && this.spills[0]!.seq === this.expected) {
        const spill = this.spills.shift()!;
        this.spilledBytes -= spill.frame.byteLength;
        this.deliver(spill.frame, false);
      } else {
        // Neither source has the next frame yet. A ring entry behind it can only be a broken peer.
        if (seq !== -1 && (seq - this.expected) >>> 0 >= U32_HALF) {
          throw new ProtocolError(`${this.label}: ring entry ${seq} arrived after ${this.expected - 1}`);
        }
        break;
      }
      delivered = true;
    }
    return delivered;
  }

  private deliver(frame: Uint8Array, transient: boolean): void {
    this.expected = (this.expected + 1) >>> 0;
    this.opts.progress.kick(this);
    this.emit('frame', frame, transient);
  }

  private readonly onBaseDrain = (): void => {
    if (!this.closed_) this.emit('drain');
  };

  private readonly onBaseClose = (error?: Error): void => {
    if (!this.closed_) {
      // What the peer wrote before it went is still in our ring: deliver it first.
      try {
        this.pump();
      } catch {
        // a corrupt ring at the end changes nothing: the channel is closing
      }
    }
    this.stop();
    this.emitClose(error);
  };

  private fail(err: Error): void {
    debug('channel %s: %s', this.label, err.message);
    if (this.closed_) return;
    this.stop();
    this.base.close();
    this.emitClose(err);
  }

  /** No more frames either way: off the progress engine, segments released. */
  private stop(): void {
    this.closed_ = true;
    this.opts.progress.forget(this);
    this.release();
  }

  private release(): void {
    if (this.peerFd !== undefined) this.port?.closeFd(this.peerFd.fd);
    this.peerFd = undefined;
    this.reader = undefined;
    this.writer = undefined;
    this.inSegment?.close();
    this.inSegment = undefined;
    this.outSegment?.close();
    this.outSegment = undefined;
  }

  private emitClose(error: Error | undefined): void {
    if (this.closeEmitted) return;
    this.closeEmitted = true;
    this.base.off('frame', this.onBaseFrame);
    this.base.off('drain', this.onBaseDrain);
    if (error) this.emit('close', error);
    else this.emit('close');
  }
}
