/**
 * (Over 500 lines as one concept: the twin's set-up, frames, call exchange
 * and each call's host side work on the same links.)
 *
 * The inter-node engine's twin over host sockets (internode-engine.ts), for
 * CI on the simulated driver: correctness, call checks, failure and abort,
 * not speed. Device memory is read and written through the driver's copies
 * once the caller's stream has reached the call; reductions run on the host
 * with the kernels' TypeScript twin (src/kernels/sim/reduce.ts), so results
 * are those of the kernels.
 *
 * The engine's ranks (one per node) meet through the job's TCP store: each
 * listens on a port of its own and publishes it with a fresh secret under
 * `internode/<group>/<rank>`; a connecting rank proves that secret by HMAC
 * (the store proved the job token, so only the job's ranks read it). Every
 * call sends each peer one frame: the call's header (kind, count, dtype, op,
 * root: what must agree) and the data that peer needs; every rank compares
 * every peer's header with its own before it uses any data, so a mismatch
 * fails on every rank. A socket that closes without a goodbye is a lost
 * peer; an abort sends its reason to every peer before it closes.
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { createServer, connect as netConnect, type Server, type Socket } from 'node:net';
import { hostname } from 'node:os';
import type { DevicePtr, StreamHandle } from '../cuda/driver.js';
import { CallMismatchError, CommunicatorAbortedError, CommunicatorTimeoutError, ProtocolError } from '../errors.js';
import { DTYPE_BYTES, type DType } from '../kernels/dtypes.js';
import { divideInPlace, reduceInto } from '../kernels/sim/reduce.js';
import type { EngineCall, EngineOp, EngineOptions, InterNodeEngine } from './internode-engine.js';

export interface SocketEngineOptions extends EngineOptions {
  /** The host peers connect to (default: 127.0.0.1 where the store is on loopback, else this host's name). */
  host: string;
}

interface Header {
  t: 'call' | 'abort' | 'bye';
  seq?: number;
  kind?: string;
  count?: number;
  dtype?: string;
  op?: string;
  root?: number;
  avgOver?: number;
  check?: number;
  code?: string;
  message?: string;
  failedRank?: number;
}

interface Message {
  h: Header;
  data: Uint8Array;
}

const HELLO_BYTES = 4 + 32;
const MAX_HEADER_BYTES = 64 * 1024;
const MAX_DATA_BYTES = 1 << 30;

function proof(secret: Buffer, group: number, from: number, to: number): Buffer {
  return createHmac('sha256', secret).update(`smcuda-internode ${group} ${from}->${to}`).digest();
}

function frame(h: Header, data: Uint8Array = new Uint8Array(0)): Buffer {
  const json = Buffer.from(JSON.stringify(h), 'utf8');
  const head = Buffer.alloc(8);
  head.writeUInt32LE(json.byteLength, 0);
  head.writeUInt32LE(data.byteLength, 4);
  return Buffer.concat([head, json, data]);
}

/** One peer's connection: frames in, by call sequence number. */
class PeerLink {
  private buf: Buffer = Buffer.alloc(0);
  private readonly arrived = new Map<number, Message>();
  private readonly waiting = new Map<number, { resolve: (m: Message) => void; reject: (e: Error) => void }>();
  gone: Error | undefined;
  bye = false;

  constructor(
    readonly peer: number,
    readonly socket: Socket,
    private readonly onControl: (peer: number, h: Header) => void,
    private readonly onLost: (peer: number, why: string) => void,
  ) {
    socket.setNoDelay(true);
    socket.on('data', (chunk: Buffer) => this.receive(chunk));
    socket.on('error', () => {});
    socket.on('close', () => {
      if (!this.bye) this.onLost(peer, 'its connection closed');
    });
  }

