/**
 * The collectives with counts per rank, step by step on one rank:
 * allgatherv, reduce-scatterv and alltoallv (docs/collectives.md gives their
 * semantics; uneven-args.ts checks their counts and displacements). Counts
 * and displacements are in elements; a zero count moves nothing.
 *
 * allgatherv and reduce-scatterv take the same counts on every rank, so every
 * rank knows how many pieces a call takes (the largest count over a piece's
 * room) and they step together as allgather and reduce-scatter do
 * (algorithms.ts): a rank with less data copies less, or nothing, in a
 * piece, and steps all the same.
 *
 * alltoallv's ranks each know only their own row (sendCounts) and column
 * (recvCounts) of the job's matrix: no rank knows how many pieces another
 * pair needs, so a piece cannot be a step of every rank. On device steps,
 * ranks pair up instead, round r sending to rank + r and receiving from
 * rank - r (mod N), and each pair hands pieces over on two flags of its
 * own: the sender copies a piece into the receiver's landing slot for it
 * (region C, scratch.ts) and raises `landed` there; the receiver waits for
 * it, copies the piece out and raises `free` back; the sender's next piece
 * (and the end of its round) waits for `free`. A pair's piece count is
 * ceil(count / slot), the same on both sides when their counts agree. A
 * round's work depends only on earlier rounds and on the same round's
 * sends, so no wait forms a cycle. The call starts and ends with a step of
 * every rank: before it, no peer still reads a landing slot from an earlier
 * call; after it, none of a later call's stores land in a slot this rank is
 * still copying out of.
 *
 * The two flags are the step slots of device-sync.ts, rank k's slot
 * [p][j] "rank j signalled parity p": `landed` uses parity 1 and `free`
 * parity 0, so that the first step (parity 0) and the last (parity 1) never
 * meet a handshake on the same slot (each is written again only after the
 * wait that resets it, as for the steps), and every flag is 0 again when
 * the call ends: a graph replays it with the same values.
 *
 * Where counts disagree between ranks, the call check (call-check.ts) fails
 * the call on every rank; the pieces that ran meanwhile never leave the
 * slots, nor the buffers' checked extents.
 *
 * With device steps nothing here awaits (a step is queued inline, never
 * through a helper's promise): the whole call is queued before it returns,
 * as the communicator's device path and graph capture need.
 */
import type { DevicePtr, StreamMemOp } from '../cuda/driver.js';
import { ArgumentRangeError } from '../errors.js';
import { DTYPE_BYTES, type DType, type ReduceArg } from '../kernels/dtypes.js';
import { RankLostError, type Algorithm, type CallContext } from './algorithms.js';
import { queueMemOps } from './device-sync.js';

const B = (n: number): bigint => BigInt(n);

/** Elements of a piece at most: `max`, at least one (else the scratch is too small). */
export function pieceOf(max: number): number {
  if (max < 1) throw new ArgumentRangeError('the scratch region is too small for one element per rank: raise scratchBytes');
  return max;
}

/** Elements of `count` in the piece at `a` of at most `per`. */
export function inPiece(count: number, a: number, per: number): number {
  return Math.max(0, Math.min(per, count - a));
}

export function copy(c: CallContext, dst: DevicePtr, src: DevicePtr, bytes: number): void {
  if (bytes > 0 && dst !== src) c.driver.memcpyAsync(dst, src, bytes, c.stream);
}

export function othersOf(c: Pick<CallContext, 'size' | 'rank'>): number[] {
  return [...Array(c.size).keys()].filter((k) => k !== c.rank);
}

/** A transfer of the staged algorithms: [rank, device pointer, bytes]; zero bytes are left out. */
export type Transfer = readonly [rank: number, ptr: DevicePtr, bytes: number];

/** Sends and receives every transfer at once through the endpoints (pieces of different sizes per peer). */
export async function exchangeEach(c: CallContext, sends: readonly Transfer[], recvs: readonly Transfer[]): Promise<void> {
  const blame = (k: number) => (err: Error) => {
    throw c.endpoint(k).closed ? new RankLostError(k, err) : err;
  };
  const tag = c.dataTag;
  await Promise.all([
    ...sends.filter((t) => t[2] > 0).map(([k, ptr, length]) => c.endpoint(k).send({ ptr, length }, { tag }).catch(blame(k))),
    // Tracked by the communicator: its scratch is freed only once these copies landed (CallContext.stagedRecv).
    ...recvs.filter((t) => t[2] > 0).map(([k, ptr, length]) => c.stagedRecv(k, ptr, length).catch(blame(k))),
  ]);
}

