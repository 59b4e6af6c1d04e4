/**
 * A hand-driven fake peer: one end of an in-memory channel pair whose other
 * end is attached to a real Transport. The test says HELLO, then sends any
 * bytes it likes (valid frames, crafted ones, garbage) and reads what the
 * endpoint answers, decoded.
 */
import { createMemoryChannelPair, type MemoryChannel } from '../../src/channel/memory-channel.js';
import type { Endpoint } from '../../src/endpoint.js';
import type { Transport } from '../../src/transport.js';
import { decodeFrame, encodeFrame } from '../../src/wire/codec.js';
import { type Frame, FrameType, WIRE_VERSION } from '../../src/wire/frames.js';

export interface RawPeer {
  ep: Endpoint;
  channel: MemoryChannel;
  /** Frames the endpoint sent us, decoded (HELLO first). */
  received: Frame[];
  /** The endpoint's close error (undefined while open or closed cleanly). */
  closeError: () => Error | undefined;
  send(frame: Frame | Uint8Array): void;
  /** Lets queued deliveries and the endpoint's reactions run. */
  settle(): Promise<void>;
}

export async function rawPeer(t: Transport, peerId: string, deviceUuid = ''): Promise<RawPeer> {
  const [mine, theirs] = createMemoryChannelPair({ names: [peerId, t.id] });
  const received: Frame[] = [];
  mine.on('frame', (bytes) => received.push(decodeFrame(bytes)));
  const attached = t.attach(theirs);
  mine.send(encodeFrame({ type: FrameType.HELLO, version: WIRE_VERSION, pid: 1, peerId, deviceUuid, token: '' }));
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
