/**
 * The endpoint's exchange of sealed ring segments (src/channel/sealed-segment.ts)
 * on its descriptor channel: the control ring and the staging ring of each
 * direction travel as descriptors with a SEGMENT frame as metadata, never by
 * name.
 *
 * States: 'pending' while the transport sets the descriptor channel up after
 * the handshake (segments to send wait), 'up' once it is attached, 'none'
 * where there is no descriptor channel and never will be (either HELLO
 * lacked Feature.DESCRIPTORS, attach() without one, the set-up failed, or the
 * channel closed): then nothing is shared by memory with this peer.
 *
 * Receiving: at most one segment of each kind per endpoint. One that comes
 * while its consumer is not there yet is held (bounded: one per kind); a
 * second of a kind is a protocol error, its descriptor closed at once.
 */
import type { FdChannel } from './channel/fd-channel.js';
import type { MappedSegment } from './channel/sealed-segment.js';
import { debug } from './debug.js';
import { ArgumentRangeError, DescriptorError, ProtocolError } from './errors.js';
import { encodeFrame } from './wire/codec.js';
import { FrameType, SegmentKind } from './wire/frames.js';

export type SegmentExchangeState = 'pending' | 'up' | 'none';

/** A segment of the peer: its descriptor (the taker's to close) and announced size. */
export interface PeerSegment {
  fd: number;
  bytes: number;
}

type Taker = (seg: PeerSegment) => void;

export class SegmentExchange {
  #state: SegmentExchangeState;
  #channel: FdChannel | undefined;
  readonly #queue: { kind: SegmentKind; seg: MappedSegment; resolve: () => void; reject: (e: Error) => void }[] = [];
  readonly #held = new Map<SegmentKind, PeerSegment>();
  readonly #received = new Set<SegmentKind>();
  readonly #takers = new Map<SegmentKind, Taker>();
  readonly #downListeners: ((err: Error) => void)[] = [];
  #downError: Error | undefined;

  constructor(
    agreed: boolean,
    private readonly peerId: string,
    private readonly closeFd: (fd: number) => void,
  ) {
    this.#state = agreed ? 'pending' : 'none';
    if (!agreed) this.#downError = new DescriptorError('SMCUDA_FD_CHANNEL', `no descriptor channel to ${peerId}: nothing is shared by memory with it`);
  }

  get state(): SegmentExchangeState {
    return this.#state;
  }

  /** The descriptor channel is up: queued segments go now. */
  attach(channel: FdChannel): void {
    if (this.#state !== 'pending') return;
    this.#state = 'up';
    this.#channel = channel;
    for (const q of this.#queue.splice(0)) this.#pass(q.kind, q.seg).then(q.resolve, q.reject);
  }

  /** There is no descriptor channel (any more): waiting sends reject, consumers waiting for a segment are told. */
  down(err: Error): void {
    if (this.#state === 'none') return;
    debug('endpoint %s: no descriptor channel for ring segments (%s)', this.peerId, err.message);
    this.#state = 'none';
    this.#channel = undefined;
    this.#downError = err;
    for (const q of this.#queue.splice(0)) q.reject(err);
    for (const l of this.#downListeners.splice(0)) l(err);
  }

  /** Why there is no channel ('none'). */
  get downError(): Error | undefined {
    return this.#downError;
  }

  /** Called once when the state becomes 'none' (at once if it is). */
  onDown(listener: (err: Error) => void): void {
    if (this.#state === 'none') listener(this.#downError!);
    else this.#downListeners.push(listener);
  }

  /**
   * Passes `seg`'s descriptor as `kind` (waiting while the channel is being
   * set up). Resolves once the kernel has it; our descriptor is closed then
   * (the peer holds its own), the mapping stays.
   */
  send(kind: SegmentKind, seg: MappedSegment): Promise<void> {
    if (this.#state === 'none') return Promise.reject(this.#downError!);
    if (this.#state === 'pending') return new Promise((resolve, reject) => this.#queue.push({ kind, seg, resolve, reject }));
    return this.#pass(kind, seg);
  }

  #pass(kind: SegmentKind, seg: MappedSegment): Promise<void> {
    const bytes = seg.bytes.byteLength;
    const lent = seg.lendFd(); // kept open while the channel's queue names it, closed once passed (or failed)
    if (lent === undefined) return Promise.reject(new ArgumentRangeError('this segment was passed already'));
    const sent = this.#channel!.send(lent.fd, encodeFrame({ type: FrameType.SEGMENT, kind, bytes }));
    sent.then(lent.settled, lent.settled);
    return sent;
  }

  /**
   * The consumer of the peer's segments of `kind` (the ring reader, the
   * staging receiver). A segment already held is handed over at once.
   */
  take(kind: SegmentKind, taker: Taker): void {
    this.#takers.set(kind, taker);
    const held = this.#held.get(kind);
    if (held !== undefined) {
      this.#held.delete(kind);
      taker(held);
    }
  }

  /** A SEGMENT message arrived on the descriptor channel (the link routes it here). Throws ProtocolError for a second of a kind. */
  receive(kind: SegmentKind, fd: number, bytes: number): void {
    if (this.#received.has(kind)) {
      this.closeFd(fd);
      throw new ProtocolError(`peer ${this.peerId} passed a second ${SegmentKind[kind]} segment`, 'SMCUDA_BAD_SEGMENT');
    }
    this.#received.add(kind);
    const taker = this.#takers.get(kind);
    if (taker !== undefined) taker({ fd, bytes });
    else this.#held.set(kind, { fd, bytes });
  }

  /** The endpoint closes: held descriptors are closed, waiting sends rejected. */
  close(err: Error): void {
    for (const h of this.#held.values()) this.closeFd(h.fd);
    this.#held.clear();
    this.#takers.clear();
    this.down(err);
  }
}
