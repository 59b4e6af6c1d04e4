/**
 * The descriptor channel's admission token (src/channel/fd-channel.ts),
 * derived from the authenticated handshake so that it never travels:
 * HMAC-SHA256 keyed with the job token over "smcuda-fd" 0x00 and the PROOF's
 * fields (src/auth/proof.ts) with the listening side in the sender's place.
 * Both sides know every input once both PROOFs verified; the label keeps a
 * PROOF from standing for it, and the nonces make it good for one
 * connection only. docs/protocol.md, "File-descriptor memory".
 */
import { transcriptMac } from './proof.js';

const LABEL = Buffer.from('smcuda-fd\0', 'latin1');

export interface FdTokenInput {
  version: number;
  listenerPid: number;
  connectorPid: number;
  listenerId: string;
  connectorId: string;
  listenerNonce: Uint8Array;
  connectorNonce: Uint8Array;
}

/** The 32-byte token (fd-channel's FD_TOKEN_BYTES: an HMAC-SHA256) the connecting side presents and the listening side expects. */
export function fdChannelToken(jobToken: string, p: FdTokenInput): Uint8Array {
  return transcriptMac(LABEL, jobToken, {
    version: p.version,
    senderPid: p.listenerPid,
    receiverPid: p.connectorPid,
    senderId: p.listenerId,
    receiverId: p.connectorId,
    senderNonce: p.listenerNonce,
    receiverNonce: p.connectorNonce,
  });
}
