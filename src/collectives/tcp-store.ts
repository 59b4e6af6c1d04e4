/**
 * A rank's connection to the TCP store of a rendezvous across machines (as
 * torch's TCPStore): `TcpStore.create({ rank })` serves the store on rank 0
 * (tcp-store-server.ts) at MASTER_ADDR/MASTER_PORT or
 * SMCUDA_RENDEZVOUS=tcp://host:port, and connects every rank to it, rank 0
 * included. Both sides prove the job token (never sent) before anything
 * else: a rank does not take NCCL's unique id from a store that cannot.
 *
 * Every request has a timeout; a store that does not answer in time is
 * SMCUDA_STORE_TIMEOUT, a connection that closes (rank 0 gone) fails every
 * request in flight and after with SMCUDA_STORE_LOST; a store that does
 * not listen yet is tried again until the timeout, as ranks start in any order.
 */
import { randomBytes } from 'node:crypto';
import { connect as netConnect, type Socket } from 'node:net';
import { STORE_PROOF_BYTES, storeProof, storeProofMatches } from '../auth/store-proof.js';
import { type Env, envCommunicator, envStoreAddress, type StoreAddress } from '../env.js';
import { ArgumentRangeError, ArgumentTypeError, BadTokenError, ConfigError, ProtocolError, StoreError } from '../errors.js';
import {
  encodeFrame,
  FRAME_HEADER_BYTES,
  i64,
  keyBytes,
  PayloadReader,
  readHeader,
  SERVER_HELLO_BYTES,
  SERVER_PROOF_BYTES,
  STORE_NONCE_BYTES,
  STORE_VERSION,
  StoreFrame,
  u32,
  u8,
  valueBytes,
} from './tcp-store-frames.js';
import { type TcpStoreLimits, TcpStoreServer } from './tcp-store-server.js';

/** A request's timeout, a wait's included, and how long connecting may take, by default. */
export const STORE_TIMEOUT_MS = 300_000;
/** A reply larger than this is not the store's (values are bounded far below). */
const MAX_REPLY_BYTES = 1 << 30;
/** What a wait's reply may take beyond the wait itself before the rank stops waiting for it. */
const WAIT_GRACE_MS = 2000;

export interface TcpStoreOptions {
  /** The job token, the same on every rank. */
  token: string;
  /** Default timeout of each request and of connecting. Default STORE_TIMEOUT_MS. */
  timeoutMs?: number;
}

interface Pending {
  resolve: (frame: { type: StoreFrame; payload: PayloadReader }) => void;
  reject: (err: Error) => void;
  timer: NodeJS.Timeout;
}

function checkTimeout(name: string, v: unknown): number {
  if (typeof v !== 'number' || !Number.isInteger(v)) throw new ArgumentTypeError(`${name} must be an integer number of ms, got ${typeof v}`);
  if (v < 0 || v > 0xffffffff) throw new ArgumentRangeError(`${name} must be from 0 to 2^32-1 ms, got ${v}`);
  return v;
}

