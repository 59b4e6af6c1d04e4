/**
 * A channel for file descriptors between two processes: SCM_RIGHTS over a
 * Unix SOCK_SEQPACKET socket driven by the addon (native/fd_passing.cc).
 *
 * One file over 500 lines, as one concept: the channel and its listener
 * share one socket's life cycle (readiness watch, credentials, the token and
 * the pid that admit a connection), as unix-channel.ts does for the control
 * socket.
 *
 * Why a connection of its own, beside the endpoint's control socket, rather
 * than sendmsg on the control socket's fd: Node owns that socket's stream;
 * libuv reads it with read(), which makes the kernel discard any descriptor
 * in flight, and bytes sent beside its writes would interleave with frames.
 * A second socket keeps Node's stream untouched, keeps each descriptor with
 * the message that names it (SEQPACKET keeps message boundaries), and gets
 * the same admission as the control socket: it lives beside the control
 * socket in the same private directory (0700, socket 0600), the peer's uid
 * is checked with SO_PEERCRED, and its first message must be a token the two
 * sides agreed on the authenticated control channel, which binds it to that
 * connection.
 *
 * Ownership: `send` never takes the caller's descriptor (the kernel passes a
 * duplicate): close it once the promise settles. A received descriptor is
 * the message handler's from the moment it is called; every descriptor the
 * channel does not hand out (a message too long, several descriptors, a
 * refused connection) is closed here. When this process has no free slot
 * the kernel drops the descriptor: the handler then gets the message with
 * `lost` set (DescriptorError 'SMCUDA_FD_EMFILE') and no descriptor, so the
 * caller can fall back for that one message.
 *
 * Readiness comes from the addon's one readiness loop (one epoll thread for
 * every socket of the process; never blocks the event loop), one-shot per
 * arm. A watch keeps the process alive only while sends are waiting for
 * room, or while reading if `ref` is set.
 */
import { timingSafeEqual } from 'node:crypto';
import { loadAddon } from '../cuda/addon.js';
import type { NativeFdPassing, NativePeerCredentials } from '../cuda/native-addon.js';
import { AccessDeniedError, ArgumentRangeError, ArgumentTypeError, ClosedError, DescriptorError, PeerLostError, SmcudaError } from '../errors.js';
import type { PeerCredentials, PeerUidPolicy } from './peer-credentials.js';
import { startWatch, stopWatch } from './fd-watches.js';

/** Longest message (metadata) a channel carries. */
export const FD_MESSAGE_MAX = 4096;
/** Bytes of the admission token. */
export const FD_TOKEN_BYTES = 32;
const POLLIN = 0x1;
const POLLOUT = 0x4;
const POLLERR = 0x8;
const POLLHUP = 0x10;
const POLLRDHUP = 0x2000;
/** Connections accepted and not yet admitted (no token yet, or one nobody expects yet) a listener keeps at most. */
const MAX_UNADMITTED = 64;
const TOKEN_MAGIC = Buffer.from('SMFD1');
/** Connections accepted per wake-up of the listener before other work gets its turn (the watch fires again while more wait). */
const ACCEPT_BATCH = 32;
/** After a failed accept (out of descriptors), wait this long before trying again. */
const ACCEPT_RETRY_MS = 50;
/** A connection that has not presented its token by then is closed. */
const ADMISSION_TIMEOUT_MS = 10_000;
/**
 * A connector retries a full backlog (EAGAIN) this long: a flooded listener
 * drains its backlog a batch at a time, and an honest connector that gives
 * up early has no descriptor channel for the endpoint's lifetime.
 */
const BACKLOG_RETRY_MS = 5_000;

export type FdNative = NativeFdPassing & NativePeerCredentials;

export interface FdMessage {
  meta: Uint8Array;
  /** The descriptor that came with it, now the handler's to close; undefined when none came or it was lost. */
  fd: number | undefined;
  /** Set when a descriptor was sent but could not be received here (EMFILE). */
  lost?: DescriptorError;
}