/** recv + displs[k] (elements) gets rank k's send (counts[k] elements), on every rank. */
export async function allgatherv(
  c: CallContext,
  alg: Algorithm,
  send: DevicePtr,
  recv: DevicePtr,
  counts: readonly number[],
  displs: readonly number[],
  dtype: DType,
): Promise<void> {
  const es = DTYPE_BYTES[dtype];
  const me = c.rank;
  copy(c, recv + B(displs[me]! * es), send, counts[me]! * es);
  if (alg === 'local') return;
  const s = c.scratch;
  const A = s.inputOf(me)!;
  const max = Math.max(...counts);
  const others = othersOf(c);
  for (let a = 0, per = pieceOf(Math.floor(s.bytes / es)); a < max; a += per) {
    const mine = inPiece(counts[me]!, a, per);
    copy(c, A, send + B(a * es), mine * es);
    c.copied(mine * es);
    const at = (k: number) => recv + B((displs[k]! + a) * es);
    if (alg === 'staged') {
      await c.streamDone();
      await exchangeEach(
        c,
        others.map((k) => [k, A, mine * es]),
        others.map((k) => [k, at(k), inPiece(counts[k]!, a, per) * es]),
      );
      continue;
    }
    if (c.steps.onHost) await c.steps.host();
    else c.steps.device();
    for (const k of others) copy(c, at(k), s.inputOf(k)!, inPiece(counts[k]!, a, per) * es);
    if (c.steps.onHost) await c.steps.host();
    else c.steps.device();
  }
}

/** recv (counts[rank] elements) = op over every rank's block `rank` of send (block k: counts[k] elements at displs[k]). */
export async function reduceScatterv(
  c: CallContext,
  alg: Algorithm,
  send: DevicePtr,
  recv: DevicePtr,
  counts: readonly number[],
  displs: readonly number[],
  dtype: DType,
  op: ReduceArg,
): Promise<void> {
  const es = DTYPE_BYTES[dtype];
  const me = c.rank;
  const N = c.size;
  const s = c.scratch;
  const A = s.inputOf(me)!;
  const block = (k: number, a: number) => send + B((displs[k]! + a) * es);
  if (alg === 'local') {
    if (typeof op === 'string') return copy(c, recv, block(0, 0), counts[0]! * es);
    // premul scales the input: the kernel over a table of one input, piece by piece through the scratch.
    for (let a = 0, per = pieceOf(Math.floor(s.bytes / es)); a < counts[0]!; a += per) {
      const len = inPiece(counts[0]!, a, per);
      copy(c, A, block(0, a), len * es);
      c.copied(len * es);
      c.kernels.reduce(op, dtype, recv + B(a * es), s.inputTable, 1, 0, len, c.stream);
    }
    return;
  }
  const max = Math.max(...counts);
  const others = othersOf(c);
  if (alg === 'staged') {
    // Block k's piece at k × per in A, sent to rank k; rank k's pieces of this rank's block land in C, one slot each.
    for (let a = 0, per = pieceOf(Math.floor(Math.min(s.bytes / N, s.slotBytes) / es)); a < max; a += per) {
      for (let k = 0; k < N; k++) copy(c, A + B(k * per * es), block(k, a), inPiece(counts[k]!, a, per) * es);
      const mine = inPiece(counts[me]!, a, per);
      copy(c, s.landing(me), A + B(me * per * es), mine * es);
      await c.streamDone();
      await exchangeEach(
        c,
        others.map((k) => [k, A + B(k * per * es), inPiece(counts[k]!, a, per) * es]),
        others.map((k) => [k, s.landing(k), mine * es]),
      );
      c.kernels.reduce(op, dtype, recv + B(a * es), s.landingTable, N, 0, mine, c.stream);
      await c.streamDone();
    }
    return;
  }
  // Block k's piece at k × per in every rank's A; rank `me` reduces block `me` over every rank's A.
  for (let a = 0, per = pieceOf(Math.floor(s.bytes / (N * es))); a < max; a += per) {
    for (let k = 0; k < N; k++) {
      const len = inPiece(counts[k]!, a, per);
      copy(c, A + B(k * per * es), block(k, a), len * es);
      c.copied(len * es);
    }
    if (c.steps.onHost) await c.steps.host();
    else c.steps.device();
    c.kernels.reduce(op, dtype, recv + B(a * es), s.inputTable, N, me * per, inPiece(counts[me]!, a, per), c.stream);
    if (c.steps.onHost) await c.steps.host();
    else c.steps.device();
  }
}

