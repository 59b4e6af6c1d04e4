/**
 * The soak's traffic plan. Every message is a pure function of
 * (sender, receiver, index): its kind (host, small device, large device),
 * its size, its pattern seed and, for device messages, where it sits in the
 * round's device arena. Sender and receiver compute the same plan, so the
 * receiver posts a receive of exactly the right kind and size and checks
 * every byte, with nothing but the messages themselves on the wire.
 */

export type SoakKind = 'host' | 'device-small' | 'device-large';

export interface PlannedMessage {
  index: number;
  kind: SoakKind;
  size: number;
  seed: number;
  /** Device messages: byte offset in the pair's arena (valid for one round). */
  offset: number;
}

/** Messages in flight per pair and direction before the two sides sync again. */
export const SOAK_WINDOW = 64;
/** Device arena per pair and direction: one round's device messages must fit. */
export const SOAK_ARENA_BYTES = 2 << 20;
/** Host arena per pair (receive side): one round of host messages. */
export const SOAK_HOST_MAX = 1024;

/** Messages from `src` to `dst` when `count` are spread evenly over every ordered pair. */
export function pairCount(count: number, ranks: number, src: number, dst: number): number {
  const pairs = ranks * (ranks - 1);
  const index = src * (ranks - 1) + (dst < src ? dst : dst - 1);
  return Math.floor(count / pairs) + (index < count % pairs ? 1 : 0);
}

function mix(a: number, b: number, c: number): number {
  let h = (Math.imul(a + 1, 0x9e3779b1) ^ Math.imul(b + 7, 0x85ebca77) ^ Math.imul(c + 13, 0xc2b2ae3d)) >>> 0;
  h ^= h >>> 16;
  h = Math.imul(h, 0x7feb352d) >>> 0;
  h ^= h >>> 15;
  return h >>> 0;
}

/** Mostly small host messages; some small device (eager), a few large device (RGET or staging). */
function kindAndSize(seed: number): { kind: SoakKind; size: number } {
  const roll = seed % 100;
  const r = seed >>> 8;
  if (roll < 88) return { kind: 'host', size: r % (SOAK_HOST_MAX + 1) };
  if (roll < 98) return { kind: 'device-small', size: 1 + (r % 8192) };
  return { kind: 'device-large', size: (64 << 10) + (r % (192 << 10)) };
}

/** Round `round` of the messages from `src` to `dst` (of `total` in all). */
export function planRound(src: number, dst: number, round: number, total: number): PlannedMessage[] {
  const out: PlannedMessage[] = [];
  let arena = 0;
  const end = Math.min(total, (round + 1) * SOAK_WINDOW);
  for (let index = round * SOAK_WINDOW; index < end; index++) {
    const seed = mix(src, dst, index);
    let { kind, size } = kindAndSize(seed);
    let offset = 0;
    if (kind !== 'host') {
      const at = (arena + 255) & ~255; // aligned, like separate allocations would be
      if (at + size > SOAK_ARENA_BYTES) {
        // The round's arena is full: this one goes as host data (both sides agree).
        kind = 'host';
        size = size % (SOAK_HOST_MAX + 1);
      } else {
        offset = at;
        arena = at + size;
      }
    }
    out.push({ index, kind, size, seed, offset });
  }
  return out;
}

export function roundCount(nOut: number, nIn: number): number {
  return Math.ceil(Math.max(nOut, nIn) / SOAK_WINDOW);
}
