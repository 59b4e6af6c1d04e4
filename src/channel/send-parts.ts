/**
 * Sending a frame given as parts (codec.encodeFrameParts) on any channel:
 * through `sendParts` where the channel has it (no copy), else concatenated.
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

/** Sends the concatenation of `parts` as one frame; returns what `send` returns. */
export function sendFrameParts(channel: ControlChannel, parts: readonly Uint8Array[]): boolean {
  return channel.sendParts ? channel.sendParts(parts) : channel.send(concatBytes(parts));
}