/** Step slot [parity][j] in a flag block: device-sync.ts's layout (DeviceSync's slot; a test checks they agree). */
export function stepSlot(block: DevicePtr, size: number, parity: number, j: number): DevicePtr {
  return block + B((parity * size + j) * 8);
}
/** The handshake's flags: a piece landed (receiver's block, from the sender), its slot is free again (sender's block, from the receiver). */
const LANDED = 1;
const FREE = 0;

/**
 * Rank k's recv + recvDispls[j] gets sendCounts[k] elements of rank j's
 * send + sendDispls[k], for every pair (rank j's sendCounts[k] is rank k's
 * recvCounts[j]).
 */
export async function alltoallv(
  c: CallContext,
  alg: Algorithm,
  send: DevicePtr,
  recv: DevicePtr,
  sendCounts: readonly number[],
  sendDispls: readonly number[],
  recvCounts: readonly number[],
  recvDispls: readonly number[],
  dtype: DType,
): Promise<void> {
  const es = DTYPE_BYTES[dtype];
  const me = c.rank;
  const N = c.size;
  const out = (k: number, a: number) => recv + B((recvDispls[k]! + a) * es);
  const src = (k: number, a: number) => send + B((sendDispls[k]! + a) * es);
  copy(c, out(me, 0), src(me, 0), sendCounts[me]! * es);
  if (alg === 'local') return;
  const s = c.scratch;
  if (alg === 'staged') {
    // Pairs hand their pieces over as messages: each pair's pieces come in order, however many the others need.
    const A = s.inputOf(me)!;
    const others = othersOf(c);
    const max = Math.max(...others.map((k) => Math.max(sendCounts[k]!, recvCounts[k]!)));
    for (let a = 0, per = pieceOf(Math.floor(s.bytes / (N * es))); a < max; a += per) {
      for (const k of others) {
        const len = inPiece(sendCounts[k]!, a, per);
        copy(c, A + B(k * per * es), src(k, a), len * es);
        c.copied(len * es);
      }
      await c.streamDone();
      await exchangeEach(
        c,
        others.map((k) => [k, A + B(k * per * es), inPiece(sendCounts[k]!, a, per) * es]),
        others.map((k) => [k, out(k, a), inPiece(recvCounts[k]!, a, per) * es]),
      );
    }
    return;
  }
  // Device steps (the communicator runs staged without them).
  const d = c.driver;
  const stream = c.stream;
  const own = s.flagsOf(me)!;
  const wait = (parity: number, k: number): StreamMemOp[] => [
    { op: 'wait64', addr: stepSlot(own, N, parity, k), value: 1n, condition: 'geq' },
    { op: 'write64', addr: stepSlot(own, N, parity, k), value: 0n },
  ];
  const signal = (parity: number, k: number): StreamMemOp[] => [{ op: 'write64', addr: stepSlot(s.flagsOf(k)!, N, parity, me), value: 1n }];
  const slotBytes = s.slotBytes;
  const per = pieceOf(Math.floor(slotBytes / es));
  c.steps.device();
  for (let r = 1; r < N; r++) {
    const to = (me + r) % N;
    const from = (me - r + N) % N;
    const there = s.landingOf(to, me)!;
    const here = s.landing(from);
    const ns = Math.ceil(sendCounts[to]! / per);
    const nr = Math.ceil(recvCounts[from]! / per);
    for (let j = 0; j < Math.max(ns, nr); j++) {
      const a = j * per;
      if (j < ns) {
        if (j > 0) queueMemOps(d, stream, wait(FREE, to));
        const len = inPiece(sendCounts[to]!, a, per);
        d.memcpyAsync(there, src(to, a), len * es, stream);
        c.copied(len * es);
        queueMemOps(d, stream, signal(LANDED, to));
      }
      if (j < nr) {
        queueMemOps(d, stream, wait(LANDED, from));
        d.memcpyAsync(out(from, a), here, inPiece(recvCounts[from]!, a, per) * es, stream);
        queueMemOps(d, stream, signal(FREE, from));
      }
    }
    // The last piece's slot is free again before the round ends: every flag is 0 when the call ends.
    if (ns > 0) queueMemOps(d, stream, wait(FREE, to));
  }
  c.steps.device();
}
