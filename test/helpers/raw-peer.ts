/**
 * A hand-driven fake peer: one end of an in-memory channel pair whose other
 * end is attached to a real Transport. The fake peer completes the handshake
 * honestly (HELLO, PROOF with the given token), then sends any bytes it likes (valid frames, crafted ones, garbage) and reads what the
 * endpoint answers, decoded.
 */
import { createMemoryChannelPair, type MemoryChannel } from '../../src/channel/memory-channel.js';
import type { Endpoint } from '../../src/endpoint.js';
import type { Transport } from '../../src/transport.js';
import { decodeFrame, encodeFrame } from '../../src/wire/codec.js';
import { Handshake } from '../../src/auth/handshake.js';
import { Feature, type Frame, FrameType } from '../../src/wire/frames.js';
import { FdChannel } from '../../src/channel/fd-channel.js';
import { loadAddon } from '../../src/cuda/addon.js';

export interface RawPeer {
  ep: Endpoint;
  /** Our end of the descriptor channel (rawPeer with `descriptors: true`): send any descriptor with any metadata. */
  fd?: FdChannel;
  channel: MemoryChannel;
  /** Frames the endpoint sent us, decoded (HELLO and PROOF first). */
  received: Frame[];
  /** The endpoint's close error (undefined while open or closed cleanly). */
  closeError: () => Error | undefined;
  send(frame: Frame | Uint8Array): void;
  /** Lets queued deliveries and the endpoint's reactions run. */
  settle(): Promise<void>;
}

/** `o.descriptors`: announce Feature.DESCRIPTORS and hand the transport a descriptor channel to us (`features`: more bits). */
export async function rawPeer(
  t: Transport,
  peerId: string,
  deviceUuid = '',
  token = '',
  o: { descriptors?: boolean; features?: number } = {},
): Promise<RawPeer> {
  const [mine, theirs] = createMemoryChannelPair({ names: [peerId, t.id] });
  const received: Frame[] = [];
  const [ourFd, theirFd] = o.descriptors ? FdChannel.pair() : [undefined, undefined];
  const features = (o.descriptors ? Feature.DESCRIPTORS : 0) | (o.features ?? 0);
  const hs = new Handshake({ id: peerId, token, deviceUuid, features, pid: 1 });
  mine.on('frame', (bytes) => {
    const frame = decodeFrame(bytes);
    received.push(frame);
    if (!hs.authenticated && (frame.type === FrameType.HELLO || frame.type === FrameType.PROOF)) {
      const step = hs.receive(frame);
      if (step.kind === 'proof') mine.send(encodeFrame(step.proof));
    }
  });
  const attached = t.attach(theirs, { descriptors: theirFd });
  mine.send(encodeFrame(hs.hello));
  const ep = await attached;
  let closeError: Error | undefined;
  ep.once('close', (err) => (closeError = err));
  ourFd?.start({ message: (m) => m.fd !== undefined && loadAddon().fdClose(m.fd) });
  return {
    ep,
    fd: ourFd,
    channel: mine,
    received,
    closeError: () => closeError,
    send(frame) {
      if (!mine.closed) mine.send(frame instanceof Uint8Array ? frame : encodeFrame(frame));
    },
    async settle() {
      for (let i = 0; i < 10; i++) await new Promise((r) => setImmediate(r));
    },
  };
}
