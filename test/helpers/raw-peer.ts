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
import { type Frame, FrameType } from '../../src/wire/frames.js';

export interface RawPeer {
  ep: Endpoint;
  channel: MemoryChannel;
  /** Frames the endpoint sent us, decoded (HELLO and PROOF first). */
  received: Frame[];
  /** The endpoint's close error (undefined while open or closed cleanly). */
  closeError: () => Error | undefined;
  send(frame: Frame | Uint8Array): void;
  /** Lets queued deliveries and the endpoint's reactions run. */
  settle(): Promise<void>;
}

export async function rawPeer(t: Transport, peerId: string, deviceUuid = '', token = ''): Promise<RawPeer> {
  const [mine, theirs] = createMemoryChannelPair({ names: [peerId, t.id] });
  const received: Frame[] = [];
  const hs = new Handshake({ id: peerId, token, deviceUuid, features: 0, pid: 1 });
  mine.on('frame', (bytes) => {
    const frame = decodeFrame(bytes);
    received.push(frame);
    if (!hs.authenticated && (frame.type === FrameType.HELLO || frame.type === FrameType.PROOF)) {
      const step = hs.receive(frame);
      if (step.kind === 'proof') mine.send(encodeFrame(step.proof));
    }
  });
  const attached = t.attach(theirs);
  mine.send(encodeFrame(hs.hello));
  const ep = await attached;
  let closeError: Error | undefined;
  ep.once('close', (err) => (closeError = err));
  return {
    ep,
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
