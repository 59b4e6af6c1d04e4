/**
 * The TCP store rank 0 serves for a rendezvous across machines, as torch's
 * TCPStore: keys set once and read by every rank (NCCL's unique id, each
 * rank's node), counters, and waits for keys with timeouts. Every
 * connection proves the job token before it may send anything but its
 * CLIENT_HELLO (src/auth/store-proof.ts), and what a connection can make
 * the store hold is bounded (TcpStoreLimits):
 *   - before it has proven the token: one fixed-size frame of 74 bytes, for
 *     at most authTimeoutMs, and at most maxUnauthenticated such
 *     connections at once (more are closed on accept);
 *   - after: frames of at most one key and one value of the limits (a
 *     larger frame is refused and its bytes dropped as they come, never
 *     held), a frame's bytes within frameTimeoutMs of its first, at most
 *     maxWaitsPerConnection waits, and all values together within
 *     maxStoreBytes;
 *   - at most maxConnections connections in all.
 * Frames: tcp-store-frames.ts.
 */
import { randomBytes } from 'node:crypto';
import { createServer, type Server, type Socket } from 'node:net';
import { storeProofMatches, storeProof } from '../auth/store-proof.js';
import { ConfigError } from '../errors.js';
import {
  CLIENT_HELLO_BYTES,
  encodeFrame,
  FRAME_HEADER_BYTES,
  i64,
  keyBytes,
  PayloadReader,
  readHeader,
  STORE_NONCE_BYTES,
  STORE_VERSION,
  StoreFrame,
  u8,
  valueBytes,
} from './tcp-store-frames.js';

export interface TcpStoreLimits {
  /** Connections held at once, authenticated or not. Default 1024. */
  maxConnections: number;
  /** Connections that have not yet proven the token, at once. Default 64. */
  maxUnauthenticated: number;
  /** Time a connection has to prove the token. Default 10 000 ms. */
  authTimeoutMs: number;
  /** Time from a frame's first byte to its last. Default 30 000 ms. */
  frameTimeoutMs: number;
  /** Bytes of a key (UTF-8). Default 1024. */
  maxKeyBytes: number;
  /** Bytes of a value. Default 1 MiB. */
  maxValueBytes: number;
  /** Bytes of every key and value together. Default 64 MiB. */
  maxStoreBytes: number;
  /** Waits one connection may have open. Default 64. */
  maxWaitsPerConnection: number;
  /** Keys one wait may name. Default 64. */
  maxWaitKeys: number;
}

export const DEFAULT_STORE_LIMITS: Readonly<TcpStoreLimits> = {
  maxConnections: 1024,
  maxUnauthenticated: 64,
  authTimeoutMs: 10_000,
  frameTimeoutMs: 30_000,
  maxKeyBytes: 1024,
  maxValueBytes: 1 << 20,
  maxStoreBytes: 64 << 20,
  maxWaitsPerConnection: 64,
  maxWaitKeys: 64,
};

/** ERROR's kind byte: the request was over a limit. */
export const STORE_ERROR_REFUSED = 1;

interface Waiter {
  conn: Conn;
  id: number;
  keys: string[];
  timer: NodeJS.Timeout;
}

interface Conn {
  socket: Socket;
  authenticated: boolean;
  nonce: Uint8Array;
  buf: Buffer;
  /** Bytes still to drop of a refused, oversized frame. */
  skip: number;
  /** Runs while a frame is partly in (or being dropped), or until the connection authenticates. */
  timer: NodeJS.Timeout | undefined;
  waits: Set<Waiter>;
}

export interface TcpStoreServerStats {
  connections: number;
  unauthenticated: number;
  keys: number;
  /** Bytes of keys and values held. */
  bytes: number;
  /** Connections closed for a bad or missing proof, a timeout, too many connections or a malformed frame. */
  closed: number;
  /** Requests refused over a limit. */
  refused: number;
}

export interface TcpStoreServerOptions {
  /** The port to listen on (0: any free one; `port` says which). */
  port: number;
  /** The address to listen on; default every interface. */
  host?: string;
  /** The job token every connection must prove. */
  token: string;
  limits?: Partial<TcpStoreLimits>;
}

const EMPTY = Buffer.alloc(0);

export class TcpStoreServer {
  readonly limits: Readonly<TcpStoreLimits>;
  readonly #server: Server;
  readonly #token: string;
  readonly #conns = new Set<Conn>();
  readonly #data = new Map<string, Buffer>();
  readonly #waiters = new Map<string, Set<Waiter>>();
  #bytes = 0;
  #closed = 0;
  #refused = 0;
  #maxFrame: number;