export interface FdChannelHandlers {
  message(msg: FdMessage): void;
  /** The channel failed or the peer closed it; it is closed now. */
  close?(err: Error | undefined): void;
}

export interface FdChannelOptions {
  /** Keep the process alive while waiting for messages (default false: the control channel does that). */
  ref?: boolean;
  native?: FdNative;
}

interface PendingSend {
  fd: number;
  meta: Uint8Array;
  resolve: () => void;
  reject: (err: Error) => void;
}

function errnoCode(err: unknown): string | undefined {
  const code = (err as { code?: unknown }).code;
  return typeof code === 'string' ? code : undefined;
}

function checkUid(cred: PeerCredentials, policy: PeerUidPolicy, label: string): void {
  if (policy === 'any') return;
  const allowed = policy === 'same' ? [process.getuid!()] : policy;
  if (!allowed.includes(cred.uid)) {
    throw new AccessDeniedError(
      `${label}: refused a descriptor connection from pid ${cred.pid}, uid ${cred.uid}: only uid ${allowed.join(', ')} may connect. ` +
        'Run every process of the job as the same user (or list the other uid in peerUids).',
    );
  }
}

export class FdChannel {
  readonly #native: FdNative;
  #sock: number;
  readonly #watch: object;
  readonly #queue: PendingSend[] = [];
  readonly #buffer = new ArrayBuffer(FD_MESSAGE_MAX + 1);
  #handlers: FdChannelHandlers | undefined;
  readonly #ref: boolean;
  #closed = false;
  /** While paused: called (once) when the peer hangs up; see pause(). */
  #onHangup: (() => void) | undefined;

  /** Takes ownership of a connected SEQPACKET socket: closed here if the channel cannot be made. */
  constructor(
    sock: number,
    options: FdChannelOptions = {},
    readonly peer?: PeerCredentials,
  ) {
    this.#native = options.native ?? loadAddon();
    this.#sock = sock;
    this.#ref = options.ref ?? false;
    try {
      this.#watch = startWatch(this.#native, sock, (revents) => this.#ready(revents));
    } catch (err) {
      this.#native.fdClose(sock);
      throw new DescriptorError('SMCUDA_FD_CHANNEL', `cannot watch the descriptor channel: ${(err as Error).message}`, { cause: err });
    }
  }

  /** Two connected channels in this process (tests; in-process peers). */
  static pair(options: FdChannelOptions = {}): [FdChannel, FdChannel] {
    const native = options.native ?? loadAddon();
    const [a, b] = native.fdSocketPair();
    let first: FdChannel;
    try {
      first = new FdChannel(a, { ...options, native });
    } catch (err) {
      native.fdClose(b);
      throw err;
    }
    try {
      return [first, new FdChannel(b, { ...options, native })];
    } catch (err) {
      first.close();
      throw err;
    }
  }

