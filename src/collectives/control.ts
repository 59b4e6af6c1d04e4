/**
 * The communicator's host control plane: small JSON messages between ranks
 * over their endpoints, on a reserved tag. It carries the set-up exchanges,
 * the step signals of the calls whose steps go through the host (behind
 * `RankSync`: staged calls, barrier, and every call where the steps cannot
 * be device-side, device-sync.ts), the prints of sends and receives
 * (p2p-match.ts), and ABORT: the first failure of any rank reaches every
 * other rank with its original code and message.
 *
 * A peer whose endpoint closes without saying BYE is lost: the communicator
 * aborts. One that said BYE (closed its communicator) names the last call it
 * made: the communicator fails the calls after it (control's owner decides).
 *
 * A closed communicator still reads each peer's control messages, dropping
 * them, until that peer's UNMAPPED (the last message a communicator sends)
 * or its endpoint's close: a peer that closes later sends its BYE and
 * UNMAPPED after this rank stopped handling them, and left unread they
 * would pile up on endpoints that stay open, and be taken for its own by
 * the next communicator on the same endpoints and tag (fromEndpoints again:
 * a stale BYE failed its calls, a stale step signal could release a wait
 * early). The tags stay claimed until then (group-tags.ts).
 *
 * Every message is checked against its schema before use (control-schema.ts):
 * a peer that sends anything else (not JSON, a device buffer, an unknown
 * type, a rank out of range, more step signals than any honest peer could
 * have outstanding) aborts the communicator with SMCUDA_PROTOCOL naming it,
 * rather than crashing this process or silently going deaf to it.
 */
import { debug } from '../debug.js';
import type { Endpoint } from '../endpoint.js';
import { CallMismatchError, CommunicatorAbortedError, PeerLostError, ProtocolError } from '../errors.js';
import { parseControl, type ControlMessage } from './control-schema.js';
import type { P2PPrint } from './p2p-match.js';

/** The tags of a world communicator on its endpoints (not for the application's own messages); a group's are below them (group-tags.ts). */
export const CONTROL_TAG = 0xfffffff0;
export const DATA_TAG = 0xfffffff1;

/** Messages held for waits not made yet (step signals of calls this rank has not reached, set-up values): at most this many. */
export const MAX_HELD_MESSAGES = 16_384;

/** What the owner of a control plane is told besides aborts. */
export interface ControlEvents {
  /** Called once with the error every call now fails with. */
  onAbort(err: CommunicatorAbortedError): void;
  /** A peer closed its communicator after making calls 1 to `lastSeq`. */
  onDeparted(peer: number, lastSeq: number): void;
  /** A peer's call prints (message-print-board.ts). */
  onPrints(peer: number, first: number, words: number[]): void;
  /** A peer's print of one of its sends or receives (p2p-match.ts). */
  onP2P?(peer: number, print: P2PPrint): void;
}

/** How ranks wait for each other between the steps of a collective: host frames today, device flags later. */
export interface RankSync {
  /** Tells `peers` that this rank reached step `step` of call `seq`. */
  signal(peers: readonly number[], seq: number, step: number): void;
  /** Resolves once every one of `peers` signalled step `step` of call `seq`; rejects when the communicator aborts. */
  wait(peers: readonly number[], seq: number, step: number): Promise<void>;
}

interface Waiter {
  key: string;
  peers: readonly number[];
  resolve(): void;
  reject(err: Error): void;
}

const encoder = new TextEncoder();

export class ControlPlane implements RankSync {
  /** Messages by key ('s:<seq>:<step>' or 'p:<key>'), then by sending rank. */
  private readonly inbox = new Map<string, Map<number, unknown>>();
  private readonly waiters = new Set<Waiter>();
  private readonly departed = new Set<number>();
  private aborted: CommunicatorAbortedError | undefined;
  private stopped = false;
  /** Reading ended (finish()): after a stop or an abort, only UNMAPPED is still read, until then. */
  private finished = false;
  /** Peers that no longer map this rank's memory: they said UNMAPPED, or their endpoint closed. */
  private readonly unmapped = new Set<number>();
  private unmapWaiters: Array<() => void> = [];
  private readonly offs: Array<() => void> = [];
  /** Per peer: withdraws its pending control receive (the endpoints may be the application's and stay open). */
  private readonly readers = new Map<number, AbortController>();
  /** The read loops; each ends at its peer's last message after finish(), or at its endpoint's close. */
  private readonly loops: Promise<void>[] = [];