function checkKey(key: unknown): string {
  if (typeof key !== 'string' || key === '') throw new ArgumentTypeError(`a store key must be a non-empty string, got ${JSON.stringify(key)}`);
  if (Buffer.byteLength(key, 'utf8') > 0xffff) throw new ArgumentRangeError('a store key must be at most 65535 bytes of UTF-8');
  return key;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Why one connection attempt failed, and whether another may succeed. */
class AttemptError extends Error {
  constructor(
    message: string,
    readonly retry: boolean,
    readonly error?: Error,
  ) {
    super(message);
  }
}

/** One connection attempt: the handshake, to an authenticated socket and what it already read past it. */
function attempt(address: { host: string; port: number }, token: string, timeoutMs: number): Promise<{ socket: Socket; rest: Buffer }> {
  const where = `${address.host}:${address.port}`;
  return new Promise((resolve, reject) => {
    const socket = netConnect({ host: address.host, port: address.port, noDelay: true });
    const nonce = new Uint8Array(randomBytes(STORE_NONCE_BYTES));
    let buf = Buffer.alloc(0);
    let storeNonce: Buffer | undefined;
    let done = false;
    const fail = (err: AttemptError) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      socket.destroy();
      reject(err);
    };
    const timer = setTimeout(() => fail(new AttemptError(`no answer from ${where} within ${timeoutMs} ms`, true)), timeoutMs);
    const onError = (e: Error) => fail(new AttemptError(`${where}: ${e.message}`, true));
    // Closed before the handshake: not listening yet, or over its connection limit for now.
    const onClose = () => fail(new AttemptError(`${where} closed the connection during the handshake`, true));
    const onData = (chunk: Buffer) => {
      if (done) return;
      buf = Buffer.concat([buf, chunk]);
      const h = readHeader(buf);
      if (!h) return;
      if (!storeNonce) {
        if (h.type !== StoreFrame.SERVER_HELLO || h.total !== SERVER_HELLO_BYTES)
          return fail(
            new AttemptError(
              '',
              false,
              new ProtocolError(`the service at ${where} is not an smcuda TCP store (its first frame is not the store's HELLO): check MASTER_PORT`),
            ),
          );
        if (buf.byteLength < SERVER_HELLO_BYTES) return;
        const r = new PayloadReader(buf.subarray(FRAME_HEADER_BYTES, SERVER_HELLO_BYTES));
        const version = r.u8();
        if (version !== STORE_VERSION)
          return fail(
            new AttemptError(
              '',
              false,
              new ProtocolError(`the TCP store at ${where} speaks version ${version}, this rank ${STORE_VERSION}: run the same smcuda on every node`),
            ),
          );
        storeNonce = Buffer.from(r.bytes(STORE_NONCE_BYTES));
        buf = buf.subarray(SERVER_HELLO_BYTES);
        socket.write(encodeFrame(StoreFrame.CLIENT_HELLO, 0, [u8(STORE_VERSION), nonce, storeProof(token, STORE_VERSION, 'client', nonce, storeNonce)]));
        const next = readHeader(buf);
        if (!next) return;
      }
      const p = readHeader(buf)!;
      if (p.type === StoreFrame.AUTH_FAIL)
        return fail(
          new AttemptError(
            '',
            false,
            new BadTokenError(`the TCP store at ${where} refused this rank's proof of the job token: give every rank the same SMCUDA_TOKEN (or \`token\`)`),
          ),
        );
      if (p.type !== StoreFrame.SERVER_PROOF || p.total !== SERVER_PROOF_BYTES)
        return fail(new AttemptError('', false, new ProtocolError(`the TCP store at ${where} sent frame type ${p.type} where its proof goes`)));
      if (buf.byteLength < SERVER_PROOF_BYTES) return;
      const proof = buf.subarray(FRAME_HEADER_BYTES, FRAME_HEADER_BYTES + STORE_PROOF_BYTES);
      if (!storeProofMatches(token, STORE_VERSION, 'store', storeNonce, nonce, proof))
        return fail(
          new AttemptError(
            '',
            false,
            new BadTokenError(
              `the service at ${where} could not prove the job token: it is not this job's store (another job's on the same port?), or its token differs. Refused; give every rank the same SMCUDA_TOKEN`,
            ),
          ),
        );
      done = true;
      clearTimeout(timer);
      socket.off('error', onError).off('close', onClose).off('data', onData);
      resolve({ socket, rest: buf.subarray(SERVER_PROOF_BYTES) });
    };
    socket.on('error', onError).on('close', onClose).on('data', onData);
  });
}

export class TcpStore {
  readonly #socket: Socket;
  readonly #where: string;
  readonly #timeoutMs: number;
  readonly #pending = new Map<number, Pending>();
  #next = 1;
  #buf: Buffer;
  #lost: StoreError | undefined;
  /** The store this rank serves (rank 0 of create), closed with it. */
  readonly server: TcpStoreServer | undefined;

  private constructor(socket: Socket, rest: Buffer, where: string, timeoutMs: number, server?: TcpStoreServer) {
    this.#socket = socket;
    this.#where = where;
    this.#timeoutMs = timeoutMs;
    this.server = server;
    this.#buf = rest;
    socket.setKeepAlive(true, 5000);
    socket.on('data', (chunk: Buffer) => this.#receive(chunk));
    socket.on('error', () => {});
    socket.on('close', () =>
      this.#fail(
        new StoreError(
          'SMCUDA_STORE_LOST',
          `the connection to the TCP store at ${where} closed: rank 0 (which serves it) exited, or the network dropped. Look at rank 0's error; restart the job`,
        ),
      ),
    );
    if (rest.byteLength > 0) this.#receive(Buffer.alloc(0));
  }

