/**
 * The flag protocol of a persistent transfer: what one `start(stream)`
 * queues, as stream operations only, so a CUDA graph can hold it and replay
 * it with no host work.
 *
 * Why fixed values and a reset, not counters. A counter protocol ("wait
 * until done >= n, then write ready = n") needs n to grow every round, but a
 * captured graph bakes the values of its memory operations in: every replay
 * would wait for the same n, and the second replay would pass at once on a
 * stale flag. A device-side counter would need a kernel to increment it. So,
 * as NCCL's copy-engine collectives do under capture (src/ce_coll.cc), each
 * flag is set to 1 by the side that signals and reset to 0, in the same
 * batch, by the side that waited: the values are the same every round, so
 * an eager start and any number of graph replays interleave freely, and no
 * host action is needed between rounds. The ordering argument is the usual
 * one: a flag is written 1 again only after its previous reset, because the
 * writer first waits for something the resetting stream signals after the
 * reset.
 *
 * Each side owns a flag block (device memory, registered with the peer) of
 * SLOT_BYTES slots; transfer k uses slot k in both blocks:
 *
 *   READY   (sender's block)   the receiver writes 1: "my destination is free for the next round"
 *   DONE    (receiver's block) the sender writes 1: "this round's bytes are in your destination"
 *   ARRIVE  (own block)        own stream: 1 while a start is in progress, 0 when it finished
 *   STAMP   (own block)        the watchdog writes 1 every tick; own stream writes 0 when a start finishes
 *
 * Sender start:   [ARRIVE=1, wait READY>=1, READY=0] copy src -> peer dst [peer DONE=1, ARRIVE=0, STAMP=0]
 * Receiver start: [peer READY=1, ARRIVE=1] [wait DONE>=1, DONE=0, ARRIVE=0, STAMP=0]
 *
 * The receiver announces READY at the start of its round, after whatever
 * its stream did with the previous round's bytes, so the sender never
 * overwrites bytes still being read (no torn read), and the receiver's
 * stream reads the destination only after DONE (no stale read).
 *
 * Bounded waits (watchdog.ts). The host cannot count graph replays, so the
 * watchdog reads the flags: a start is in progress while ARRIVE is 1, and
 * it has not finished since the last tick while STAMP is still the 1 the
 * watchdog wrote then (a finishing start writes 0). A start in progress
 * through `timeoutMs` of ticks is stuck: the watchdog writes POISON into the
 * flags both sides wait on — POISON (2^62) satisfies `>= 1` — so no stream
 * hangs, and fails the transfer on both sides with a typed error. A failed
 * transfer's waits are poisoned again every tick (each wait resets its
 * flag), so replays of a graph holding it run through, their data void.
 */
import type { DevicePtr, StreamMemOp } from '../cuda/driver.js';

export const SLOT_BYTES = 32;
export const READY = 0;
export const DONE = 8;
export const ARRIVE = 16;
export const STAMP = 24;

/** Satisfies every `>= 1` wait; counters never come near it. */
export const POISON = 1n << 62n;

/** Where one transfer's words are: its slot in this side's block and in the peer's (as mapped here). */
export interface SlotAddress {
  own: DevicePtr;
  peer: DevicePtr;
}

export function slotAddress(ownBlock: DevicePtr, peerBlock: DevicePtr, slot: number): SlotAddress {
  const at = BigInt(slot * SLOT_BYTES);
  return { own: ownBlock + at, peer: peerBlock + at };
}

/** One step of a start: a batch of memory operations, or the copy. */
export type StartStep = { kind: 'batch'; ops: StreamMemOp[] } | { kind: 'copy' };

export function senderSteps(a: SlotAddress): StartStep[] {
  return [
    {
      kind: 'batch',
      ops: [
        { op: 'write64', addr: a.own + BigInt(ARRIVE), value: 1n },
        { op: 'wait64', addr: a.own + BigInt(READY), value: 1n, condition: 'geq' },
        { op: 'write64', addr: a.own + BigInt(READY), value: 0n },
      ],
    },
    { kind: 'copy' },
    {
      kind: 'batch',
      ops: [
        { op: 'write64', addr: a.peer + BigInt(DONE), value: 1n },
        { op: 'write64', addr: a.own + BigInt(ARRIVE), value: 0n },
        { op: 'write64', addr: a.own + BigInt(STAMP), value: 0n },
      ],
    },
  ];
}

/**
 * The receiver's start in two batches: `post` (READY to the peer) and
 * `wait` (for DONE). `start` queues both; `startGroup` queues every post of
 * a group before any wait, so one stream can hold both directions of an
 * exchange without waiting on itself.
 */
export function receiverSteps(a: SlotAddress): StartStep[] {
  return [
    {
      kind: 'batch',
      ops: [
        { op: 'write64', addr: a.peer + BigInt(READY), value: 1n },
        { op: 'write64', addr: a.own + BigInt(ARRIVE), value: 1n },
      ],
    },
    {
      kind: 'batch',
      ops: [
        { op: 'wait64', addr: a.own + BigInt(DONE), value: 1n, condition: 'geq' },
        { op: 'write64', addr: a.own + BigInt(DONE), value: 0n },
        { op: 'write64', addr: a.own + BigInt(ARRIVE), value: 0n },
        { op: 'write64', addr: a.own + BigInt(STAMP), value: 0n },
      ],
    },
  ];
}

/** The word a side's start waits on (sender: READY; receiver: DONE), in its own block. */
export function awaitedOffset(role: 'send' | 'recv'): number {
  return role === 'send' ? READY : DONE;
}

/** The word the peer's start waits on, in the peer's block. */
export function peerAwaitedOffset(role: 'send' | 'recv'): number {
  return role === 'send' ? DONE : READY;
}