  /**
   * Connects to a listener's path, checks who listens there (uid policy; and
   * `listenerPid`: the process that authenticated on the control channel,
   * as the kernel reports it) and only then presents `token` (agreed on the
   * authenticated control channel). Another process listening at the path
   * (an impostor that moved the real socket aside) gets no byte.
   */
  static async connect(
    path: string,
    token: Uint8Array,
    options: FdChannelOptions & { peerUids?: PeerUidPolicy; label?: string; listenerPid?: number; backlogRetryMs?: number } = {},
  ): Promise<FdChannel> {
    if (!(token instanceof Uint8Array) || token.byteLength !== FD_TOKEN_BYTES) throw new ArgumentTypeError(`token must be ${FD_TOKEN_BYTES} bytes`);
    const native = options.native ?? loadAddon();
    const label = options.label ?? 'smcuda';
    let sock = -1;
    const giveUpAt = Date.now() + (options.backlogRetryMs ?? BACKLOG_RETRY_MS);
    for (let wait = 1; sock < 0; wait = Math.min(wait * 2, 32)) {
      try {
        sock = native.fdConnect(path);
      } catch (err) {
        // A full backlog says EAGAIN for Unix sockets: the listener is busy (or flooded), not gone.
        if (errnoCode(err) === 'EAGAIN' && Date.now() < giveUpAt) {
          await new Promise((r) => setTimeout(r, wait));
          continue;
        }
        throw new DescriptorError('SMCUDA_FD_CHANNEL', `${label}: cannot connect the descriptor channel at ${path}: ${(err as Error).message}`, { cause: err });
      }
    }
    let cred: PeerCredentials;
    try {
      cred = native.peerCredentials(sock);
      checkUid(cred, options.peerUids ?? 'same', label);
      if (options.listenerPid !== undefined && cred.pid !== options.listenerPid) {
        throw new AccessDeniedError(
          `${label}: the descriptor socket ${path} is served by pid ${cred.pid}, not by pid ${options.listenerPid} that authenticated on the control channel: refused, nothing sent`,
          'SMCUDA_PEER_PID',
        );
      }
    } catch (err) {
      native.fdClose(sock);
      throw err;
    }
    const channel = new FdChannel(sock, { ...options, native }, cred); // closes sock itself on failure
    try {
      await channel.send(undefined, Buffer.concat([TOKEN_MAGIC, token]));
    } catch (err) {
      channel.close();
      throw err;
    }
    return channel;
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** Starts delivering messages to `handlers` (messages wait in the kernel until then). */
  start(handlers: FdChannelHandlers): void {
    if (this.#closed) throw new ClosedError('the descriptor channel is closed');
    this.#handlers = handlers;
    this.#onHangup = undefined;
    this.#arm();
    // Messages that came before the watch was armed are read on the next turn.
    setImmediate(() => {
      if (this.#handlers === handlers) this.#drain();
    });
  }

  /**
   * Stops delivering messages; they wait in the kernel until `start` again.
   * `onHangup`: while paused, the peer hanging up closes the channel at once
   * and calls it (a listener's connection parked before admission); without
   * it, what the peer sent before hanging up still waits for `start`.
   */
  pause(onHangup?: () => void): void {
    this.#handlers = undefined;
    this.#onHangup = onHangup;
    this.#arm();
  }

  /**
   * Sends `meta` (1..FD_MESSAGE_MAX bytes) with `fd` (or none). Resolves once
   * the kernel has the message (the peer then holds its own duplicate of the
   * descriptor); `fd` stays the caller's.
   */
  send(fd: number | undefined, meta: Uint8Array): Promise<void> {
    if (fd !== undefined && (!Number.isInteger(fd) || fd < 0 || fd > 0x7fffffff)) {
      return Promise.reject(new ArgumentRangeError(`fd must be a non-negative int32 or undefined, got ${String(fd)}`));
    }
    if (!(meta instanceof Uint8Array) || meta.byteLength < 1 || meta.byteLength > FD_MESSAGE_MAX) {
      return Promise.reject(new ArgumentRangeError(`meta must be 1..${FD_MESSAGE_MAX} bytes`));
    }
    if (this.#closed) return Promise.reject(new ClosedError('the descriptor channel is closed'));
    return new Promise<void>((resolve, reject) => {
      this.#queue.push({ fd: fd ?? -1, meta: meta.slice(), resolve, reject });
      if (this.#queue.length === 1) this.#flush();
    });
  }

  /** Reads now what waits in the kernel, if started (a listener's last look before it evicts a connection). */
  readNow(): void {
    if (!this.#closed && this.#handlers) this.#drain();
  }

  /** Closes the socket; pending sends reject with ClosedError. Idempotent. */
  close(): void {
    this.#shutdown(undefined, false);
  }

  // -- internals --------------------------------------------------------------------

  #ready(revents: number): void {
    if (this.#closed) return;
    if (!this.#handlers && this.#onHangup && revents & (POLLRDHUP | POLLHUP | POLLERR)) {
      const told = this.#onHangup;
      this.#shutdown(new PeerLostError("the descriptor channel's peer hung up"), false);
      told();
      return;
    }
    if (revents & POLLOUT || revents & ~(POLLIN | POLLOUT)) this.#flush();
    if (this.#closed) return;
    if (this.#handlers) this.#drain();
    if (!this.#closed) this.#arm();
  }

  #arm(): void {
    if (this.#closed) return;
    const events = (this.#handlers ? POLLIN : this.#onHangup ? POLLRDHUP : 0) | (this.#queue.length > 0 ? POLLOUT : 0);
    this.#native.fdWatchArm(this.#watch, events, this.#queue.length > 0 || (this.#ref && this.#handlers !== undefined));
  }

  #flush(): void {
    while (this.#queue.length > 0 && !this.#closed) {
      const next = this.#queue[0]!;
      let sent: boolean;
      try {
        const buf = next.meta.buffer as ArrayBuffer;
        sent = this.#native.fdSend(this.#sock, next.fd, buf, next.meta.byteOffset, next.meta.byteLength);
      } catch (err) {
        const code = errnoCode(err);
        const lost = code === 'EPIPE' || code === 'ECONNRESET' || code === 'ENOTCONN';
        this.#shutdown(
          lost
            ? new PeerLostError(`the descriptor channel's peer went away (${code})`, { cause: err })
            : new DescriptorError('SMCUDA_FD_CHANNEL', `sending on the descriptor channel failed: ${(err as Error).message}`, { cause: err }),
          true,
        );
        return;
      }
      if (!sent) {
        this.#arm(); // wait for room
        return;
      }
      this.#queue.shift();
      next.resolve();
    }
  }

  #drain(): void {
    while (!this.#closed && this.#handlers) {
      let r;
      try {
        r = this.#native.fdRecv(this.#sock, this.#buffer);
      } catch (err) {
        const code = errnoCode(err);
        this.#shutdown(
          code === 'ECONNRESET'
            ? new PeerLostError("the descriptor channel's peer went away (ECONNRESET)", { cause: err })
            : new DescriptorError('SMCUDA_FD_CHANNEL', `receiving on the descriptor channel failed: ${(err as Error).message}`, { cause: err }),
          true,
        );
        return;
      }
      if (r === null) return;
      if (r.bytes === 0 && r.fd < 0 && !r.dropped) {
        this.#shutdown(new PeerLostError("the descriptor channel's peer closed it"), true);
        return;
      }
      if (r.dropped && r.fd >= 0) {
        // Part of the descriptors came, part were dropped: not something smcuda sends.
        this.#native.fdClose(r.fd);
        r.extra = 1;
      }
      if (r.truncated || r.extra > 0) {
        // The addon closed every descriptor of such a message already.
        this.#shutdown(
          new DescriptorError(
            'SMCUDA_FD_CHANNEL',
            r.truncated ? `the peer sent a message longer than ${FD_MESSAGE_MAX} bytes` : `the peer sent ${r.extra + 1} descriptors in one message`,
          ),
          true,
        );
        return;
      }
      const meta = new Uint8Array(this.#buffer.slice(0, r.bytes));
      const msg: FdMessage = { meta, fd: r.fd >= 0 ? r.fd : undefined };
      if (r.dropped) {
        msg.lost = new DescriptorError(
          'SMCUDA_FD_EMFILE',
          'a descriptor from the peer was dropped: this process has no free descriptor slot (EMFILE). Raise `ulimit -n` or hold fewer imports.',
          { meta },
        );
      }
      try {
        this.#handlers!.message(msg);
      } catch (err) {
        // The handler owns the descriptor from the call on; its failure is the channel's failure.
        this.#shutdown(
          err instanceof SmcudaError ? err : new DescriptorError('SMCUDA_FD_CHANNEL', `the message handler failed: ${(err as Error).message}`, { cause: err }),
          true,
        );
        return;
      }
    }
  }

  #shutdown(err: Error | undefined, notify: boolean): void {
    if (this.#closed) return;
    this.#closed = true;
    stopWatch(this.#native, this.#watch);
    try {
      this.#native.fdClose(this.#sock);
    } catch {
      // closed already
    }
    this.#sock = -1;
    const reason = err ?? new ClosedError('the descriptor channel was closed');
    for (const p of this.#queue.splice(0)) p.reject(reason);
    if (notify) this.#handlers?.close?.(err);
    else this.#handlers?.close?.(undefined);
  }
}

/**
 * The listening side: a SEQPACKET socket at `path` (mode 0600; put it beside
 * the control socket, in the same private directory). Each connection is
 * admitted when its peer's uid passes the policy and its first message is a
 * token handed to `expect` (from the pid given there); anything else is
 * closed. Connections waiting for admission cost no thread (the addon's one
 * readiness loop), are at most `maxUnadmitted` (a new one evicts the
 * oldest of the process holding the most, after one last read of it), and
 * are closed as soon as their client hangs up.
 */
export class FdListener {
  readonly #native: FdNative;
  #fd: number;
  readonly #watch: object;
  readonly #expected = new Map<string, { resolve: (c: FdChannel) => void; reject: (e: Error) => void; timer: NodeJS.Timeout; pid: number | undefined }>();
  /** Connections accepted and not yet admitted, oldest first, with their admission timers (at most maxUnadmitted). */
  readonly #unadmitted = new Map<FdChannel, NodeJS.Timeout>();
  /** Connections that presented a well-formed token before expect() was called with it, by token (hex). */
  readonly #early = new Map<string, { channel: FdChannel; admit: () => void }>();
  #closed = false;

  constructor(
    readonly path: string,
    private readonly options: FdChannelOptions & {
      peerUids?: PeerUidPolicy;
      label?: string;
      /** Told of every connection refused (wrong uid, wrong or no token) and of failed accepts. */
      onRefused?: (err: Error) => void;
      /** A connection that presents no token within this is closed (default 10 s). */
      admissionTimeoutMs?: number;
      /**
       * Connections not yet admitted kept at most (default 64: that many ranks
       * may connect at once, each token parked until this side has checked
       * its PROOF); a new one past it evicts the oldest of the process that
       * holds the most (closed, refused), so a flood of token-less
       * connections cannot hold the listener's descriptors, nor evict
       * another process's pending connection while it holds more.
       */
      maxUnadmitted?: number;
    } = {},
  ) {
    this.#native = options.native ?? loadAddon();
    this.#fd = this.#native.fdListen(path);
    this.#watch = startWatch(this.#native, this.#fd, () => this.#accept());
    this.#native.fdWatchArm(this.#watch, POLLIN, false);
  }

  /**
   * Resolves with the connection that presents `token` (timeoutMs: then
   * DescriptorError). `peerPid`: it must come from this process (SO_PEERCRED),
   * the one that authenticated on the control channel; else AccessDeniedError.
   */
  expect(token: Uint8Array, timeoutMs = 10_000, peerPid?: number): Promise<FdChannel> {
    if (!(token instanceof Uint8Array) || token.byteLength !== FD_TOKEN_BYTES)
      return Promise.reject(new ArgumentTypeError(`token must be ${FD_TOKEN_BYTES} bytes`));
    if (this.#closed) return Promise.reject(new ClosedError('the descriptor listener is closed'));
    const key = Buffer.from(token).toString('hex');
    const early = this.#early.get(key);
    if (early !== undefined) {
      // It presented this token before we expected it (parked, paused): admit it now.
      this.#early.delete(key);
      this.#unadmitted.delete(early.channel);
      early.admit();
      const wrong = this.#wrongPid(early.channel, peerPid);
      if (wrong) return Promise.reject(wrong);
      return Promise.resolve(early.channel);
    }
    return new Promise<FdChannel>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#expected.delete(key);
        reject(new DescriptorError('SMCUDA_FD_CHANNEL', `no descriptor connection presented the expected token within ${timeoutMs} ms`));
      }, timeoutMs);
      this.#expected.set(key, { resolve, reject, timer, pid: peerPid });
    });
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    stopWatch(this.#native, this.#watch);
    try {
      this.#native.fdClose(this.#fd);
    } catch {
      // closed already
    }
    this.#fd = -1;
    for (const [c, timer] of this.#unadmitted) {
      clearTimeout(timer);
      c.close();
    }
    this.#unadmitted.clear();
    this.#early.clear();
    for (const w of this.#expected.values()) {
      clearTimeout(w.timer);
      w.reject(new ClosedError('the descriptor listener was closed'));
    }
    this.#expected.clear();
  }

  /** The connection is not from `pid`: closed, refused, and the error to reject with. */
  #wrongPid(channel: FdChannel, pid: number | undefined): Error | undefined {
    if (pid === undefined || channel.peer?.pid === pid) return undefined;
    channel.close();
    const err = new AccessDeniedError(
      `${this.options.label ?? 'smcuda'}: a descriptor connection from pid ${channel.peer?.pid} presented the token of pid ${pid}: refused`,
      'SMCUDA_PEER_PID',
    );
    this.#refuse(err);
    return err;
  }

  /**
   * Which connection not yet admitted goes to make room for one from
   * `newPid`: the oldest of the process that holds the most of them (the new
   * one counted), so a flooding process evicts its own and never an honest
   * peer's one pending connection; among equals, the oldest overall.
   */
  #victim(newPid: number): FdChannel {
    const count = new Map<number | undefined, number>([[newPid, 1]]);
    for (const c of this.#unadmitted.keys()) count.set(c.peer?.pid, (count.get(c.peer?.pid) ?? 0) + 1);
    let victim: FdChannel | undefined;
    let most = 0;
    for (const c of this.#unadmitted.keys()) {
      const n = count.get(c.peer?.pid)!;
      if (n > most) [victim, most] = [c, n]; // oldest first: ties keep the older
    }
    return victim!;
  }

  #refuse(err: Error): void {
    this.options.onRefused?.(err);
  }

  #accept(): void {
    if (this.#closed) return;
    // A batch per wake-up: a process connecting as fast as it can would otherwise keep this loop from
    // ever seeing EAGAIN, and starve the event loop (the control sockets' handshakes timed out under a flood).
    for (let n = 0; n < ACCEPT_BATCH; n++) {
      let sock: number | null;
      try {
        sock = this.#native.fdAccept(this.#fd);
      } catch (err) {
        // EMFILE/ENFILE leave the connection in the backlog, still readable:
        // try again a little later rather than spin on it.
        this.#refuse(err as Error);
        setTimeout(() => {
          if (!this.#closed) this.#native.fdWatchArm(this.#watch, POLLIN, false);
        }, ACCEPT_RETRY_MS).unref();
        return;
      }
      if (sock === null) break;
      this.#admit(sock);
    }
    if (!this.#closed) this.#native.fdWatchArm(this.#watch, POLLIN, false);
  }

  /** Closes a connection not (yet) admitted, forgetting it; `why`: reported as refused. */
  #drop(channel: FdChannel, why?: Error): void {
    const timer = this.#unadmitted.get(channel);
    if (timer !== undefined) clearTimeout(timer);
    this.#unadmitted.delete(channel);
    for (const [k, e] of this.#early) if (e.channel === channel) this.#early.delete(k);
    channel.close();
    if (why) this.#refuse(why);
  }

  #admit(sock: number): void {
    const label = this.options.label ?? 'smcuda';
    let channel: FdChannel;
    let cred: PeerCredentials;
    try {
      cred = this.#native.peerCredentials(sock);
      checkUid(cred, this.options.peerUids ?? 'same', label);
    } catch (err) {
      this.#native.fdClose(sock);
      this.#refuse(err as Error);
      return;
    }
    try {
      channel = new FdChannel(sock, { ...this.options, native: this.#native }, cred); // closes sock on failure
    } catch (err) {
      this.#refuse(err as Error);
      return;
    }
    const max = this.options.maxUnadmitted ?? MAX_UNADMITTED;
    while (this.#unadmitted.size >= max) {
      const victim = this.#victim(cred.pid);
      victim.readNow(); // an honest connector sent its token right after connecting: admit it rather than evict it
      if (!this.#unadmitted.has(victim) || this.#unadmitted.size < max) continue;
      this.#drop(
        victim,
        new AccessDeniedError(
          `${label}: closed a descriptor connection from pid ${victim.peer?.pid} not yet admitted: ${max} were waiting for admission, a newer one came`,
        ),
      );
    }
    let admitted = false;
    const limit = this.options.admissionTimeoutMs ?? ADMISSION_TIMEOUT_MS;
    const timer = setTimeout(() => {
      if (admitted || channel.closed) return;
      let parked = false;
      for (const e of this.#early.values()) if (e.channel === channel) parked = true;
      const what = parked ? 'presented a token nobody expected' : 'presented no token';
      this.#drop(channel, new AccessDeniedError(`${label}: closed a descriptor connection from pid ${channel.peer?.pid} that ${what} within ${limit} ms`));
    }, limit);
    timer.unref();
    this.#unadmitted.set(channel, timer);
    channel.start({
      message: (msg) => {
        if (admitted) return; // not reached: the handler is replaced on admission
        if (msg.fd !== undefined) this.#native.fdClose(msg.fd); // a descriptor before admission is refused
        const m = Buffer.from(msg.meta);
        const ok = m.byteLength === TOKEN_MAGIC.byteLength + FD_TOKEN_BYTES && m.subarray(0, TOKEN_MAGIC.byteLength).equals(TOKEN_MAGIC);
        const key = ok ? m.subarray(TOKEN_MAGIC.byteLength).toString('hex') : '';
        const waiter = ok ? this.#expected.get(key) : undefined;
        if (ok && !waiter) {
          // A well-formed token nobody expects yet: the connecting side may finish
          // its handshake before this side calls expect(). Park it (paused: what
          // follows waits in the kernel) until expect(), the admission timeout,
          // eviction, or the client hanging up (closed at once).
          if (this.#early.has(key)) {
            return this.#drop(
              channel,
              new AccessDeniedError(`${label}: refused a descriptor connection from pid ${channel.peer?.pid}: its token is parked already`),
            );
          }
          channel.pause(() => this.#drop(channel));
          this.#early.set(key, {
            channel,
            admit: () => {
              admitted = true;
              clearTimeout(timer);
              channel.pause(); // its new owner's now: a hang-up no longer closes it before start()
            },
          });
          return;
        }
        this.#unadmitted.delete(channel);
        clearTimeout(timer);
        if (!waiter || !timingSafeEqual(Buffer.from(key, 'hex'), m.subarray(TOKEN_MAGIC.byteLength))) {
          channel.close();
          this.#refuse(
            new AccessDeniedError(`${label}: refused a descriptor connection from pid ${channel.peer?.pid}: its first message is not an expected token`),
          );
          return;
        }
        admitted = true;
        this.#expected.delete(key);
        clearTimeout(waiter.timer);
        const wrong = this.#wrongPid(channel, waiter.pid);
        if (wrong) return waiter.reject(wrong);
        channel.pause(); // what follows the token waits in the kernel until the new owner calls start()
        waiter.resolve(channel);
      },
      close: () => {
        // The client went before admission (EOF, reset): forget it at once.
        if (!admitted) this.#drop(channel);
      },
    });
  }
}
