/**
 * Where point-to-point messages land: the layout of the p2p region of each
 * rank's scratch (scratch.ts, region E) and of its flags in the flag block
 * (device-sync.ts). Region E is `P2P_SLOTS` × size slots, slot [x][k]
 * holding chunks of rank k's sends to the owner; the flags are two signals
 * per slot and peer, in the block of the rank that waits for them:
 *
 *   full[x][k]  (the receiver's block) rank k copied a chunk into the
 *               receiver's slot [x][k]
 *   free[x][k]  (the sender's block) rank k copied the chunk in its slot
 *               [x][sender] out: the sender may copy the next one in
 *
 * `free` starts at 1 (scratch.ts) and `full` at 0, and a message leaves
 * them so once both ranks' streams ran it: every message, eager or a graph
 * replay, starts from the same state (p2p-channel.ts says why no flag is
 * written twice before its reset).
 */

/** Slots per ordered pair of ranks: two, so that one chunk is copied in while the previous one is copied out. */
export const P2P_SLOTS = 2;

export type P2PSignal = 'full' | 'free';
const SIGNALS: readonly P2PSignal[] = ['full', 'free'];

/** The offset, in the p2p flag area, of `signal` for slot `x` and peer `k`. */
export function p2pFlagOffset(size: number, signal: P2PSignal, x: number, k: number): number {
  return ((SIGNALS.indexOf(signal) * P2P_SLOTS + x) * size + k) * 8;
}

/** Bytes of the p2p flag area for `size` ranks, 256-aligned. */
export function p2pFlagBytes(size: number): number {
  return Math.ceil((SIGNALS.length * P2P_SLOTS * size * 8) / 256) * 256;
}

/** Bytes of one p2p slot in a region of `bytes`: P2P_SLOTS × size slots, 16-byte aligned (whole elements of every dtype). */
export function p2pSlotBytes(bytes: number, size: number): number {
  return Math.floor(bytes / (P2P_SLOTS * size) / 16) * 16;
}