  private constructor(server: Server, token: string, limits: TcpStoreLimits) {
    this.#server = server;
    this.#token = token;
    this.limits = limits;
    this.#maxFrame = Math.max(
      FRAME_HEADER_BYTES + 2 + limits.maxKeyBytes + 4 + limits.maxValueBytes,
      FRAME_HEADER_BYTES + 8 + limits.maxWaitKeys * (2 + limits.maxKeyBytes),
    );
    server.on('connection', (s) => this.#accept(s));
  }

  /** Listens; a port in use or not allowed is a ConfigError that says so. */
  static async listen(o: TcpStoreServerOptions): Promise<TcpStoreServer> {
    if (typeof o.token !== 'string' || o.token === '')
      throw new ConfigError('the TCP store needs the job token: set SMCUDA_TOKEN to the same secret on every node, or pass `token`');
    const limits = { ...DEFAULT_STORE_LIMITS, ...o.limits };
    for (const [k, v] of Object.entries(limits)) {
      if (!Number.isSafeInteger(v) || v < 1) throw new ConfigError(`TCP store limit ${k} must be a positive integer, got ${v}`);
    }
    const server = createServer({ noDelay: true });
    const store = new TcpStoreServer(server, o.token, limits);
    await new Promise<void>((resolve, reject) => {
      const failed = (err: NodeJS.ErrnoException) =>
        reject(
          err.code === 'EADDRINUSE' || err.code === 'EACCES' || err.code === 'EADDRNOTAVAIL'
            ? new ConfigError(
                `the TCP store cannot listen on ${o.host ?? 'every interface'}, port ${o.port} (${err.code}): set MASTER_PORT (or SMCUDA_RENDEZVOUS) to a free port on rank 0's machine, the same on every rank`,
              )
            : err,
        );
      server.once('error', failed);
      server.listen({ port: o.port, host: o.host }, () => {
        server.off('error', failed);
        resolve();
      });
    });
    return store;
  }

  /** The port it listens on. */
  get port(): number {
    const a = this.#server.address();
    return typeof a === 'object' && a ? a.port : 0;
  }