  constructor(
    readonly rank: number,
    readonly size: number,
    private readonly peers: ReadonlyMap<number, Endpoint>,
    private readonly events: ControlEvents,
    /** The tag this communicator's control messages travel on (CONTROL_TAG for a world; a group's own, group-tags.ts). */
    readonly tag: number = CONTROL_TAG,
  ) {}

  private get onAbort(): (err: CommunicatorAbortedError) => void {
    return this.events.onAbort;
  }

  start(): void {
    for (const [peer, ep] of this.peers) {
      const onClose = (err?: Error) => {
        // The peer's last messages (ABORT, BYE) may have resolved the pending receive in this same
        // tick: let the reader handle them first, so the cause reported is theirs, not the close.
        setImmediate(() => {
          this.peerUnmapped(peer);
          if (this.stopped || this.aborted) return;
          if (this.departed.has(peer)) return this.failDepartedWaits();
          const lost = new PeerLostError(`rank ${peer} (pid ${ep.peerPid}) was lost${err ? `: ${err.message}` : ''}`, { cause: err });
          // Told to every other rank too: they may see this rank close (as it cleans up) before they see the lost one.
          this.abort(new CommunicatorAbortedError(`rank ${peer} failed: ${lost.message}`, peer, lost.code, { cause: lost, failedPid: ep.peerPid }), true);
        });
      };
      ep.on('close', onClose);
      this.offs.push(() => ep.off('close', onClose));
      if (ep.closed) onClose();
      const reader = new AbortController();
      this.readers.set(peer, reader);
      this.loops.push(this.read(peer, ep, reader.signal));
    }
  }

  /**
   * Reads a peer's control messages in order, one receive at a time. A peer
   * that closes right after its last words (its final signal and its BYE
   * arrive together with the end of its connection) is still heard out:
   * messages that arrived whole before a close stay receivable after it
   * (Endpoint.recv), so a normal close is not taken for a lost rank.
   */
  private async read(peer: number, ep: Endpoint, signal: AbortSignal): Promise<void> {
    // After finish(), until the peer's last message (UNMAPPED): nothing of this communicator is left unread.
    while (!(this.finished && this.unmapped.has(peer))) {
      let data: unknown;
      try {
        data = (await ep.recvInBackground({ tag: this.tag, signal })).data;
      } catch {
        return; // the endpoint closed and nothing is left to read (its 'close' listener decides), or finish() withdrew it
      }
      try {
        this.receive(peer, parseControl(data, this.size));
      } catch (err) {
        if (!this.finished) this.protocolError(peer, ep, err as Error);
        return;
      }
    }
  }

  /** A peer broke the control protocol: the communicator aborts, naming it (its own error, told to the others). */
  private protocolError(peer: number, ep: Endpoint, err: Error): void {
    const cause = err instanceof ProtocolError ? err : new ProtocolError(err.message);
    this.abort(
      new CommunicatorAbortedError(`rank ${peer} (pid ${ep.peerPid}) failed: ${cause.message}`, peer, cause.code, { cause, failedPid: ep.peerPid }),
      true,
    );
  }