  private receive(chunk: Buffer): void {
    this.buf = this.buf.byteLength === 0 ? chunk : Buffer.concat([this.buf, chunk]);
    while (this.buf.byteLength >= 8) {
      const jl = this.buf.readUInt32LE(0);
      const dl = this.buf.readUInt32LE(4);
      if (jl > MAX_HEADER_BYTES || dl > MAX_DATA_BYTES) {
        this.socket.destroy();
        this.onLost(this.peer, `it sent a frame of ${jl} + ${dl} bytes (not the engine's)`);
        return;
      }
      if (this.buf.byteLength < 8 + jl + dl) return;
      let h: Header;
      try {
        h = JSON.parse(this.buf.subarray(8, 8 + jl).toString('utf8')) as Header;
      } catch {
        this.socket.destroy();
        this.onLost(this.peer, 'it sent a frame that is not the engine’s');
        return;
      }
      const data = new Uint8Array(this.buf.subarray(8 + jl, 8 + jl + dl));
      this.buf = this.buf.subarray(8 + jl + dl);
      if (h.t !== 'call') {
        if (h.t === 'bye') this.bye = true;
        this.onControl(this.peer, h);
        continue;
      }
      const seq = h.seq ?? -1;
      const w = this.waiting.get(seq);
      if (w) {
        this.waiting.delete(seq);
        w.resolve({ h, data });
      } else this.arrived.set(seq, { h, data });
    }
  }

  next(seq: number): Promise<Message> {
    const m = this.arrived.get(seq);
    if (m) {
      this.arrived.delete(seq);
      return Promise.resolve(m);
    }
    if (this.gone) return Promise.reject(this.gone);
    return new Promise((resolve, reject) => this.waiting.set(seq, { resolve, reject }));
  }

  fail(err: Error): void {
    this.gone ??= err;
    for (const w of this.waiting.values()) w.reject(err);
    this.waiting.clear();
  }
}

export class SocketEngine implements InterNodeEngine {
  readonly kind = 'sockets' as const;
  readonly exactAvg = true;
  readonly rank: number;
  readonly size: number;
  private readonly links = new Map<number, PeerLink>();
  private seq = 0;
  private broken: Error | undefined;
  /** The abort frames went out (once). */
  private aborted = false;
  private readonly listeners: Array<(err: Error) => void> = [];
  private queue: Promise<unknown> = Promise.resolve();

  private constructor(
    private readonly o: SocketEngineOptions,
    private readonly server: Server,
  ) {
    this.rank = o.rank;
    this.size = o.size;
  }

