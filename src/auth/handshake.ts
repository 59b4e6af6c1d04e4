/**
 * Connection set-up: who the peer is, and whether it knows the job token,
 * without the token ever crossing the wire. Each side runs one Handshake.
 *
 *   both at once:   HELLO {version, pid, id, device, features, nonce}
 *   on the peer's HELLO:  PROOF {HMAC(token, …both nonces…)}  (proof.ts)
 *   on the peer's PROOF:  verified → authenticated
 *
 * One round trip in all: each side sends HELLO at once, and its PROOF as soon
 * as the peer's HELLO is in. A side learns nothing from the peer's PROOF but
 * "it knows the token", and gives nothing away but an HMAC over a nonce of its
 * own choosing. Until it is authenticated the peer may send only these two
 * frames, each of at most MAX_HANDSHAKE_FRAME_BYTES; anything else refuses
 * the connection.
 */
import { randomBytes } from 'node:crypto';
import { AccessDeniedError, BadTokenError, ProtocolError } from '../errors.js';
import { HEADER_BYTES, MAX_PEER_ID_BYTES } from '../wire/codec.js';
import { type Frame, FrameType, type HelloFrame, NONCE_BYTES, PROOF_BYTES, type ProofFrame, UUID_BYTES, WIRE_VERSION } from '../wire/frames.js';
import { computeProof, type ProofInput, proofMatches } from './proof.js';

/** The largest handshake frame: a HELLO with the longest id (319 bytes). */
export const MAX_HANDSHAKE_FRAME_BYTES = Math.max(HEADER_BYTES + 1 + 4 + UUID_BYTES + 2 + MAX_PEER_ID_BYTES + NONCE_BYTES + 4, HEADER_BYTES + PROOF_BYTES);

export interface HandshakeOptions {
  id: string;
  /** The job token ('' when none is configured: the proof then shows only that the peer has none either). */
  token: string;
  deviceUuid: string;
  features: number;
  /** This process's pid. Default process.pid. */
  pid?: number;
  /**
   * The peer's pid as the kernel reports it for this connection
   * (SO_PEERCRED), when the channel knows it; otherwise the pid the peer's
   * HELLO claims is used.
   */
  peerPid?: number;
  /** Source of the nonce; default crypto.randomBytes. */
  random?: (n: number) => Uint8Array;
}

/** What the caller does after a frame: send `proof` (peer's HELLO is in), or the peer is authenticated. */
export type HandshakeStep = { kind: 'proof'; peer: HelloFrame; proof: ProofFrame } | { kind: 'authenticated'; peer: HelloFrame };

export class Handshake {
  /** Our HELLO: send it first. */
  readonly hello: HelloFrame;
  readonly #token: string;
  readonly #kernelPeerPid: number | undefined;
  #peer: HelloFrame | undefined;
  #state: 'hello' | 'proof' | 'done' | 'failed' = 'hello';

  constructor(o: HandshakeOptions) {
    this.#token = o.token;
    this.#kernelPeerPid = o.peerPid;
    const nonce = (o.random ?? randomBytes)(NONCE_BYTES);
    this.hello = {
      type: FrameType.HELLO,
      version: WIRE_VERSION,
      pid: o.pid ?? process.pid,
      peerId: o.id,
      deviceUuid: o.deviceUuid,
      nonce: new Uint8Array(nonce),
      features: o.features,
    };
  }

  get authenticated(): boolean {
    return this.#state === 'done';
  }

  /** The peer's HELLO, once received (not yet proven before `authenticated`). */
  get peer(): HelloFrame | undefined {
    return this.#peer;
  }

  /** Feeds one frame from the peer. Throws (and stays failed) on anything but the next handshake frame, or a wrong proof. */
  receive(frame: Frame): HandshakeStep {
    try {
      return this.#receive(frame);
    } catch (err) {
      this.#state = 'failed';
      throw err;
    }
  }

  #receive(frame: Frame): HandshakeStep {
    switch (this.#state) {
      case 'hello': {
        if (frame.type !== FrameType.HELLO) throw new ProtocolError(`expected HELLO first, got ${FrameType[frame.type]}: refused`);
        this.#checkHello(frame);
        this.#peer = frame;
        this.#state = 'proof';
        return { kind: 'proof', peer: frame, proof: { type: FrameType.PROOF, proof: computeProof(this.#token, this.#ours(frame)) } };
      }
      case 'proof': {
        const peer = this.#peer!;
        if (frame.type !== FrameType.PROOF) throw new ProtocolError(`expected PROOF after HELLO from ${peer.peerId}, got ${FrameType[frame.type]}: refused`);
        if (!proofMatches(this.#token, this.#theirs(peer), frame.proof)) {
          throw new BadTokenError(`peer ${peer.peerId} (pid ${peer.pid}) could not prove the job token: refused. Give both sides the same 'token' option.`);
        }
        this.#state = 'done';
        return { kind: 'authenticated', peer };
      }
      default:
        throw new ProtocolError(`handshake frame ${FrameType[frame.type]} after the handshake ${this.#state === 'done' ? 'completed' : 'failed'}`);
    }
  }

  #checkHello(h: HelloFrame): void {
    if (h.peerId === this.hello.peerId)
      throw new ProtocolError(`peer claims this transport's own id ${h.peerId}: refused (ids must be unique in a job)`, 'SMCUDA_DUPLICATE_PEER');
    if (Buffer.compare(h.nonce, this.hello.nonce) === 0)
      throw new AccessDeniedError(`peer ${h.peerId} sent back this side's own nonce: a reflected HELLO, refused`);
    const kernel = this.#kernelPeerPid;
    if (kernel !== undefined && kernel !== h.pid) {
      throw new AccessDeniedError(
        `peer ${h.peerId} says it is pid ${h.pid} but the kernel reports pid ${kernel} for the connection: refused. ` +
          'Either another process relays the connection, or the peer runs in another pid namespace (run every process of the job in one, e.g. docker --pid=host).',
        'SMCUDA_PEER_PID',
      );
    }
  }

  /** What our PROOF covers: we are the sender. */
  #ours(peer: HelloFrame): ProofInput {
    const me = this.hello;
    return {
      version: WIRE_VERSION,
      senderPid: me.pid,
      receiverPid: this.#kernelPeerPid ?? peer.pid,
      senderId: me.peerId,
      receiverId: peer.peerId,
      senderNonce: me.nonce,
      receiverNonce: peer.nonce,
    };
  }

  /** What the peer's PROOF must cover: it is the sender. */
  #theirs(peer: HelloFrame): ProofInput {
    const me = this.hello;
    return {
      version: WIRE_VERSION,
      senderPid: this.#kernelPeerPid ?? peer.pid,
      receiverPid: me.pid,
      senderId: peer.peerId,
      receiverId: me.peerId,
      senderNonce: peer.nonce,
      receiverNonce: me.nonce,
    };
  }
}