  private receive(peer: number, msg: ControlMessage): void {
    if (msg.t === 'unmapped') return this.peerUnmapped(peer);
    // Stopped or aborted: only UNMAPPED still matters (the clean-up waits for it).
    if (this.stopped || this.aborted) return;
    switch (msg.t) {
      case 'sig':
        this.arrive(`s:${msg.seq}:${msg.step}`, peer, true);
        break;
      case 'put':
        this.arrive(`p:${msg.key}`, peer, msg.value);
        break;
      case 'fp':
        this.events.onPrints(peer, msg.s, msg.w);
        break;
      case 'pp':
        this.events.onP2P?.(peer, { kind: msg.k, n: msg.n, count: msg.c, dtype: msg.d });
        break;
      case 'abort': {
        const o = { failedPid: msg.pid };
        const err =
          msg.code === 'SMCUDA_CALL_MISMATCH' && msg.seq !== undefined
            ? new CallMismatchError(msg.message, msg.rank, msg.seq, msg.ranks ?? [msg.rank], msg.fields ?? [], o)
            : new CommunicatorAbortedError(`rank ${msg.rank}${msg.pid !== undefined ? ` (pid ${msg.pid})` : ''} failed: ${msg.message}`, msg.rank, msg.code, o);
        this.abort(err, false);
        break;
      }
      case 'bye':
        this.departed.add(peer);
        this.events.onDeparted(peer, msg.last ?? Number.MAX_SAFE_INTEGER);
        break;
    }
  }

  private arrive(key: string, peer: number, value: unknown): void {
    let m = this.inbox.get(key);
    if (!m) {
      if (this.inbox.size >= MAX_HELD_MESSAGES)
        throw new ProtocolError(
          `more than ${MAX_HELD_MESSAGES} control messages for calls this rank has not made: the peer is making calls no other rank makes`,
        );
      this.inbox.set(key, (m = new Map()));
    }
    m.set(peer, value);
    for (const w of this.waiters) {
      if (w.key === key && w.peers.every((p) => m.has(p))) {
        this.waiters.delete(w);
        w.resolve();
      }
    }
  }

  /** Sends this rank's call prints (message-print-board.ts) to every peer. */
  sendPrints(first: number, words: number[]): void {
    for (const p of this.peers.keys()) this.send(p, { t: 'fp', s: first, w: words });
  }

  private send(peer: number, msg: ControlMessage): void {
    const ep = this.peers.get(peer);
    if (!ep || ep.closed) return;
    try {
      ep.send(encoder.encode(JSON.stringify(msg)), { tag: this.tag }).catch(() => {
        // a lost peer is reported by its endpoint's 'close'
      });
    } catch (err) {
      // An endpoint closing under the send: the same (its 'close' reports it).
      debug('communicator rank %d: a control message to rank %d failed: %s', this.rank, peer, (err as Error).message);
    }
  }

  /** Tells `peer` this rank's print of one of its sends or receives (p2p-match.ts). */
  sendP2P(peer: number, p: P2PPrint): void {
    this.send(peer, { t: 'pp', k: p.kind, n: p.n, c: p.count, d: p.dtype });
  }

  signal(peers: readonly number[], seq: number, step: number): void {
    for (const p of peers) this.send(p, { t: 'sig', seq, step });
  }

  wait(peers: readonly number[], seq: number, step: number): Promise<void> {
    return this.waitKey(`s:${seq}:${step}`, peers).then(() => {
      this.inbox.delete(`s:${seq}:${step}`);
    });
  }

  /** Sends `value` under `key` to every peer and resolves with every peer's value (set-up exchanges). */
  async exchange<T>(key: string, value: T): Promise<Map<number, T>> {
    for (const p of this.peers.keys()) this.send(p, { t: 'put', key, value });
    await this.waitKey(`p:${key}`, [...this.peers.keys()]);
    const got = this.inbox.get(`p:${key}`) ?? new Map();
    this.inbox.delete(`p:${key}`);
    return got as Map<number, T>;
  }

  private waitKey(key: string, peers: readonly number[]): Promise<void> {
    if (this.aborted) return Promise.reject(this.aborted);
    const gone = this.missingDeparted(key, peers);
    if (gone !== undefined) return Promise.reject(this.departedError(gone));
    const m = this.inbox.get(key);
    if (peers.every((p) => m?.has(p))) return Promise.resolve();
    return new Promise((resolve, reject) => this.waiters.add({ key, peers, resolve, reject }));
  }

