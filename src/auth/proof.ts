/**
 * The handshake's proof of the job token: HMAC-SHA256 keyed with the token
 * over everything that makes one direction of one connection unique, so that
 * a proof is good for that direction of that connection only.
 *
 *   "smcuda-proof" 0x00 | wire version u8
 *   | sender pid u32 | receiver pid u32
 *   | sender id (u16 length, UTF-8) | receiver id (u16 length, UTF-8)
 *   | sender nonce (32) | receiver nonce (32)
 *
 * - Both nonces are fresh per connection: a proof recorded earlier covers
 *   other nonces and is refused (replay).
 * - The sender's fields come first: a side's own proof, reflected back to it,
 *   does not verify (the two ids must differ, and they are checked to).
 * - The pids are those the kernel reports for the socket where it can
 *   (SO_PEERCRED): a process in the middle that relays one honest side's
 *   proof to another cannot make it verify, since that proof names the
 *   honest side's pid and the middle one's, not the middle one's as sender.
 * - Strings are length-prefixed, so no two field lists give the same bytes.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import { PROOF_BYTES } from '../wire/frames.js';

const LABEL = Buffer.from('smcuda-proof\0', 'latin1');

export interface ProofInput {
  version: number;
  senderPid: number;
  receiverPid: number;
  senderId: string;
  receiverId: string;
  senderNonce: Uint8Array;
  receiverNonce: Uint8Array;
}

function str(s: string): Buffer {
  const b = Buffer.from(s, 'utf8');
  const out = Buffer.allocUnsafe(2 + b.byteLength);
  out.writeUInt16LE(b.byteLength, 0);
  b.copy(out, 2);
  return out;
}

/** The PROOF_BYTES proof that `token` holder `senderId` sends to `receiverId`. */
export function computeProof(token: string, p: ProofInput): Uint8Array {
  return transcriptMac(LABEL, token, p);
}

/** HMAC-SHA256 keyed with `token` over `label` and the handshake fields of `p`, in the order the file's comment gives. */
export function transcriptMac(label: Uint8Array, token: string, p: ProofInput): Uint8Array {
  const fixed = Buffer.allocUnsafe(9);
  fixed.writeUInt8(p.version, 0);
  fixed.writeUInt32LE(p.senderPid >>> 0, 1);
  fixed.writeUInt32LE(p.receiverPid >>> 0, 5);
  const mac = createHmac('sha256', Buffer.from(token, 'utf8'));
  for (const part of [label, fixed, str(p.senderId), str(p.receiverId), p.senderNonce, p.receiverNonce]) mac.update(part);
  return new Uint8Array(mac.digest());
}

/** Whether `proof` is the one `token` gives for `p`, compared in constant time. */
export function proofMatches(token: string, p: ProofInput, proof: Uint8Array): boolean {
  if (proof.byteLength !== PROOF_BYTES) return false;
  return timingSafeEqual(computeProof(token, p), proof);
}
