/**
 * One file over 500 lines, as one concept: a Unix-socket ControlChannel and
 * its listener share the socket life cycle (bind, 0600, peer credentials,
 * unlink only our own inode, the two frame bounds); split, each half would
 * need the other's state.
 *
 * ControlChannel over a Unix domain stream socket, framed by a u32 length
 * prefix (framing.ts).
 *
 *  - Writes: a small frame is copied behind its prefix into one buffer (one
 *    write); a large one is written as prefix + frame under cork(), so the
 *    frame itself is not copied (the socket keeps a reference until written,
 *    which the ControlChannel contract allows).
 *  - Reads: frames are views of the socket's chunks when they lie in one
 *    (no copy); a view keeps its chunk (≤ 64 KiB) alive while it is held.
 *    Nothing is read before the first 'frame' listener is attached or the
 *    next macrotask, whichever is first, so a listener added in the same
 *    macrotask as the channel (after any number of awaits) misses no frame.
 *  - 'close': once. Local close() → without error, right away (pending writes
 *    are still flushed, then the socket ends; it is destroyed after
 *    `closeTimeoutMs` if the peer never finishes). Peer ended → without error.
 *    Reset, broken pipe → PeerLostError. Bad framing, oversized frame, or an
 *    end in the middle of a frame → ProtocolError.
 *
 * Two bounds keep a peer from holding this process's memory or a half-read
 * frame forever: before the handshake is done (`handshakeFrameBytes`, lifted
 * by handshakeDone()) a frame may be only a few hundred bytes, refused from
 * its length prefix alone; and a frame begun must be complete within
 * `frameTimeoutMs`, or the channel fails (a peer trickling one byte a second).
 *
 * Note that a peer process that dies with nothing unread looks like an
 * orderly end: the endpoint protocol tells the two apart (a CLOSE frame comes
 * first on an orderly close).
 */
import { EventEmitter } from 'node:events';
import { promises as fsp, statSync } from 'node:fs';
import * as net from 'node:net';
import { dirname } from 'node:path';
import { randomBytes } from 'node:crypto';
import {
  AccessDeniedError,
  ArgumentTypeError,
  ClosedError,
  ConfigError,
  NoListenerError,
  PeerLimitError,
  PeerLostError,
  ProtocolError,
  SmcudaError,
} from '../errors.js';
import { checkPeer, checkPrivateDir, checkUidPolicy, type PeerCredentials, type PeerUidPolicy, socketPeerCredentials } from './peer-credentials.js';
import type { ControlChannel, ControlChannelEvents } from './channel.js';
import { DEFAULT_MAX_FRAME_BYTES, FrameReader, LENGTH_PREFIX_BYTES, MAX_FRAME_BYTES_LIMIT, frameTooLarge, lengthPrefix } from './framing.js';

/** Frames up to this size are copied behind their prefix and written once. */
const COPY_WRITE_BYTES = 16 * 1024;
/**
 * Bytes of frames not yet complete, per peer process (SO_PEERCRED pid), over
 * all its channels in this process. They count against each of its
 * endpoints' buffer budget (limitBuffered): six connections of one peer each
 * holding a 250 MiB partial frame took a receiver from 65 to 1567 MiB, each
 * within its own endpoint's budget.
 */
const partialByPeer = new Map<number, number>();
/** Linux sun_path holds 108 bytes including the terminating NUL. */
const MAX_SOCKET_PATH_BYTES = 107;
export const DEFAULT_CLOSE_TIMEOUT_MS = 1000;
/**
 * A frame begun must be whole within 30 s. A 256 MiB frame (the default
 * limit) crosses a Unix socket in well under a second; the margin is for a
 * writer whose event loop is busy elsewhere.
 */
export const DEFAULT_FRAME_TIMEOUT_MS = 30_000;

