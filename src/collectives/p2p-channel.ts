/**
 * Point to point on the device: a batch of sends and receives queued on one
 * stream as copies and stream memory operations, no host between them (so
 * it can be captured in a CUDA graph). A message goes in chunks of at most
 * one p2p slot (scratch.ts, region E): the sender copies a chunk from the
 * caller's buffer into the receiver's slot through its mapping, the
 * receiver copies it out into its caller's buffer. Chunk c of a message
 * uses slot x = c % P2P_SLOTS. On the sender, for each chunk:
 *
 *   wait own free[x][dst] >= 1; write own free[x][dst] = 0
 *   copy the chunk into dst's slot [x][me]
 *   write 1 into dst's full[x][me]
 *
 * and on the receiver:
 *
 *   wait own full[x][src] >= 1; write own full[x][src] = 0
 *   copy slot [x][src] out into the caller's buffer
 *   write 1 into src's free[x][me]
 *
 * No flag is written twice before its reset: the sender writes full[x]
 * again only after free[x], which the receiver writes after resetting
 * full[x]; and the receiver writes free[x] only after full[x], which the
 * sender writes after resetting free[x]. A slot's uses must come in the
 * same order on both ranks: each rank moves the messages between two ranks
 * in one direction one after the other, in call order, each chunk after
 * chunk, however they were batched (lanes, below); the n-th send and the
 * n-th receive of a pair are the same message (p2p-match.ts checks that
 * their counts and dtypes agree, and fails both ranks where not).
 *
 * Why lanes and rounds. A batch (comm.batch) may send to a neighbour and
 * receive from another at once, every rank alike: in a ring of messages
 * larger than a slot, a rank's whole send queued before its receive would
 * wait for a slot its neighbour frees only in its own receive, queued
 * behind its own send: every stream waits. So a batch is cut in lanes (the
 * messages to or from one peer in one direction, in call order, chunk
 * after chunk) and queued in rounds: round c queues chunk c of every
 * sending lane, then chunk c of every receiving lane. A send's chunk c
 * waits only for its receiver's round c - P2P_SLOTS, and a receive's chunk
 * c for its sender's round c: no round waits for a later one, on any rank.
 */
import type { CudaDriver, DevicePtr, StreamHandle, StreamMemOp } from '../cuda/driver.js';
import { queueMemOps } from './device-sync.js';
import { P2P_SLOTS } from './p2p-slots.js';
import type { Scratch } from './scratch.js';

/** One send or receive of a batch, as the device moves it. */
export interface P2PTransfer {
  kind: 'send' | 'recv';
  peer: number;
  buf: DevicePtr;
  bytes: number;
}

interface Lane {
  peer: number;
  send: boolean;
  /** The lane's chunks, in order: [buffer address, bytes, slot]. */
  chunks: Array<[DevicePtr, number, number]>;
}

/** Cuts a batch in lanes (one per peer and direction, in first-use order), each the chunks of its messages in call order. */
export function lanesOf(transfers: readonly P2PTransfer[], slotBytes: number): Lane[] {
  const lanes = new Map<string, Lane>();
  for (const t of transfers) {
    const key = `${t.kind}:${t.peer}`;
    let lane = lanes.get(key);
    if (!lane) lanes.set(key, (lane = { peer: t.peer, send: t.kind === 'send', chunks: [] }));
    for (let at = 0, c = 0; at < t.bytes; at += slotBytes, c++) lane.chunks.push([t.buf + BigInt(at), Math.min(slotBytes, t.bytes - at), c % P2P_SLOTS]);
  }
  return [...lanes.values()];
}

export class P2PChannel {
  constructor(
    private readonly driver: CudaDriver,
    private readonly scratch: Scratch,
  ) {}

  /** Queues a batch on `stream` (all of it before returning: nothing to await, capturable). */
  queue(stream: StreamHandle, transfers: readonly P2PTransfer[]): void {
    const s = this.scratch;
    const me = s.rank;
    const lanes = lanesOf(transfers, s.p2pSlotBytes);
    const sends = lanes.filter((l) => l.send);
    const recvs = lanes.filter((l) => !l.send);
    const rounds = Math.max(0, ...lanes.map((l) => l.chunks.length));
    // A lane's closing signal and the next lane's wait go in one batch.
    let ops: StreamMemOp[] = [];
    const flush = (): void => {
      queueMemOps(this.driver, stream, ops);
      ops = [];
    };
    for (let c = 0; c < rounds; c++) {
      for (const l of sends) {
        const chunk = l.chunks[c];
        if (!chunk) continue;
        const [buf, bytes, x] = chunk;
        const free = s.p2pFlag(me, 'free', x, l.peer)!;
        ops.push({ op: 'wait64', addr: free, value: 1n, condition: 'geq' }, { op: 'write64', addr: free, value: 0n });
        flush();
        this.driver.memcpyAsync(s.p2pSlot(l.peer, me, x)!, buf, bytes, stream);
        ops.push({ op: 'write64', addr: s.p2pFlag(l.peer, 'full', x, me)!, value: 1n });
      }
      for (const l of recvs) {
        const chunk = l.chunks[c];
        if (!chunk) continue;
        const [buf, bytes, x] = chunk;
        const full = s.p2pFlag(me, 'full', x, l.peer)!;
        ops.push({ op: 'wait64', addr: full, value: 1n, condition: 'geq' }, { op: 'write64', addr: full, value: 0n });
        flush();
        this.driver.memcpyAsync(buf, s.p2pSlot(me, l.peer, x)!, bytes, stream);
        ops.push({ op: 'write64', addr: s.p2pFlag(l.peer, 'free', x, me)!, value: 1n });
      }
    }
    flush();
  }
}
