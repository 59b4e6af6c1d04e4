/**
 * Frame bytes: one frame given as parts (a SPILL: its head, then the frame it
 * carries), sent through `sendParts` where the channel has it and joined
 * where not, and copies of bytes out of memory that will be reused (a ring
 * entry).
 */
import type { ControlChannel } from './channel.js';

/** One new Uint8Array holding `parts` back to back. */
export function concatBytes(parts: readonly Uint8Array[]): Uint8Array {
  if (parts.length === 1) return parts[0]!;
  let n = 0;
  for (const p of parts) n += p.byteLength;
  const out = new Uint8Array(n);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.byteLength;
  }
  return out;
}

/**
 * A copy of `src` carved from Node's shared pool. A fresh ArrayBuffer per
 * small copy (a frame out of a ring, a handle out of a frame) costs more
 * than the work around it (measured); a pool slice is never handed out
 * twice, so the copy stays valid as long as it is referenced.
 */
export function copyBytes(src: Uint8Array): Uint8Array {
  const b = Buffer.allocUnsafe(src.byteLength);
  b.set(src);
  return new Uint8Array(b.buffer, b.byteOffset, src.byteLength);
}

/**
 * Sends the concatenation of `parts` as one frame; returns what `send` returns.
 * Through `sendParts` the frame is not copied: ShmChannel's SPILL of a 16 MiB
 * host message over a Unix socket took about half the time it took
 * joined first (development machine, one frame at a time).
 */
export function sendFrameParts(channel: ControlChannel, parts: readonly Uint8Array[]): boolean {
  return channel.sendParts ? channel.sendParts(parts) : channel.send(concatBytes(parts));
}
