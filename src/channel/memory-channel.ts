/**
 * An in-process pair of ControlChannels for tests, whose delivery the test
 * controls.
 *
 * Each direction is a FIFO queue. Every send (and the end-of-stream marker
 * of close()) schedules one "release"; a release delivers the OLDEST item
 * still queued in that direction, so frames arrive in order whatever order
 * releases run in. The release is scheduled, by the first option present:
 *
 *  - `manual: true`: never by itself; the test calls deliverNext() /
 *    deliverAll() on the sending end (pending() counts what is held).
 *  - `deliver(release, info)`: the test's hook decides, e.g. through a
 *    fast-check scheduler: `deliver: (release) => void s.schedule(Promise.resolve()).then(release)`.
 *  - `delay`: after that many ms (a number, or a function of the frame).
 *    Delays never reorder frames: a release that fires early delivers the
 *    oldest frame.
 *  - otherwise on setImmediate (a macrotask, so timers still fire between
 *    frames of a ping-pong).
 *
 * Faults: breakLink(error) closes both ends with an error now (a lost peer);
 * hang() makes one end a hung process (it neither receives nor sends
 * anything, and stays open).
 *
 * Frames are copied on send, so a sender that reuses its buffer cannot change
 * what the receiver gets; the receiver gets a plain Uint8Array it owns.
 */
import { EventEmitter } from 'node:events';
import { ArgumentTypeError, ClosedError, ConfigError, PeerLostError } from '../errors.js';
import { frameTooLarge } from './framing.js';
import type { ControlChannel, ControlChannelEvents } from './channel.js';

export interface DeliveryInfo {
  /** Label of the sending end, e.g. 'memory:a->b'. */
  from: string;
  /** The frame whose send scheduled this release, or null for the end-of-stream marker of close(). */
  frame: Uint8Array | null;
}

export interface MemoryChannelOptions {
  /** Names of the two ends, for labels ('memory:a->b'). Default ['a', 'b']. */
  names?: [string, string];
  /** Hold every frame until the test calls deliverNext()/deliverAll(). */
  manual?: boolean;
  /** Schedules each release; `release` may be called at any time, once. */
  deliver?: (release: () => void, info: DeliveryInfo) => void;
  /** Milliseconds before each release, fixed or per frame (null frame: end marker). */
  delay?: number | ((frame: Uint8Array | null, from: string) => number);
  /** Queued bytes per direction at which send() starts returning false ('drain' follows). Default Infinity. */
  highWaterMark?: number;
  /** send() refuses larger frames, before queueing anything, as UnixChannel's maxFrameBytes does. Default Infinity. */
  maxFrameBytes?: number;
}

/** An item in one direction's queue. */
type Item = Uint8Array | typeof END;
const END = Symbol('end of stream');

export class MemoryChannel extends EventEmitter<ControlChannelEvents> implements ControlChannel {
  readonly label: string;
  #closed = false;
  #closeEmitted = false;
  #hung = false;
  #peer!: MemoryChannel;
  /** What this end sent and the peer has not been handed yet. */
  readonly #queue: Item[] = [];
  #queuedBytes = 0;
  #needDrain = false;

  /** Use createMemoryChannelPair. */
  constructor(
    label: string,
    private readonly options: MemoryChannelOptions,
  ) {
    super();
    this.label = label;
  }

  /** @internal */
  link(peer: MemoryChannel): void {
    this.#peer = peer;
  }

  get closed(): boolean {
    return this.#closed;
  }

  send(frame: Uint8Array): boolean {
    if (!(frame instanceof Uint8Array)) throw new ArgumentTypeError(`${this.label}: send() takes a Uint8Array frame`);
    return this.#enqueue(new Uint8Array(frame));
  }

  /** Orderly close: this end closes now; the peer closes once everything sent before has been delivered. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    // What was sent before stays queued and is still delivered, then the end marker.
    if (!this.#hung) this.#push(END, null);
    this.#emitCloseSoon(undefined);
  }

  // -- test controls ---------------------------------------------------------

  /** Items this end sent that the peer has not received yet (frames and the close marker). */
  pending(): number {
    return this.#queue.length;
  }