  private departedError(peer: number): CommunicatorAbortedError {
    return new CommunicatorAbortedError(`rank ${peer} closed its communicator: every rank must make the same calls`, peer, 'SMCUDA_CLOSED');
  }

  /** A departed peer a wait still needs: one whose message for that wait has not arrived. */
  private missingDeparted(key: string, peers: readonly number[]): number | undefined {
    const m = this.inbox.get(key);
    return peers.find((p) => this.departed.has(p) && !m?.has(p));
  }

  private failDepartedWaits(): void {
    for (const w of this.waiters) {
      const gone = this.missingDeparted(w.key, w.peers);
      if (gone === undefined) continue;
      this.waiters.delete(w);
      w.reject(this.departedError(gone));
    }
  }

  /**
   * Fails every wait with `err`, once; `tellPeers`: this rank's own failure,
   * sent to every peer as ABORT with its original code and message.
   */
  abort(err: CommunicatorAbortedError, tellPeers: boolean): void {
    if (this.aborted || this.stopped) return;
    this.aborted = err;
    if (tellPeers) {
      // The first failure as it happened: its rank (this one, or a lost peer) and its original code and message.
      const cause = err.cause instanceof Error ? err.cause : err;
      const msg: ControlMessage = {
        t: 'abort',
        rank: err.failedRank,
        code: err.causeCode,
        message: err instanceof CallMismatchError ? err.message : cause.message,
      };
      if (err.failedPid !== undefined) msg.pid = err.failedPid;
      if (err instanceof CallMismatchError) {
        msg.seq = err.seq;
        msg.ranks = [...err.ranks];
        msg.fields = [...err.fields];
      }
      for (const p of this.peers.keys()) if (p !== err.failedRank) this.send(p, msg);
    }
    for (const w of this.waiters) w.reject(err);
    this.waiters.clear();
    this.onAbort(err);
  }

  get abortError(): CommunicatorAbortedError | undefined {
    return this.aborted;
  }

  /** Says BYE (with the last call this rank made) to every peer (a normal close); only UNMAPPED is read after it. */
  stop(lastSeq: number): void {
    if (this.stopped) return;
    if (!this.aborted) for (const p of this.peers.keys()) this.send(p, { t: 'bye', last: lastSeq });
    this.stopped = true;
    const closed = new CommunicatorAbortedError('the communicator was closed', this.rank, 'SMCUDA_CLOSED');
    for (const w of this.waiters) w.reject(closed);
    this.waiters.clear();
  }

  /** Tells every peer that this rank no longer maps its memory. */
  sendUnmapped(): void {
    for (const p of this.peers.keys()) this.send(p, { t: 'unmapped' });
  }

  /**
   * Resolves true once every peer said UNMAPPED or is gone, false after `ms`.
   * After an abort a peer's poisoned calls may still read and write this
   * rank's scratch through its mapping: freeing it under them is undefined
   * in CUDA (and under MPS a fault takes every process on the GPU down).
   */
  allUnmapped(ms: number): Promise<boolean> {
    if (this.unmapped.size >= this.peers.size) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(false), ms);
      this.unmapWaiters.push(() => {
        clearTimeout(timer);
        resolve(true);
      });
    });
  }

  private peerUnmapped(peer: number): void {
    this.unmapped.add(peer);
    if (this.unmapped.size >= this.peers.size) for (const w of this.unmapWaiters.splice(0)) w();
  }

  /**
   * Stops handling messages and listening (the endpoints may be the
   * application's and stay open). `drain`: each peer is still read, its
   * messages dropped, until its UNMAPPED or its endpoint's close (a normal
   * close or an abort, where every peer ends with UNMAPPED); else reading
   * stops now (a set-up that failed, where peers may never send it).
   * Resolves once no read is left.
   */
  finish(drain = false): Promise<void> {
    if (!this.finished) {
      this.stop(0);
      this.finished = true;
      for (const off of this.offs.splice(0)) off();
      for (const [peer, reader] of this.readers) if (!drain || this.unmapped.has(peer)) reader.abort();
    }
    return Promise.all(this.loops).then(() => undefined);
  }
}
