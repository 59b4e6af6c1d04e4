/**
 * Two ShmChannels' ring-segment ports joined by a real descriptor channel
 * (FdChannel.pair(): a socketpair with SCM_RIGHTS), each side with its own
 * SegmentExchange, as two endpoints have: the rings' sealed segments
 * really travel as descriptors between them.
 */
import { FdChannel } from '../../src/channel/fd-channel.js';
import type { RingSegmentPort } from '../../src/channel/shm-channel.js';
import { loadAddon } from '../../src/cuda/addon.js';
import { SegmentExchange } from '../../src/segment-exchange.js';
import { decodeFrame } from '../../src/wire/codec.js';
import { FrameType, SegmentKind } from '../../src/wire/frames.js';

const closeFd = (fd: number) => {
  try {
    loadAddon().fdClose(fd);
  } catch {
    // closed already
  }
};

export function portOver(channel: FdChannel): RingSegmentPort {
  const ex = new SegmentExchange(true, 'peer', closeFd);
  ex.attach(channel);
  channel.start({
    message: (m) => {
      const f = decodeFrame(m.meta);
      if (f.type === FrameType.SEGMENT && m.fd !== undefined) ex.receive(f.kind, m.fd, f.bytes);
      else if (m.fd !== undefined) closeFd(m.fd);
    },
  });
  return { send: (seg) => ex.send(SegmentKind.CONTROL_RING, seg), take: (t) => ex.take(SegmentKind.CONTROL_RING, t), closeFd };
}

/** Ports for side a and side b, and a close for both descriptor channels. */
export function ringPortPair(): { a: RingSegmentPort; b: RingSegmentPort; close(): void } {
  const [x, y] = FdChannel.pair();
  return { a: portOver(x), b: portOver(y), close: () => (x.close(), y.close()) };
}