export interface UnixChannelOptions {
  /** Largest frame sent or accepted, in bytes. Default 256 MiB; at most 2^32 - 1. */
  maxFrameBytes?: number;
  /** After close(), how long to wait for the peer to end before destroying the socket. Default 1000 ms. */
  closeTimeoutMs?: number;
  /**
   * Until handshakeDone() is called, refuse (and fail the channel on) any
   * frame longer than this, from its length prefix, before buffering it.
   * Default: no such bound (maxFrameBytes applies from the start).
   */
  handshakeFrameBytes?: number;
  /** A frame begun must be complete within this many ms, or the channel fails with ProtocolError. Default 30000; 0: no limit. */
  frameTimeoutMs?: number;
}

export interface ConnectUnixOptions extends UnixChannelOptions {
  /** Give up connecting after this many ms. Default: no limit (a Unix connect does not hang unless the backlog is full). */
  timeoutMs?: number;
  /** Which uids the listening process may run as (SO_PEERCRED): default 'same' (this process's uid). */
  peerUids?: PeerUidPolicy;
}

export interface ListenUnixOptions extends UnixChannelOptions {
  /** Accept errors of the server (e.g. EMFILE); default: a process warning. */
  onError?: (error: Error) => void;
  /**
   * Require the socket's directory to be private (owned by this user, mode
   * 0700 or stricter); default true. A ConfigError says how to fix it.
   */
  privateDir?: boolean;
  /** Which uids a connecting process may run as (SO_PEERCRED): default 'same' (this process's uid). */
  peerUids?: PeerUidPolicy;
  /** A connection refused by the uid check (AccessDeniedError); default: a process warning. */
  onRefused?: (error: AccessDeniedError) => void;
  /**
   * Runs once the socket is bound and private, before peers can reach it at
   * `path` (its link there): whatever connections need from the start is set
   * up here (the Transport's descriptor socket). A rejection fails listen().
   */
  beforeReachable?: () => Promise<void>;
}

export interface UnixListener {
  readonly path: string;
  /** Channels accepted and still open. */
  readonly channels: ReadonlySet<ControlChannel>;
  /**
   * Stops accepting, closes every accepted channel that is still open
   * (orderly), removes the socket file; resolves once the server is closed.
   * Idempotent.
   */
  close(): Promise<void>;
  /** Whether the listening socket keeps the process alive (the default) or not (ControlChannel.ref). */
  ref(): void;
  unref(): void;
}

interface ResolvedOptions {
  maxFrameBytes: number;
  closeTimeoutMs: number;
  handshakeFrameBytes: number | undefined;
  frameTimeoutMs: number;
}

function resolveOptions(opts: UnixChannelOptions | undefined): ResolvedOptions {
  const maxFrameBytes = opts?.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES;
  if (!Number.isInteger(maxFrameBytes) || maxFrameBytes < 1 || maxFrameBytes > MAX_FRAME_BYTES_LIMIT) {
    throw new ConfigError(`maxFrameBytes must be an integer in 1..${MAX_FRAME_BYTES_LIMIT}, got ${String(maxFrameBytes)}`);
  }
  const closeTimeoutMs = opts?.closeTimeoutMs ?? DEFAULT_CLOSE_TIMEOUT_MS;
  if (typeof closeTimeoutMs !== 'number' || !(closeTimeoutMs >= 0)) {
    throw new ConfigError(`closeTimeoutMs must be a non-negative number, got ${String(closeTimeoutMs)}`);
  }
  const handshakeFrameBytes = opts?.handshakeFrameBytes;
  if (handshakeFrameBytes !== undefined && (!Number.isInteger(handshakeFrameBytes) || handshakeFrameBytes < 1 || handshakeFrameBytes > maxFrameBytes)) {
    throw new ConfigError(`handshakeFrameBytes must be an integer in 1..maxFrameBytes (${maxFrameBytes}), got ${String(handshakeFrameBytes)}`);
  }
  const frameTimeoutMs = opts?.frameTimeoutMs ?? DEFAULT_FRAME_TIMEOUT_MS;
  if (typeof frameTimeoutMs !== 'number' || !(frameTimeoutMs >= 0) || frameTimeoutMs > 2 ** 31 - 1) {
    throw new ConfigError(`frameTimeoutMs must be a number of milliseconds in 0..2147483647 (0: no limit), got ${String(frameTimeoutMs)}`);
  }
  return { maxFrameBytes, closeTimeoutMs, handshakeFrameBytes, frameTimeoutMs };
}