  /**
   * Connects to the store at `address` and proves the job token, trying
   * again while it does not listen yet, until `timeoutMs`
   * (SMCUDA_STORE_TIMEOUT). A wrong token is a BadTokenError at once.
   */
  static async connect(address: { host: string; port: number }, o: TcpStoreOptions, server?: TcpStoreServer): Promise<TcpStore> {
    if (typeof o.token !== 'string' || o.token === '')
      throw new ConfigError('the TCP store needs the job token: set SMCUDA_TOKEN to the same secret on every node, or pass `token`');
    const timeoutMs = checkTimeout('timeoutMs', o.timeoutMs ?? STORE_TIMEOUT_MS);
    const where = `${address.host}:${address.port}`;
    const deadline = Date.now() + timeoutMs;
    let wait = 10;
    let last = '';
    for (;;) {
      const left = deadline - Date.now();
      if (left <= 0) break;
      try {
        const { socket, rest } = await attempt(address, o.token, left);
        return new TcpStore(socket, rest, where, timeoutMs, server);
      } catch (err) {
        if (!(err instanceof AttemptError)) throw err;
        if (!err.retry) throw err.error;
        last = err.message;
      }
      await sleep(Math.min(wait, Math.max(0, deadline - Date.now())));
      wait = Math.min(wait * 2, 1000);
    }
    throw new StoreError(
      'SMCUDA_STORE_TIMEOUT',
      `could not reach the TCP store at ${where} within ${timeoutMs} ms (last: ${last || 'no attempt'}): start rank 0, which serves it, and check MASTER_ADDR/MASTER_PORT (or SMCUDA_RENDEZVOUS) and the firewall from this node`,
    );
  }

  /**
   * The rendezvous store of a job: rank 0 serves it on the address's port
   * (every interface) and connects to it; every other rank connects to the
   * address. The address comes from SMCUDA_RENDEZVOUS=tcp://host:port or
   * MASTER_ADDR/MASTER_PORT unless given, the token from SMCUDA_TOKEN.
   */
  static async create(o: {
    rank: number;
    address?: { host: string; port: number };
    token?: string;
    timeoutMs?: number;
    limits?: Partial<TcpStoreLimits>;
    env?: Env;
  }): Promise<TcpStore> {
    if (!Number.isInteger(o.rank) || o.rank < 0) throw new ArgumentRangeError(`rank must be a non-negative integer, got ${o.rank}`);
    const address: { host: string; port: number } | StoreAddress | undefined = o.address ?? envStoreAddress(o.env);
    if (!address)
      throw new ConfigError('no rendezvous address for the TCP store: set MASTER_ADDR and MASTER_PORT (or SMCUDA_RENDEZVOUS=tcp://host:port) on every rank');
    const token = o.token ?? envCommunicator(o.env).token;
    if (!token) throw new ConfigError('the TCP store needs the job token: set SMCUDA_TOKEN to the same secret on every node, or pass `token`');
    if (o.rank !== 0) return TcpStore.connect(address, { token, timeoutMs: o.timeoutMs });
    const server = await TcpStoreServer.listen({ port: address.port, token, limits: o.limits });
    try {
      return await TcpStore.connect({ host: '127.0.0.1', port: server.port }, { token, timeoutMs: o.timeoutMs }, server);
    } catch (err) {
      await server.close();
      throw err;
    }
  }

  /** Sets `key` (a string is stored as UTF-8); waits on it complete. */
  async set(key: string, value: Uint8Array | string): Promise<void> {
    checkKey(key);
    if (typeof value !== 'string' && !(value instanceof Uint8Array)) throw new ArgumentTypeError('a store value must be a Uint8Array or a string');
    const v = typeof value === 'string' ? Buffer.from(value, 'utf8') : value;
    await this.#request(StoreFrame.SET, [keyBytes(key), ...valueBytes(v)], `set ${JSON.stringify(key)}`, this.#timeoutMs);
  }

  /** The value of `key`, waiting until some rank sets it (SMCUDA_STORE_TIMEOUT after `timeoutMs`). */
  async get(key: string, o: { timeoutMs?: number } = {}): Promise<Uint8Array> {
    checkKey(key);
    await this.wait([key], o);
    const r = await this.#request(StoreFrame.GET, [keyBytes(key)], `get ${JSON.stringify(key)}`, this.#timeoutMs);
    const present = r.payload.u8();
    const value = r.payload.value();
    if (!present) throw new ProtocolError(`the TCP store at ${this.#where} lost ${JSON.stringify(key)} after saying it was set`);
    return new Uint8Array(value);
  }