  /** Listens, publishes its address, and connects to every other node's member of the group. */
  static async open(o: SocketEngineOptions): Promise<SocketEngine> {
    const secret = randomBytes(32);
    const server = createServer();
    const engine = new SocketEngine(o, server);
    const expected = new Set([...Array(o.size).keys()].filter((k) => k > o.rank));
    const accepted = new Promise<void>((resolve, reject) => {
      if (expected.size === 0) resolve();
      const timer = setTimeout(
        () =>
          reject(
            new CommunicatorTimeoutError(
              `the socket engine of group ${o.group} was not joined by nodes ${[...expected].join(', ')} within ${o.setupMs} ms: check that every node started`,
            ),
          ),
        o.setupMs,
      );
      timer.unref();
      server.on('connection', (s: Socket) => {
        let hello = Buffer.alloc(0);
        const authTimer = setTimeout(() => s.destroy(), o.setupMs);
        authTimer.unref();
        s.on('error', () => {});
        const onData = (chunk: Buffer) => {
          hello = Buffer.concat([hello, chunk]);
          if (hello.byteLength < HELLO_BYTES) return;
          s.off('data', onData);
          clearTimeout(authTimer);
          const from = hello.readUInt32LE(0);
          const ok = expected.has(from) && timingSafeEqual(hello.subarray(4, HELLO_BYTES), proof(secret, o.group, from, o.rank));
          if (!ok) {
            s.destroy();
            return;
          }
          expected.delete(from);
          engine.attach(from, s);
          const rest = hello.subarray(HELLO_BYTES);
          if (rest.byteLength > 0) s.emit('data', rest);
          if (expected.size === 0) {
            clearTimeout(timer);
            resolve();
          }
        };
        s.on('data', onData);
      });
    });
    accepted.catch(() => {});
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, resolve);
    });
    try {
      const port = (server.address() as { port: number }).port;
      await o.store.set(`internode/${o.group}/${o.rank}`, JSON.stringify({ host: o.host, port, secret: secret.toString('hex') }));
      for (let k = 0; k < o.rank; k++) {
        const v = JSON.parse(Buffer.from(await o.store.get(`internode/${o.group}/${k}`, { timeoutMs: o.setupMs })).toString('utf8')) as {
          host: string;
          port: number;
          secret: string;
        };
        const s = await new Promise<Socket>((resolve, reject) => {
          const sock = netConnect({ host: v.host, port: v.port }, () => resolve(sock));
          sock.once('error', reject);
        });
        const hello = Buffer.alloc(HELLO_BYTES);
        hello.writeUInt32LE(o.rank, 0);
        proof(Buffer.from(v.secret, 'hex'), o.group, o.rank, k).copy(hello, 4);
        s.write(hello);
        engine.attach(k, s);
      }
      await accepted;
      // Every peer is in: nothing more may connect.
      server.close();
    } catch (err) {
      engine.abort(err instanceof Error ? err : new Error(String(err)));
      throw err;
    }
    return engine;
  }

  private attach(peer: number, s: Socket): void {
    this.links.set(
      peer,
      new PeerLink(
        peer,
        s,
        (p, h) => this.onControl(p, h),
        (p, why) => this.lost(p, why),
      ),
    );
  }

  private onControl(peer: number, h: Header): void {
    if (h.t === 'abort') {
      const failed = typeof h.failedRank === 'number' ? h.failedRank : this.o.globalRank(peer);
      this.fail(
        new CommunicatorAbortedError(
          `rank ${failed} (node ${peer}) aborted: ${h.message ?? 'no reason given'}`,
          failed,
          typeof h.code === 'string' ? h.code : 'SMCUDA_ABORTED',
        ),
      );
    } else if (h.t === 'bye') {
      this.links
        .get(peer)
        ?.fail(
          new CommunicatorAbortedError(
            `rank ${this.o.globalRank(peer)} (node ${peer}) closed its communicator while this rank still calls: every rank must make the same calls before close()`,
            this.o.globalRank(peer),
            'SMCUDA_CLOSED',
          ),
        );
    }
  }

  private lost(peer: number, why: string): void {
    const failed = this.o.globalRank(peer);
    this.fail(
      new CommunicatorAbortedError(
        `rank ${failed} (node ${peer} of the inter-node engine) was lost: ${why}. Its process exited or its node is unreachable: look at its output`,
        failed,
        'SMCUDA_PEER_LOST',
      ),
    );
  }

  /** The first error breaks the engine: every call in flight and after fails with it. */
  private fail(err: Error): void {
    if (this.broken) return;
    this.broken = err;
    for (const l of this.links.values()) l.fail(err);
    for (const f of this.listeners) f(err);
  }

  onError(listener: (err: Error) => void): void {
    if (this.broken) listener(this.broken);
    else this.listeners.push(listener);
  }

  supports(_op: EngineOp, _dtype: DType): boolean {
    return true;
  }

  abort(reason: Error): void {
    this.fail(reason);
    if (this.aborted) return;
    this.aborted = true;
    // The cause travels: a peer's error says what failed here (CommunicatorAbortedError's causeCode, else the code).
    const cause = (reason as { causeCode?: unknown }).causeCode ?? (reason as { code?: unknown }).code;
    const failedRank = (reason as { failedRank?: unknown }).failedRank;
    const h: Header = {
      t: 'abort',
      code: typeof cause === 'string' ? cause : 'SMCUDA_ABORTED',
      message: reason.message,
      failedRank: typeof failedRank === 'number' ? failedRank : this.o.globalRank(this.rank),
    };
    for (const l of this.links.values()) {
      l.bye = true;
      l.socket.end(frame(h));
      setTimeout(() => l.socket.destroy(), 1000).unref();
    }
    this.server.close();
  }

  async close(): Promise<void> {
    await this.queue.catch(() => {});
    for (const l of this.links.values()) {
      l.bye = true;
      if (!this.broken) l.socket.end(frame({ t: 'bye' }));
      else l.socket.destroy();
    }
    // Closing is no failure: later calls fail, and nobody is told (the hierarchy would abort the node).
    if (!this.broken) {
      this.broken = new CommunicatorAbortedError('the inter-node engine was closed by this rank', this.o.globalRank(this.rank), 'SMCUDA_CLOSED');
      for (const l of this.links.values()) l.fail(this.broken);
    }
    await new Promise<void>((r) => this.server.close(() => r()));
  }

  // ---- calls -----------------------------------------------------------------------

  /**
   * One call: every peer gets the header and `dataFor(peer)`; every peer's
   * header must equal this rank's (else CallMismatchError here and there);
   * `finish` gets the peers' data by node (this rank's own slot empty).
   */
  private exchange(
    h: Omit<Header, 't' | 'seq'>,
    call: { stream: StreamHandle; timeoutMs?: number },
    dataFor: (peer: number) => Uint8Array,
    finish: (got: Uint8Array[]) => void,
  ): Promise<void> {
    const limitMs = call.timeoutMs ?? this.o.timeoutMs;
    const run = async () => {
      if (this.broken) throw this.broken;
      const seq = this.seq++;
      await this.o.reached(call.stream);
      const mine: Header = { t: 'call', seq, ...h };
      for (const [peer, l] of this.links) l.socket.write(frame(mine, dataFor(peer)));
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(new CommunicatorTimeoutError(`${h.kind} between nodes did not complete within ${limitMs} ms: a node stopped calling`)),
          limitMs,
        );
      });
      try {
        const got: Uint8Array[] = [];
        for (const [peer, l] of this.links) {
          const m = await Promise.race([l.next(seq), timeout]);
          const theirs = m.h;
          const fields = (['kind', 'count', 'dtype', 'op', 'root', 'avgOver', 'check'] as const)
            .filter((f) => theirs[f] !== mine[f])
            // Named as the node's call check names them (docs/errors.md, SMCUDA_CALL_MISMATCH).
            .map((f) => ({ kind: 'collective', avgOver: 'op', check: 'counts' })[f as string] ?? f);
          if (fields.length > 0) {
            const show = (x: Header) => `${x.kind} ${x.count} ${x.dtype}${x.op ? ` ${x.op}` : ''}${x.root !== undefined ? ` root ${x.root}` : ''}`;
            const me = this.o.globalRank(this.rank);
            const other = this.o.globalRank(peer);
            throw new CallMismatchError(
              `call ${seq} between nodes differs in ${fields.join(', ')}: rank ${me} (node ${this.rank}) called ${show(mine)}, rank ${other} (node ${peer}) called ${show(theirs)}. Every rank must make the same calls with the same counts, dtypes, ops and roots`,
              me,
              seq,
              [me, other],
              fields,
            );
          }
          got[peer] = m.data;
        }
        got[this.rank] = new Uint8Array(0);
        finish(got);
      } finally {
        clearTimeout(timer);
      }
    };
    const p = this.queue.then(run, run);
    this.queue = p.catch(() => {});
    return p.catch((err: unknown) => {
      const e = err instanceof Error ? err : new Error(String(err));
      if (!this.broken) this.abort(e);
      throw this.broken ?? e;
    });
  }

  private read(ptr: DevicePtr, bytes: number): Uint8Array {
    const b = new Uint8Array(bytes);
    if (bytes > 0) this.o.driver.memcpyDtoH(b, ptr);
    return b;
  }

  private write(ptr: DevicePtr, data: Uint8Array): void {
    if (data.byteLength > 0) this.o.driver.memcpyHtoD(ptr, data);
  }

  private reduceAll(parts: Uint8Array[], op: EngineOp, dtype: DType, count: number, avgOver?: number): Uint8Array {
    const out = new Uint8Array(count * DTYPE_BYTES[dtype]);
    if (count === 0) return out;
    reduceInto(avgOver !== undefined ? 'sum' : op, dtype, out, parts, count);
    if (avgOver !== undefined) divideInPlace(dtype, out, count, avgOver);
    return out;
  }

  allreduce(a: EngineCall & { send: DevicePtr; recv: DevicePtr; op: EngineOp; avgOver?: number }): Promise<void> {
    const bytes = a.count * DTYPE_BYTES[a.dtype];
    let mine: Uint8Array = new Uint8Array(0);
    return this.exchange(
      { kind: 'allreduce', count: a.count, dtype: a.dtype, op: a.op, ...(a.avgOver !== undefined ? { avgOver: a.avgOver } : {}) },
      a,
      () => (mine.byteLength === bytes ? mine : (mine = this.read(a.send, bytes))),
      (got) => {
        got[this.rank] = mine.byteLength === bytes ? mine : this.read(a.send, bytes);
        this.write(a.recv, this.reduceAll(got, a.op, a.dtype, a.count, a.avgOver));
      },
    );
  }

  broadcast(a: EngineCall & { buf: DevicePtr; root: number }): Promise<void> {
    const bytes = a.count * DTYPE_BYTES[a.dtype];
    return this.exchange(
      { kind: 'broadcast', count: a.count, dtype: a.dtype, root: a.root },
      a,
      () => (this.rank === a.root ? this.read(a.buf, bytes) : new Uint8Array(0)),
      (got) => {
        if (this.rank !== a.root) {
          if (got[a.root]!.byteLength !== bytes)
            throw new ProtocolError(`broadcast between nodes: the root sent ${got[a.root]!.byteLength} bytes, not ${bytes}`);
          this.write(a.buf, got[a.root]!);
        }
      },
    );
  }

  reduce(a: EngineCall & { send: DevicePtr; recv: DevicePtr; op: EngineOp; root: number; avgOver?: number }): Promise<void> {
    const bytes = a.count * DTYPE_BYTES[a.dtype];
    return this.exchange(
      { kind: 'reduce', count: a.count, dtype: a.dtype, op: a.op, root: a.root, ...(a.avgOver !== undefined ? { avgOver: a.avgOver } : {}) },
      a,
      (peer) => (peer === a.root ? this.read(a.send, bytes) : new Uint8Array(0)),
      (got) => {
        if (this.rank !== a.root) return;
        got[this.rank] = this.read(a.send, bytes);
        this.checkSizes('reduce', got, bytes);
        this.write(a.recv, this.reduceAll(got, a.op, a.dtype, a.count, a.avgOver));
      },
    );
  }

  allgather(a: EngineCall & { send: DevicePtr; recv: DevicePtr }): Promise<void> {
    const bytes = a.count * DTYPE_BYTES[a.dtype];
    let mine: Uint8Array | undefined;
    return this.exchange(
      { kind: 'allgather', count: a.count, dtype: a.dtype, ...(a.check !== undefined ? { check: a.check } : {}) },
      a,
      () => (mine ??= this.read(a.send, bytes)),
      (got) => {
        got[this.rank] = mine ?? this.read(a.send, bytes);
        this.checkSizes('allgather', got, bytes);
        for (let k = 0; k < this.size; k++) this.write(a.recv + BigInt(k * bytes), got[k]!);
      },
    );
  }

  reduceScatter(a: EngineCall & { send: DevicePtr; recv: DevicePtr; op: EngineOp; avgOver?: number }): Promise<void> {
    const bytes = a.count * DTYPE_BYTES[a.dtype];
    return this.exchange(
      {
        kind: 'reduce-scatter',
        count: a.count,
        dtype: a.dtype,
        op: a.op,
        ...(a.avgOver !== undefined ? { avgOver: a.avgOver } : {}),
        ...(a.check !== undefined ? { check: a.check } : {}),
      },
      a,
      (peer) => this.read(a.send + BigInt(peer * bytes), bytes),
      (got) => {
        got[this.rank] = this.read(a.send + BigInt(this.rank * bytes), bytes);
        this.checkSizes('reduce-scatter', got, bytes);
        this.write(a.recv, this.reduceAll(got, a.op, a.dtype, a.count, a.avgOver));
      },
    );
  }

  alltoall(a: EngineCall & { send: DevicePtr; recv: DevicePtr }): Promise<void> {
    const bytes = a.count * DTYPE_BYTES[a.dtype];
    return this.exchange(
      { kind: 'alltoall', count: a.count, dtype: a.dtype },
      a,
      (peer) => this.read(a.send + BigInt(peer * bytes), bytes),
      (got) => {
        got[this.rank] = this.read(a.send + BigInt(this.rank * bytes), bytes);
        this.checkSizes('alltoall', got, bytes);
        for (let k = 0; k < this.size; k++) this.write(a.recv + BigInt(k * bytes), got[k]!);
      },
    );
  }

  barrier(a: { timeoutMs?: number } = {}): Promise<void> {
    return this.exchange(
      { kind: 'barrier', count: 0, dtype: 'u8' },
      { stream: 0n, ...a },
      () => new Uint8Array(0),
      () => {},
    );
  }

  private checkSizes(what: string, got: Uint8Array[], bytes: number): void {
    for (let k = 0; k < got.length; k++)
      if (got[k]!.byteLength !== bytes) throw new ProtocolError(`${what} between nodes: node ${k} sent ${got[k]!.byteLength} bytes, not ${bytes}`);
  }
}

/** Where peers reach this rank's engine: loopback where the store is on loopback (virtual nodes), else this host's name. */
export function engineHost(storeHost: string | undefined): string {
  if (storeHost === undefined || storeHost === 'localhost' || storeHost.startsWith('127.') || storeHost === '::1') return '127.0.0.1';
  return hostname();
}