/** What an errno from a Unix socket means, and what to do about it. */
function explain(err: NodeJS.ErrnoException, path: string): string {
  switch (err.code) {
    case 'ENOENT':
      return `nothing listens at ${path}: start the listening process first, or check the path`;
    case 'ECONNREFUSED':
      if (!isSocketFile(path)) return `${path} is not a socket (${fileKind(path)}): check the path; it must be what the listener's listen() was given`;
      return `the socket file ${path} exists but no process accepts on it (its owner exited): restart the listener`;
    case 'EACCES':
    case 'EPERM':
      return `permission denied on ${path}: smcuda sockets are mode 0600, run both processes as the same user`;
    case 'EAGAIN':
      return `the listener at ${path} has a full backlog: retry later`;
    case 'ECONNRESET':
    case 'EPIPE':
      return 'the peer process exited or closed the connection abruptly';
    default:
      return err.message;
  }
}

function isSocketFile(path: string): boolean {
  try {
    return statSync(path).isSocket();
  } catch {
    return true; // gone meanwhile: the usual message
  }
}

function fileKind(path: string): string {
  try {
    const st = statSync(path);
    return st.isFile() ? 'a regular file' : st.isDirectory() ? 'a directory' : st.isFIFO() ? 'a FIFO' : 'not a socket';
  } catch {
    return 'not a socket';
  }
}

export class UnixChannel extends EventEmitter<ControlChannelEvents> implements ControlChannel {
  readonly label: string;
  /** The peer's pid as the kernel recorded it at connect (SO_PEERCRED), where it could be read. */
  readonly peerPid: number | undefined;
  readonly #socket: net.Socket;
  readonly #opts: ResolvedOptions;
  readonly #reader: FrameReader;
  #closed = false;
  #closeEmitted = false;
  /** The first failure seen; reported by 'close'. */
  #error: Error | undefined;
  #closeTimer: NodeJS.Timeout | undefined;
  /** The partial frame being timed: when it began (performance.now) and the reader's framesDone then. */
  #partialSince = 0;
  #partialFrame = -1;
  #frameTimer: NodeJS.Timeout | undefined;
  /** This channel's share of partialByPeer now, and the budget it counts against (limitBuffered). */
  #partialCounted = 0;
  #room: (() => number) | undefined;