  stats(): TcpStoreServerStats {
    let unauthenticated = 0;
    for (const c of this.#conns) if (!c.authenticated) unauthenticated++;
    return { connections: this.#conns.size, unauthenticated, keys: this.#data.size, bytes: this.#bytes, closed: this.#closed, refused: this.#refused };
  }

  /** Stops listening and closes every connection: their clients' requests fail with SMCUDA_STORE_LOST. */
  async close(): Promise<void> {
    const closed = new Promise<void>((r) => this.#server.close(() => r()));
    for (const c of [...this.#conns]) this.#drop(c, false);
    await closed;
  }

  #accept(socket: Socket): void {
    const unauthenticated = this.stats().unauthenticated;
    if (this.#conns.size >= this.limits.maxConnections || unauthenticated >= this.limits.maxUnauthenticated) {
      this.#closed++;
      socket.destroy();
      return;
    }
    socket.setKeepAlive(true, 5000);
    const conn: Conn = {
      socket,
      authenticated: false,
      nonce: new Uint8Array(randomBytes(STORE_NONCE_BYTES)),
      buf: EMPTY,
      skip: 0,
      timer: undefined,
      waits: new Set(),
    };
    this.#conns.add(conn);
    conn.timer = setTimeout(() => this.#drop(conn), this.limits.authTimeoutMs);
    socket.on('data', (chunk: Buffer) => this.#receive(conn, chunk));
    socket.on('error', () => this.#drop(conn, false));
    socket.on('close', () => this.#drop(conn, false));
    socket.write(encodeFrame(StoreFrame.SERVER_HELLO, 0, [u8(STORE_VERSION), conn.nonce]));
  }

  /** Forgets a connection; `counted`: it is closed for something it did. */
  #drop(conn: Conn, counted = true): void {
    if (!this.#conns.delete(conn)) return;
    if (counted) this.#closed++;
    clearTimeout(conn.timer);
    for (const w of conn.waits) this.#unwait(w);
    conn.buf = EMPTY;
    conn.socket.destroy();
  }

  #receive(conn: Conn, chunk: Buffer): void {
    if (!this.#conns.has(conn)) return;
    if (!conn.authenticated) return this.#hello(conn, chunk);
    let data = chunk;
    if (conn.skip > 0) {
      const n = Math.min(conn.skip, data.byteLength);
      conn.skip -= n;
      data = data.subarray(n);
      if (conn.skip > 0) return;
      clearTimeout(conn.timer);
      conn.timer = undefined;
    }
    conn.buf = conn.buf.byteLength === 0 ? data : Buffer.concat([conn.buf, data]);
    for (;;) {
      const h = readHeader(conn.buf);
      if (!h) break;
      if (h.total < FRAME_HEADER_BYTES) return this.#drop(conn);
      if (h.total > this.#maxFrame) {
        this.#refuse(
          conn,
          h.id,
          `a frame of ${h.total} bytes is over the store's limit of ${this.#maxFrame} (maxKeyBytes ${this.limits.maxKeyBytes}, maxValueBytes ${this.limits.maxValueBytes})`,
        );
        if (conn.buf.byteLength >= h.total) {
          conn.buf = conn.buf.subarray(h.total);
          continue;
        }
        conn.skip = h.total - conn.buf.byteLength;
        conn.buf = EMPTY;
        this.#frameTimer(conn, true);
        return;
      }
      if (conn.buf.byteLength < h.total) break;
      const frame = conn.buf.subarray(0, h.total);
      conn.buf = conn.buf.subarray(h.total);
      try {
        this.#request(conn, h.type, h.id, new PayloadReader(frame.subarray(FRAME_HEADER_BYTES)));
      } catch {
        return this.#drop(conn); // a malformed frame: nothing after it can be trusted
      }
      if (!this.#conns.has(conn)) return;
    }
    if (conn.buf.byteLength === 0) conn.buf = EMPTY; // let go of the chunk the last frame was in
    this.#frameTimer(conn, conn.buf.byteLength > 0);
  }

  /** A partial frame must be in within frameTimeoutMs (a connection that trickles bytes is closed). */
  #frameTimer(conn: Conn, partial: boolean): void {
    if (!partial) {
      clearTimeout(conn.timer);
      conn.timer = undefined;
    } else if (!conn.timer) {
      conn.timer = setTimeout(() => this.#drop(conn), this.limits.frameTimeoutMs);
    }
  }

  #hello(conn: Conn, chunk: Buffer): void {
    conn.buf = conn.buf.byteLength === 0 ? chunk : Buffer.concat([conn.buf, chunk]);
    // Refused as soon as its length or type is in: only a CLIENT_HELLO may come.
    const b = conn.buf;
    if (
      b.byteLength > CLIENT_HELLO_BYTES ||
      (b.byteLength >= 4 && b.readUInt32LE(0) + 4 !== CLIENT_HELLO_BYTES) ||
      (b.byteLength >= 5 && b[4] !== StoreFrame.CLIENT_HELLO)
    )
      return this.#drop(conn);
    if (conn.buf.byteLength < CLIENT_HELLO_BYTES) return;
    const r = new PayloadReader(conn.buf.subarray(FRAME_HEADER_BYTES));
    const version = r.u8();
    const nonce = r.bytes(STORE_NONCE_BYTES);
    const proof = r.bytes(32);
    conn.buf = EMPTY;
    const ok =
      version === STORE_VERSION &&
      !nonce.equals(conn.nonce) && // a reflected SERVER_HELLO
      storeProofMatches(this.#token, STORE_VERSION, 'client', nonce, conn.nonce, proof);
    if (!ok) {
      this.#closed++;
      this.#conns.delete(conn);
      clearTimeout(conn.timer);
      conn.socket.end(encodeFrame(StoreFrame.AUTH_FAIL, 0, [u8(version === STORE_VERSION ? 0 : 1)]));
      setTimeout(() => conn.socket.destroy(), 1000).unref();
      return;
    }
    conn.authenticated = true;
    clearTimeout(conn.timer);
    conn.timer = undefined;
    conn.socket.write(encodeFrame(StoreFrame.SERVER_PROOF, 0, [storeProof(this.#token, STORE_VERSION, 'store', conn.nonce, nonce)]));
  }

  #reply(conn: Conn, type: StoreFrame, id: number, parts: Uint8Array[] = []): void {
    if (this.#conns.has(conn)) conn.socket.write(encodeFrame(type, id, parts));
  }

  #refuse(conn: Conn, id: number, why: string): void {
    this.#refused++;
    this.#reply(conn, StoreFrame.ERROR, id, [u8(STORE_ERROR_REFUSED), keyBytes(why)]);
  }

  #checkKey(conn: Conn, id: number, key: string): boolean {
    const n = Buffer.byteLength(key, 'utf8');
    if (n <= this.limits.maxKeyBytes && n > 0) return true;
    this.#refuse(conn, id, `a key of ${n} bytes: keys are 1 to ${this.limits.maxKeyBytes} bytes`);
    return false;
  }

  #request(conn: Conn, type: number, id: number, r: PayloadReader): void {
    switch (type) {
      case StoreFrame.SET: {
        const key = r.key();
        const value = r.value();
        r.end();
        if (!this.#checkKey(conn, id, key)) return;
        if (value.byteLength > this.limits.maxValueBytes)
          return this.#refuse(
            conn,
            id,
            `a value of ${value.byteLength} bytes for ${JSON.stringify(key)}: values are at most ${this.limits.maxValueBytes} bytes`,
          );
        if (!this.#put(conn, id, key, Buffer.from(value))) return;
        return this.#reply(conn, StoreFrame.OK, id);
      }
      case StoreFrame.GET: {
        const key = r.key();
        r.end();
        const v = this.#data.get(key);
        return this.#reply(conn, StoreFrame.VALUE, id, [u8(v ? 1 : 0), ...valueBytes(v ?? EMPTY)]);
      }
      case StoreFrame.ADD: {
        const key = r.key();
        const delta = r.i64();
        r.end();
        if (!this.#checkKey(conn, id, key)) return;
        const old = this.#data.get(key)?.toString('utf8') ?? '0';
        if (!/^-?\d{1,19}$/.test(old)) return this.#refuse(conn, id, `${JSON.stringify(key)} holds a value that is not a counter`);
        const sum = BigInt(old) + delta;
        if (sum > 0x7fffffffffffffffn || sum < -0x8000000000000000n) return this.#refuse(conn, id, `${JSON.stringify(key)} would overflow 64 bits`);
        if (!this.#put(conn, id, key, Buffer.from(sum.toString(), 'utf8'))) return;
        return this.#reply(conn, StoreFrame.COUNT, id, [i64(sum)]);
      }
      case StoreFrame.WAIT: {
        const timeoutMs = r.u32();
        const n = r.u32();
        if (n > this.limits.maxWaitKeys) return this.#refuse(conn, id, `a wait for ${n} keys: at most ${this.limits.maxWaitKeys}`);
        const keys: string[] = [];
        for (let i = 0; i < n; i++) keys.push(r.key());
        r.end();
        if (keys.every((k) => this.#data.has(k))) return this.#reply(conn, StoreFrame.OK, id);
        if (conn.waits.size >= this.limits.maxWaitsPerConnection)
          return this.#refuse(conn, id, `more than ${this.limits.maxWaitsPerConnection} waits open on one connection`);
        const w: Waiter = { conn, id, keys, timer: setTimeout(() => (this.#unwait(w), this.#reply(conn, StoreFrame.TIMEOUT, id)), timeoutMs) };
        conn.waits.add(w);
        for (const k of keys) {
          let set = this.#waiters.get(k);
          if (!set) this.#waiters.set(k, (set = new Set()));
          set.add(w);
        }
        return;
      }
      default:
        throw new Error(`store frame type ${type} is not a request`);
    }
  }

  /** Stores a value within maxStoreBytes, and answers the waits it completes; false (refused) if over. */
  #put(conn: Conn, id: number, key: string, value: Buffer): boolean {
    const old = this.#data.get(key);
    const keyLen = Buffer.byteLength(key, 'utf8');
    const next = this.#bytes - (old ? keyLen + old.byteLength : 0) + keyLen + value.byteLength;
    if (next > this.limits.maxStoreBytes) {
      this.#refuse(conn, id, `the store holds ${this.#bytes} bytes and would hold ${next}, over its maxStoreBytes of ${this.limits.maxStoreBytes}`);
      return false;
    }
    this.#bytes = next;
    this.#data.set(key, value);
    for (const w of [...(this.#waiters.get(key) ?? [])]) {
      if (w.keys.every((k) => this.#data.has(k))) {
        this.#unwait(w);
        this.#reply(w.conn, StoreFrame.OK, w.id);
      }
    }
    return true;
  }

  #unwait(w: Waiter): void {
    clearTimeout(w.timer);
    w.conn.waits.delete(w);
    for (const k of w.keys) {
      const set = this.#waiters.get(k);
      set?.delete(w);
      if (set?.size === 0) this.#waiters.delete(k);
    }
  }
}
