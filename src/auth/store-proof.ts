/**
 * The TCP store's proofs of the job token (src/collectives/tcp-store*.ts):
 * HMAC-SHA256 keyed with the token over "smcuda-store" 0x00 and the
 * handshake's fields (proof.ts's transcript), one proof each way. The
 * client proves first, over both nonces; the store answers with its own
 * proof only to a client that proved, so a connection without the token
 * learns nothing it could replay or test guesses against offline beyond
 * one refused attempt per connection. The sender's id comes first, so
 * neither side's proof verifies as the other's. Process ids mean nothing
 * across machines and are left 0.
 */
import { timingSafeEqual } from 'node:crypto';
import { transcriptMac } from './proof.js';

const LABEL = Buffer.from('smcuda-store\0', 'latin1');
export const STORE_PROOF_BYTES = 32;

/** The proof `sender` ('client' or 'store') gives over its own nonce and the other side's. */
export function storeProof(token: string, version: number, sender: 'client' | 'store', senderNonce: Uint8Array, receiverNonce: Uint8Array): Uint8Array {
  return transcriptMac(LABEL, token, {
    version,
    senderPid: 0,
    receiverPid: 0,
    senderId: sender,
    receiverId: sender === 'client' ? 'store' : 'client',
    senderNonce,
    receiverNonce,
  });
}

/** Whether `proof` is `sender`'s, compared in constant time. */
export function storeProofMatches(
  token: string,
  version: number,
  sender: 'client' | 'store',
  senderNonce: Uint8Array,
  receiverNonce: Uint8Array,
  proof: Uint8Array,
): boolean {
  if (proof.byteLength !== STORE_PROOF_BYTES) return false;
  return timingSafeEqual(storeProof(token, version, sender, senderNonce, receiverNonce), proof);
}
