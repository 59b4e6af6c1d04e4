/**
 * The descriptor channel's set-up for a Transport (docs/protocol.md,
 * "File-descriptor memory"): the listening side serves an FdListener at
 * `<control socket path>.fd`, beside the control socket in its private
 * directory; after an authenticated handshake in which both HELLOs announced
 * Feature.FD_MEMORY, the connecting side connects there and presents the
 * token both derive from the handshake (auth/fd-token.ts), once the kernel
 * says the socket there is served by the very process that authenticated
 * (SO_PEERCRED pid; the listener checks the connector's the same way). Any failure
 * leaves the endpoint as one to a peer without FD_MEMORY: such memory goes
 * by staging, never an error.
 */
import { statSync, unlinkSync } from 'node:fs';
import { fdChannelToken } from './auth/fd-token.js';
import { FdChannel, FdListener } from './channel/fd-channel.js';
import type { PeerUidPolicy } from './channel/peer-credentials.js';
import { debug } from './debug.js';
import type { Endpoint } from './endpoint.js';
import { Feature, type HelloFrame } from './wire/frames.js';

/** The descriptor socket of a control socket at `controlPath`. */
export function fdSocketPath(controlPath: string): string {
  return `${controlPath}.fd`;
}

/** An FdListener whose socket file this process created, removed on close only if it is still that file. */
export class OwnedFdListener {
  readonly listener: FdListener;
  readonly #path: string;
  readonly #ino: number;
  readonly #dev: number;

  private constructor(path: string, listener: FdListener) {
    this.#path = path;
    this.listener = listener;
    const st = statSync(path);
    this.#ino = st.ino;
    this.#dev = st.dev;
  }

  /**
   * Serves the descriptor socket of the control socket just bound at
   * `controlPath`. Nothing at `<path>.fd` is removed here (Transport.listen
   * has removed a dead process's socket there, and refused anything else):
   * a file that appeared meanwhile makes the bind fail. Undefined when it
   * cannot be made (then peers get staging).
   */
  static open(controlPath: string, options: { peerUids?: PeerUidPolicy; onRefused?: (err: Error) => void }): OwnedFdListener | undefined {
    const path = fdSocketPath(controlPath);
    try {
      return new OwnedFdListener(path, new FdListener(path, { peerUids: options.peerUids, label: `fd:${path}`, onRefused: options.onRefused }));
    } catch (err) {
      debug('transport: no descriptor channel at %s (%s): peers get staging for VMM and pool memory', path, (err as Error).message);
      return undefined;
    }
  }

  close(): void {
    this.listener.close();
    try {
      const st = statSync(this.#path);
      if (st.ino === this.#ino && st.dev === this.#dev) unlinkSync(this.#path); // only the file we created
    } catch {
      // gone already
    }
  }
}

/** Which side of the descriptor channel this connection is: the listener's, or the connector's (with the listener's control path). */
export type FdRole = { listener: OwnedFdListener | undefined } | { connectTo: string };

/**
 * After the handshake: makes the descriptor channel if both HELLOs announced
 * FD_MEMORY and hands it to the endpoint; otherwise (or on any failure) does
 * nothing, and the endpoint stays one without it.
 */
export function setUpFdChannel(
  ep: Endpoint,
  role: FdRole | undefined,
  jobToken: string,
  local: HelloFrame,
  peer: HelloFrame,
  peerUids?: PeerUidPolicy,
  /** The peer's pid as the kernel reported it on the control channel (else its HELLO's, which the handshake bound to it). */
  peerPid: number = peer.pid,
): void {
  if (role === undefined || ((local.features ?? 0) & (peer.features ?? 0) & Feature.FD_MEMORY) === 0) return;
  const listening = 'listener' in role;
  const [l, c] = listening ? [local, peer] : [peer, local];
  const token = fdChannelToken(jobToken, {
    version: local.version,
    listenerPid: l.pid,
    connectorPid: c.pid,
    listenerId: l.peerId,
    connectorId: c.peerId,
    listenerNonce: l.nonce,
    connectorNonce: c.nonce,
  });
  const made = listening
    ? role.listener === undefined
      ? Promise.reject(new Error('this side has no descriptor listener'))
      : role.listener.listener.expect(token, undefined, peerPid)
    : // Only the process that proved the token on the control channel may be the listener here.
      FdChannel.connect(fdSocketPath(role.connectTo), token, { peerUids, label: `fd:${ep.peerId}`, listenerPid: peerPid });
  made.then(
    (channel) => {
      try {
        ep.attachFdChannel(channel);
      } catch (err) {
        channel.close(); // closed meanwhile: as if it had never been made
        debug('endpoint %s: descriptor channel lost at once (%s)', ep.peerId, (err as Error).message);
      }
    },
    (err: Error) => debug('endpoint %s: no descriptor channel (%s): VMM and pool memory goes by staging', ep.peerId, err.message),
  );
}