  /** Adds `delta` to the counter `key` (0 when unset) and returns the sum: every rank's add sees a distinct one. */
  async add(key: string, delta: number | bigint): Promise<number> {
    checkKey(key);
    if (typeof delta === 'number' ? !Number.isSafeInteger(delta) : typeof delta !== 'bigint')
      throw new ArgumentTypeError(`delta must be a safe integer, got ${delta}`);
    const r = await this.#request(StoreFrame.ADD, [keyBytes(key), i64(BigInt(delta))], `add to ${JSON.stringify(key)}`, this.#timeoutMs);
    return Number(r.payload.i64());
  }

  /** Resolves when every key is set; SMCUDA_STORE_TIMEOUT if not within `timeoutMs` (default the store's). */
  async wait(keys: readonly string[], o: { timeoutMs?: number } = {}): Promise<void> {
    if (!Array.isArray(keys) || keys.length === 0) throw new ArgumentTypeError('keys must be a non-empty array of strings');
    for (const k of keys) checkKey(k);
    const t = checkTimeout('timeoutMs', o.timeoutMs ?? this.#timeoutMs);
    const what = `wait for ${keys.map((k) => JSON.stringify(k)).join(', ')}`;
    const r = await this.#request(StoreFrame.WAIT, [u32(t), u32(keys.length), ...keys.map(keyBytes)], what, t + WAIT_GRACE_MS);
    if (r.type === StoreFrame.TIMEOUT)
      throw new StoreError(
        'SMCUDA_STORE_TIMEOUT',
        `${what}: not set within ${t} ms. A rank that should set it has not started or has failed: check every rank runs`,
      );
  }

  /** Closes the connection, and the store if this rank serves it. */
  async close(): Promise<void> {
    this.#fail(new StoreError('SMCUDA_STORE_LOST', `the connection to the TCP store at ${this.#where} was closed by this rank`));
    this.#socket.destroy();
    await this.server?.close();
  }

  #request(type: StoreFrame, parts: Uint8Array[], what: string, timeoutMs: number): Promise<{ type: StoreFrame; payload: PayloadReader }> {
    if (this.#lost) return Promise.reject(this.#lost);
    const id = this.#next;
    this.#next = this.#next >= 0xffffffff ? 1 : this.#next + 1;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#pending.delete(id);
        reject(
          new StoreError(
            'SMCUDA_STORE_TIMEOUT',
            `${what}: the TCP store at ${this.#where} did not answer within ${timeoutMs} ms. Rank 0's machine may be gone or unreachable`,
          ),
        );
      }, timeoutMs);
      this.#pending.set(id, {
        timer,
        reject,
        resolve: (frame) => {
          if (frame.type === StoreFrame.ERROR) {
            frame.payload.u8();
            reject(new StoreError('SMCUDA_STORE_REFUSED', `${what}: the TCP store at ${this.#where} refused it: ${frame.payload.key()}`));
          } else resolve(frame);
        },
      });
      this.#socket.write(encodeFrame(type, id, parts));
    });
  }

  #receive(chunk: Buffer): void {
    this.#buf = this.#buf.byteLength === 0 ? chunk : Buffer.concat([this.#buf, chunk]);
    for (;;) {
      const h = readHeader(this.#buf);
      if (!h) return;
      if (h.total < FRAME_HEADER_BYTES || h.total > MAX_REPLY_BYTES || h.type < StoreFrame.OK || h.type > StoreFrame.ERROR) {
        this.#fail(new StoreError('SMCUDA_STORE_LOST', `the TCP store at ${this.#where} sent a malformed reply (type ${h.type}, ${h.total} bytes): closed`));
        this.#socket.destroy();
        return;
      }
      if (this.#buf.byteLength < h.total) return;
      const payload = new PayloadReader(this.#buf.subarray(FRAME_HEADER_BYTES, h.total));
      this.#buf = this.#buf.subarray(h.total);
      const p = this.#pending.get(h.id);
      if (!p) continue; // a reply to a request that timed out here
      this.#pending.delete(h.id);
      clearTimeout(p.timer);
      p.resolve({ type: h.type, payload });
    }
  }

  #fail(err: StoreError): void {
    if (this.#lost) return;
    this.#lost = err;
    for (const p of this.#pending.values()) {
      clearTimeout(p.timer);
      p.reject(err);
    }
    this.#pending.clear();
  }
}
