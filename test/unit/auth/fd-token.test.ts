/** The descriptor channel's token, derived from the handshake (src/auth/fd-token.ts). */
import { describe, expect, it } from 'vitest';
import { fc, test } from '@fast-check/vitest';
import { fdChannelToken, type FdTokenInput } from '../../../src/auth/fd-token.js';
import { computeProof } from '../../../src/auth/proof.js';
import { FD_TOKEN_BYTES } from '../../../src/channel/fd-channel.js';

const nonce = fc.uint8Array({ minLength: 32, maxLength: 32 });
const input = fc.record({
  version: fc.integer({ min: 1, max: 255 }),
  listenerPid: fc.nat(),
  connectorPid: fc.nat(),
  listenerId: fc.string({ minLength: 1, maxLength: 20 }),
  connectorId: fc.string({ minLength: 1, maxLength: 20 }),
  listenerNonce: nonce,
  connectorNonce: nonce,
});

describe('fdChannelToken', () => {
  test.prop([input, fc.string({ minLength: 1 })], { numRuns: 100 })('both sides derive the same 32 bytes, and a PROOF is not it', (p, jobToken) => {
    const t = fdChannelToken(jobToken, p);
    expect(t.byteLength).toBe(FD_TOKEN_BYTES);
    expect(fdChannelToken(jobToken, { ...p })).toEqual(t);
    const proof = computeProof(jobToken, {
      version: p.version,
      senderPid: p.listenerPid,
      receiverPid: p.connectorPid,
      senderId: p.listenerId,
      receiverId: p.connectorId,
      senderNonce: p.listenerNonce,
      receiverNonce: p.connectorNonce,
    });
    expect(Buffer.from(proof).equals(Buffer.from(t))).toBe(false);
  });

  it('changes with every input: another connection, token or role gets another token', () => {
    const p: FdTokenInput = {
      version: 2,
      listenerPid: 10,
      connectorPid: 20,
      listenerId: 'a',
      connectorId: 'b',
      listenerNonce: new Uint8Array(32).fill(1),
      connectorNonce: new Uint8Array(32).fill(2),
    };
    const t = Buffer.from(fdChannelToken('job', p));
    const variants: FdTokenInput[] = [
      { ...p, version: 3 },
      { ...p, listenerPid: 11 },
      { ...p, connectorPid: 21 },
      { ...p, listenerId: 'c' },
      { ...p, connectorId: 'c' },
      { ...p, listenerNonce: new Uint8Array(32).fill(3) },
      { ...p, connectorNonce: new Uint8Array(32).fill(3) },
      { ...p, listenerPid: 20, connectorPid: 10, listenerId: 'b', connectorId: 'a', listenerNonce: p.connectorNonce, connectorNonce: p.listenerNonce },
    ];
    for (const v of variants) expect(Buffer.from(fdChannelToken('job', v)).equals(t)).toBe(false);
    expect(Buffer.from(fdChannelToken('job2', p)).equals(t)).toBe(false);
  });
});