  /** Hands the oldest pending item to the peer. Returns false when nothing was pending. */
  deliverNext(): boolean {
    return this.#release();
  }

  /** Delivers until nothing is pending (including frames sent meanwhile). Returns how many were delivered. */
  deliverAll(): number {
    let n = 0;
    while (this.#release()) n++;
    return n;
  }

  /** Simulates a lost peer: both ends close now with `error`; nothing pending is delivered. */
  breakLink(error: Error = new PeerLostError(`${this.label}: link broken (simulated peer loss)`)): void {
    for (const end of [this, this.#peer]) {
      end.#queue.length = 0;
      end.#queuedBytes = 0;
      if (!end.#closed) {
        end.#closed = true;
        end.#emitCloseSoon(error);
      }
    }
  }

  /**
   * Simulates a hung peer process at this end (or ends it with `false`):
   * frames sent to it vanish, frames it sends vanish, and neither end closes.
   */
  hang(on = true): void {
    this.#hung = on;
  }

  // -- internals -------------------------------------------------------------

  #enqueue(copy: Uint8Array): boolean {
    if (this.#closed) throw new ClosedError(`${this.label}: send after close; the channel is closed, open a new endpoint`);
    const max = this.options.maxFrameBytes ?? Infinity;
    if (copy.byteLength > max) throw frameTooLarge(`${this.label}: refusing to send`, copy.byteLength, max);
    if (this.#hung) return true;
    this.#queuedBytes += copy.byteLength;
    this.#push(copy, copy);
    const below = this.#queuedBytes < (this.options.highWaterMark ?? Infinity);
    if (!below) this.#needDrain = true;
    return below;
  }

  #push(item: Item, frame: Uint8Array | null): void {
    this.#queue.push(item);
    const o = this.options;
    if (o.manual) return;
    const release = () => void this.#release();
    if (o.deliver) {
      o.deliver(release, { from: this.label, frame });
      return;
    }
    const ms = typeof o.delay === 'function' ? o.delay(frame, this.label) : (o.delay ?? 0);
    if (ms > 0) setTimeout(release, ms);
    else setImmediate(release);
  }

  /** Delivers the oldest queued item to the peer. */
  #release(): boolean {
    const item = this.#queue.shift();
    if (item === undefined) return false;
    const peer = this.#peer;
    if (item === END) {
      if (!peer.#closed) {
        peer.#closed = true;
        peer.#emitCloseSoon(undefined);
      }
      return true;
    }
    this.#queuedBytes -= item.byteLength;
    if (this.#needDrain && this.#queuedBytes < (this.options.highWaterMark ?? Infinity)) {
      this.#needDrain = false;
      if (!this.#closed) queueMicrotask(() => !this.#closed && this.emit('drain'));
    }
    if (!peer.#closed && !peer.#hung) peer.emit('frame', item);
    return true;
  }

  /** 'close' is emitted once, asynchronously, as sockets do. */
  #emitCloseSoon(error: Error | undefined): void {
    process.nextTick(() => {
      if (this.#closeEmitted) return;
      this.#closeEmitted = true;
      if (error) this.emit('close', error);
      else this.emit('close');
    });
  }
}

/** Two connected in-memory channels; see the file comment for the options. */
export function createMemoryChannelPair(options: MemoryChannelOptions = {}): [MemoryChannel, MemoryChannel] {
  const hwm = options.highWaterMark;
  if (hwm !== undefined && !(typeof hwm === 'number' && hwm > 0)) {
    throw new ConfigError(`highWaterMark must be a positive number of bytes, got ${String(hwm)}`);
  }
  if (typeof options.delay === 'number' && !(options.delay >= 0)) {
    throw new ConfigError(`delay must be a non-negative number of ms, got ${options.delay}`);
  }
  const [na, nb] = options.names ?? ['a', 'b'];
  const a = new MemoryChannel(`memory:${na}->${nb}`, options);
  const b = new MemoryChannel(`memory:${nb}->${na}`, options);
  a.link(b);
  b.link(a);
  return [a, b];
}