  /** Wraps a connected socket; use connectUnix / listenUnix. `peer`: its credentials, if already read. */
  constructor(socket: net.Socket, label: string, opts?: UnixChannelOptions, peer?: PeerCredentials) {
    super();
    this.label = label;
    this.#socket = socket;
    this.#opts = resolveOptions(opts);
    this.peerPid = peer?.pid ?? readPeerPid(socket);
    this.#reader = new FrameReader(this.#opts.maxFrameBytes, (frame) => {
      if (!this.#closed) this.emit('frame', frame);
    });
    const bound = this.#opts.handshakeFrameBytes;
    if (bound !== undefined) {
      this.#reader.setLimit(
        bound,
        (len, max) =>
          new ProtocolError(
            `${label}: a peer that has not completed the handshake announced a frame of ${len} bytes; until it has, frames of at most ${max} bytes are accepted: refused`,
            'SMCUDA_PROTOCOL_FRAME_SIZE',
          ),
      );
    }
    socket.on('data', (chunk: Buffer) => {
      if (this.#closed) return;
      try {
        this.#reader.push(chunk);
        this.#countPartial();
      } catch (err) {
        if (!(err instanceof ProtocolError) && !(err instanceof PeerLimitError)) throw err;
        this.#fail(err);
        return;
      }
      if (this.#opts.frameTimeoutMs > 0) this.#timePartialFrame();
    });
    // Nothing is read until the first 'frame' listener is attached: a frame
    // emitted before would be lost. Under Deno (measured, 19 of 100 connects)
    // the peer's first frame is emitted in the same microtask run as
    // 'connect', before the caller's `await connectUnix()` has gone on to
    // listen, and the handshake then saw the peer's PROOF first. Holding the
    // bytes in the socket (not parsed frames) also keeps each frame checked
    // against the frame limit in force when it is dispatched.
    socket.pause();
    // At the latest on the next macrotask: a user that listens only for
    // 'close' still learns of a refused or ended stream.
    const events = this as EventEmitter; // 'newListener' is not in ControlChannelEvents
    const start = () => {
      events.off('newListener', onListener);
      clearImmediate(fallback);
      // resume() flows on a later tick, after a listener being added is in place.
      // Also once closed: the peer's end is read, so the socket goes (no closeTimeoutMs wait).
      socket.resume();
    };
    const onListener = (event: string | symbol) => {
      if (event === 'frame') start();
    };
    const fallback = setImmediate(start);
    events.on('newListener', onListener);
    socket.on('drain', () => {
      if (!this.#closed) this.emit('drain');
    });
    socket.on('end', () => {
      const held = this.#reader.buffered;
      if (held > 0 && !this.#closed) {
        this.#error ??= new ProtocolError(`${this.label}: the peer ended the stream in the middle of a frame (${held} bytes of it received)`);
      }
    });
    socket.on('error', (err: NodeJS.ErrnoException) => {
      this.#error ??= new PeerLostError(`${this.label}: connection lost (${err.code ?? err.message}): ${explain(err, label)}`, { cause: err });
    });
    socket.on('close', () => {
      this.#uncountPartial();
      clearTimeout(this.#closeTimer);
      clearTimeout(this.#frameTimer);
      this.#closed = true;
      this.#emitClose(this.#error);
    });
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** Bytes held of a frame not yet complete (0 between frames): what a peer can make this channel hold. */
  get bufferedBytes(): number {
    return this.#reader.buffered;
  }

  /** The largest frame accepted now: handshakeFrameBytes until handshakeDone(), then maxFrameBytes. */
  get frameLimit(): number {
    return this.#reader.limit;
  }

  /** After the handshake: a frame larger than `room()` is refused from its prefix (PeerLimitError; ControlChannel.limitBuffered). */
  limitBuffered(room: () => number): void {
    this.#room = room;
    // A new frame must fit beside what the peer's other channels hold of their partial frames.
    this.#reader.setRoom(() => room() - this.#othersPartial());
  }

  /**
   * The peer process whose partial frames this channel's count with, or
   * undefined (not known, or this very process: two transports of one
   * process, each direction its own budget).
   */
  get #peerProcess(): number | undefined {
    const pid = this.peerPid;
    return pid === process.pid ? undefined : pid;
  }

  /** Partial-frame bytes the peer process holds here on its other channels. */
  #othersPartial(): number {
    const pid = this.#peerProcess;
    return pid === undefined ? 0 : (partialByPeer.get(pid) ?? 0) - this.#partialCounted;
  }

  /**
   * Counts this channel's partial frame in its peer's total; past the budget
   * (what this endpoint may still buffer), PeerLimitError: the peer's partial
   * frames, on all its channels, hold more than maxBufferedBytes allows.
   */
  #countPartial(): void {
    const pid = this.#peerProcess;
    if (pid === undefined) return;
    const now = this.#reader.buffered;
    if (now !== this.#partialCounted) {
      const total = (partialByPeer.get(pid) ?? 0) + now - this.#partialCounted;
      this.#partialCounted = now;
      if (total > 0) partialByPeer.set(pid, total);
      else partialByPeer.delete(pid);
    }
    const room = this.#room;
    if (room === undefined || now === 0) return;
    const total = partialByPeer.get(pid) ?? 0;
    const left = room();
    if (total > left) {
      throw new PeerLimitError(
        'SMCUDA_PEER_BUFFER_LIMIT',
        `${this.label}: the peer (pid ${pid}) holds ${total} bytes of frames not yet complete on its connections here; only ${Math.max(0, left)} bytes are left of maxBufferedBytes: cut off`,
      );
    }
  }

  #uncountPartial(): void {
    const pid = this.#peerProcess;
    if (pid === undefined || this.#partialCounted === 0) return;
    const total = (partialByPeer.get(pid) ?? 0) - this.#partialCounted;
    this.#partialCounted = 0;
    if (total > 0) partialByPeer.set(pid, total);
    else partialByPeer.delete(pid);
  }

  /** The peer is authenticated: frames up to maxFrameBytes are accepted from now on. */
  handshakeDone(): void {
    this.#reader.setLimit(this.#opts.maxFrameBytes);
  }

  /**
   * Keeps a timer on the frame in progress. Runs after each chunk; costs a
   * comparison unless a new frame was left incomplete.
   */
  #timePartialFrame(): void {
    if (this.#reader.buffered === 0) {
      if (this.#frameTimer !== undefined) {
        clearTimeout(this.#frameTimer);
        this.#frameTimer = undefined;
      }
      this.#partialFrame = -1;
      return;
    }
    if (this.#partialFrame === this.#reader.framesDone) return; // the same frame, still coming
    this.#partialFrame = this.#reader.framesDone;
    this.#partialSince = performance.now();
    if (this.#frameTimer === undefined) this.#armFrameTimer(this.#opts.frameTimeoutMs);
  }

  #armFrameTimer(ms: number): void {
    this.#frameTimer = setTimeout(() => {
      // Read what has arrived first (setImmediate runs after the poll phase):
      // after a long stall of this process's own event loop, the rest of the
      // frame may be waiting in the socket.
      setImmediate(() => {
        this.#frameTimer = undefined;
        if (this.#closed || this.#reader.buffered === 0) return;
        const age = performance.now() - this.#partialSince;
        if (this.#partialFrame === this.#reader.framesDone && age >= this.#opts.frameTimeoutMs) {
          this.#fail(
            new ProtocolError(
              `${this.label}: a frame begun ${Math.round(age)} ms ago is still incomplete (${this.#reader.buffered} bytes in), above frameTimeoutMs (${this.#opts.frameTimeoutMs}): the peer is stalled or hostile; closed`,
              'SMCUDA_PROTOCOL_FRAME_TIMEOUT',
            ),
          );
          return;
        }
        this.#armFrameTimer(Math.max(1, this.#opts.frameTimeoutMs - age));
      });
    }, ms);
    this.#frameTimer.unref();
  }

  // No write coalescing (cork until the next tick): measured on 2×H200 it cost
  // 7–60 % of large-message bandwidth (FINs corked from a native completion
  // callback waited for a later event to be flushed). One write per frame.

  send(frame: Uint8Array): boolean {
    this.#checkSend(frame);
    const n = frame.byteLength;
    if (n <= COPY_WRITE_BYTES) {
      const out = Buffer.allocUnsafe(LENGTH_PREFIX_BYTES + n);
      out.writeUInt32LE(n, 0);
      out.set(frame, LENGTH_PREFIX_BYTES);
      return this.#socket.write(out);
    }
    const s = this.#socket;
    s.cork();
    s.write(lengthPrefix(n));
    const ok = s.write(frame);
    s.uncork();
    return ok;
  }

  sendParts(parts: readonly Uint8Array[]): boolean {
    let n = 0;
    for (const p of parts) {
      if (!(p instanceof Uint8Array)) throw new ArgumentTypeError(`${this.label}: sendParts() takes Uint8Array parts`);
      n += p.byteLength;
    }
    this.#checkSend(undefined, n);
    if (n <= COPY_WRITE_BYTES) {
      const out = Buffer.allocUnsafe(LENGTH_PREFIX_BYTES + n);
      out.writeUInt32LE(n, 0);
      let at = LENGTH_PREFIX_BYTES;
      for (const p of parts) {
        out.set(p, at);
        at += p.byteLength;
      }
      return this.#socket.write(out);
    }
    const s = this.#socket;
    s.cork();
    let ok = s.write(lengthPrefix(n));
    for (const p of parts) if (p.byteLength > 0) ok = s.write(p);
    s.uncork();
    return ok;
  }

  /** The socket keeps the process alive (the default). */
  ref(): void {
    this.#socket.ref();
  }

  /** The socket no longer keeps the process alive; it still reads and writes while something else does. */
  unref(): void {
    this.#socket.unref();
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    // end() flushes what is queued, then sends FIN; the peer ends too (allowHalfOpen: false).
    this.#socket.end();
    this.#closeTimer = setTimeout(() => this.#socket.destroy(), this.#opts.closeTimeoutMs);
    this.#closeTimer.unref();
    process.nextTick(() => this.#emitClose(undefined));
  }

  #checkSend(frame: Uint8Array | undefined, size?: number): void {
    if (this.#closed) throw new ClosedError(`${this.label}: send after close; the channel is closed, open a new endpoint`);
    if (frame !== undefined && !(frame instanceof Uint8Array)) throw new ArgumentTypeError(`${this.label}: send() takes a Uint8Array frame`);
    const n = size ?? frame!.byteLength;
    if (n > this.#opts.maxFrameBytes) throw frameTooLarge(`${this.label}: refusing to send`, n, this.#opts.maxFrameBytes);
  }

  /** Fails the channel: 'close' reports `error` once the socket is gone. */
  #fail(error: Error): void {
    this.#error ??= error;
    this.#closed = true;
    this.#uncountPartial();
    clearTimeout(this.#frameTimer);
    this.#socket.destroy();
  }

  #emitClose(error: Error | undefined): void {
    if (this.#closeEmitted) return;
    this.#closeEmitted = true;
    if (error) this.emit('close', error);
    else this.emit('close');
  }
}

function checkPath(path: string): void {
  if (typeof path !== 'string' || path.length === 0) throw new ConfigError(`a Unix socket path must be a non-empty string, got ${String(path)}`);
  if (Buffer.byteLength(path) > MAX_SOCKET_PATH_BYTES) {
    throw new ConfigError(
      `Unix socket path is ${Buffer.byteLength(path)} bytes, above the ${MAX_SOCKET_PATH_BYTES}-byte limit: use a shorter path (e.g. under /tmp or $XDG_RUNTIME_DIR): ${path}`,
    );
  }
}

/** The kernel's pid for the peer of `socket`, or undefined where it cannot be read (no addon, closed already). */
function readPeerPid(socket: net.Socket): number | undefined {
  try {
    return socketPeerCredentials(socket).pid;
  } catch {
    return undefined;
  }
}

/**
 * An errno from the socket layer or the file system as a typed error that
 * says what to do: nothing listening → NoListenerError, permission →
 * AccessDeniedError, anything else → `other`.
 */
function socketError(err: NodeJS.ErrnoException, path: string, what: string, other: (message: string) => SmcudaError): SmcudaError {
  const message = `${what} (${err.code ?? err.message}): ${explain(err, path)}`;
  switch (err.code) {
    case 'ENOENT':
    case 'ECONNREFUSED':
      return new NoListenerError(message, { cause: err });
    case 'EACCES':
    case 'EPERM':
      return new AccessDeniedError(message);
    default:
      return other(message);
  }
}

/**
 * Connects to a listener at `path`. Rejects with NoListenerError when nothing
 * accepts there (no socket file, or its process exited), AccessDeniedError on
 * a permission error or a listener of another uid, PeerLostError otherwise
 * (timeout, reset), each saying what to do.
 */
export async function connectUnix(path: string, opts?: ConnectUnixOptions): Promise<UnixChannel> {
  checkPath(path);
  const resolved = resolveOptions(opts);
  const peerUids = checkUidPolicy(opts?.peerUids ?? 'same');
  return new Promise<UnixChannel>((resolve, reject) => {
    const socket = net.createConnection({ path, allowHalfOpen: false });
    let timer: NodeJS.Timeout | undefined;
    const onError = (err: NodeJS.ErrnoException) => {
      clearTimeout(timer);
      socket.destroy();
      reject(socketError(err, path, `Could not connect to unix:${path}`, (m) => new PeerLostError(m, { cause: err })));
    };
    socket.once('error', onError);
    if (opts?.timeoutMs !== undefined) {
      timer = setTimeout(() => onError(Object.assign(new Error(`timed out after ${opts.timeoutMs} ms`), { code: 'ETIMEDOUT' })), opts.timeoutMs);
    }
    socket.once('connect', () => {
      clearTimeout(timer);
      socket.off('error', onError);
      let cred: PeerCredentials | undefined;
      try {
        cred = checkPeer(socket, peerUids, `unix:${path}`);
      } catch (err) {
        socket.destroy();
        reject(err);
        return;
      }
      resolve(new UnixChannel(socket, `unix:${path}`, resolved, cred));
    });
  });
}

/** Whether a process accepts connections at the socket `path`. */
function isListening(path: string): Promise<boolean> {
  return new Promise((resolve, reject) => {
    const probe = net.createConnection({ path });
    probe.once('connect', () => {
      probe.destroy();
      resolve(true);
    });
    probe.once('error', (err: NodeJS.ErrnoException) => {
      probe.destroy();
      if (err.code === 'ECONNREFUSED' || err.code === 'ENOENT') resolve(false);
      // A live socket of another type (a descriptor listener is SOCK_SEQPACKET): in use.
      else if (err.code === 'EPROTOTYPE') resolve(true);
      else reject(socketError(err, path, `Cannot tell whether ${path} is in use`, (m) => new ConfigError(m)));
    });
  });
}

/** An fs errno on `path` as a typed error (AccessDeniedError for permissions, else ConfigError). */
function fsError(err: unknown, path: string, what: string): SmcudaError {
  const e = err as NodeJS.ErrnoException;
  if (e.code === 'EACCES' || e.code === 'EPERM') {
    return new AccessDeniedError(`${what} (${e.code}): permission denied on ${path} or its directory: use a directory of your own (mode 0700)`);
  }
  if (e.code === 'ENOENT') return new ConfigError(`${what} (ENOENT): the directory of ${path} does not exist: create it (mode 0700) first`);
  return new ConfigError(`${what} (${e.code ?? e.message}): ${e.message}`);
}

/**
 * Removes a stale socket file at `path` (one nobody listens on: a dead
 * process's); refuses to touch a live socket (of any type) or anything that
 * is not a socket: ConfigError.
 */
export async function clearStaleSocket(path: string): Promise<void> {
  let st;
  try {
    st = await fsp.lstat(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw fsError(err, path, `Cannot look at ${path}`);
  }
  if (!st.isSocket()) throw new ConfigError(`${path} exists and is not a socket: refusing to replace it; choose another path or remove it`);
  if (await isListening(path)) throw new ConfigError(`Another process is listening at ${path}: stop it, or choose another path`);
  await fsp.unlink(path).catch((err: NodeJS.ErrnoException) => {
    if (err.code !== 'ENOENT') throw fsError(err, path, `Cannot remove the stale socket ${path}`);
  });
}

/**
 * A name next to `path` to bind first: libuv unlinks the path it bound when
 * the server closes, whatever is there by then, so the server binds this
 * name and the socket reaches `path` by link() (see listenUnix). Undefined
 * when no such name fits in sun_path.
 */
function bindName(path: string): string | undefined {
  const dir = dirname(path);
  const room = MAX_SOCKET_PATH_BYTES - Buffer.byteLength(dir) - 2; // '/' and '.'
  if (room < 1) return undefined;
  return `${dir}/.${randomBytes(8).toString('hex').slice(0, Math.min(12, room))}`;
}

/**
 * Listens at `path` (mode 0600) and calls `onChannel` with a channel for
 * every peer that connects. The directory of `path` must be private (0700,
 * ours; see `privateDir`), and a peer running as another user is refused
 * before it becomes a channel (SO_PEERCRED; see `peerUids`, `onRefused`). A stale socket file left by a dead process is
 * replaced; a live one, or a file that is not a socket, is refused
 * (ConfigError).
 *
 * The socket is bound under a random name next to `path`, made 0600, and only
 * then linked to `path` (link() never replaces a file that appeared there
 * meanwhile): `path` is never reachable with another mode. close() removes
 * `path` only if it is still this socket (same device and inode), so it
 * leaves alone whatever another process put there after listen().
 */
export async function listenUnix(path: string, onChannel: (channel: UnixChannel) => void, opts?: ListenUnixOptions): Promise<UnixListener> {
  checkPath(path);
  const resolved = resolveOptions(opts);
  const peerUids = checkUidPolicy(opts?.peerUids ?? 'same');
  if (opts?.privateDir !== false) await checkPrivateDir(dirname(path));
  await clearStaleSocket(path);
  const refused = opts?.onRefused ?? ((err: Error) => process.emitWarning(err.message, { code: 'SMCUDA_ACCESS_DENIED' }));

  const channels = new Set<UnixChannel>();
  let accepted = 0;
  const server = net.createServer({ allowHalfOpen: false }, (socket) => {
    let cred: PeerCredentials | undefined;
    try {
      cred = checkPeer(socket, peerUids, `unix:${path}`);
    } catch (err) {
      // Never becomes a channel: the peer sees the connection closed at once.
      socket.destroy();
      refused(err as AccessDeniedError);
      return;
    }
    const channel = new UnixChannel(socket, `unix:${path}#${++accepted}`, resolved, cred);
    channels.add(channel);
    channel.once('close', () => channels.delete(channel));
    onChannel(channel);
  });
  const bound = bindName(path) ?? path;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ path: bound }, () => {
      server.off('error', reject);
      resolve();
    });
  }).catch(async (err: NodeJS.ErrnoException) => {
    // libuv reports bind()'s ENOENT (no such directory) as EACCES.
    if (
      err.code === 'EACCES' &&
      !(await fsp.stat(dirname(path)).then(
        () => true,
        () => false,
      ))
    )
      err.code = 'ENOENT';
    throw fsError(err, path, `Cannot listen at ${path}`);
  });
  const abandon = (err: SmcudaError): Promise<never> =>
    new Promise((_, reject) => {
      server.close(() => reject(err)); // libuv unlinks `bound`
    });
  let identity: { dev: number; ino: number };
  try {
    await fsp.chmod(bound, 0o600);
    const st = await fsp.lstat(bound);
    identity = { dev: st.dev, ino: st.ino };
  } catch (err) {
    return abandon(fsError(err, bound, `Cannot make ${path} private (chmod 0600)`));
  }
  if (opts?.beforeReachable) {
    try {
      await opts.beforeReachable();
    } catch (err) {
      return abandon(err instanceof SmcudaError ? err : new ConfigError(`Cannot listen at ${path}: ${(err as Error).message}`));
    }
  }
  if (bound !== path) {
    try {
      await fsp.link(bound, path);
    } catch (err) {
      const e = err as NodeJS.ErrnoException;
      return abandon(
        e.code === 'EEXIST'
          ? new ConfigError(`${path} appeared while this listener was starting (another process?): refusing to replace it; choose another path`)
          : fsError(err, path, `Cannot listen at ${path}`),
      );
    }
    await fsp.unlink(bound).catch(() => {}); // libuv's unlink at close would remove it anyway
  }
  server.on('error', (err) => (opts?.onError ? opts.onError(err) : process.emitWarning(`smcuda listener at ${path}: ${err.message}`)));

  let closing: Promise<void> | undefined;
  return {
    path,
    channels,
    ref: () => void server.ref(),
    unref: () => void server.unref(),
    close() {
      closing ??= (async () => {
        // Remove `path` only while it is still our socket: an unrelated file
        // or another listener's socket put there since listen() stays.
        try {
          const st = await fsp.lstat(path);
          if (st.dev === identity.dev && st.ino === identity.ino) await fsp.unlink(path);
        } catch {
          // gone already, or not ours to judge: leave it
        }
        await new Promise<void>((resolve) => {
          // Resolves once every accepted connection is gone.
          server.close(() => resolve());
          for (const channel of channels) channel.close();
        });
      })();
      return closing;
    },
  };
}
