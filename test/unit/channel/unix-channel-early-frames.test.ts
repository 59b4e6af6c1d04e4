/**
 * A frame that arrives before the channel's user has attached its 'frame'
 * listener (Deno emits the peer's first frame in the same microtask run as
 * 'connect', before `await connectUnix()` returns to the caller) is held, not
 * lost: the handshake saw the peer's PROOF first when its HELLO was dropped.
 */
import { Duplex } from 'node:stream';
import type * as net from 'node:net';
import { describe, expect, it } from 'vitest';
import { UnixChannel } from '../../../src/channel/unix-channel.js';
import { lengthPrefix } from '../../../src/channel/framing.js';

/** A socket stand-in whose incoming bytes the test pushes. */
function fakeSocket(): Duplex {
  return new Duplex({
    read() {},
    write(_c, _e, cb) {
      cb();
    },
  });
}

const framed = (body: number[]) => Buffer.concat([lengthPrefix(body.length), Buffer.from(body)]);

describe('unix channel: frames before the first listener', () => {
  for (const split of ['one chunk', 'byte by byte'] as const) {
    it(`frames pushed before a listener attached after several awaits all arrive, in order (${split})`, async () => {
      const socket = fakeSocket();
      const ch = new UnixChannel(socket as unknown as net.Socket, 'fake', { handshakeFrameBytes: 64 });
      // As under Deno: the bytes come once the socket would flow, still before the caller listens.
      await new Promise((r) => process.nextTick(r));
      const bytes = Buffer.concat([framed([1, 1, 1]), framed([2, 2]), framed([3])]);
      if (split === 'one chunk') socket.push(bytes);
      else for (const b of bytes) socket.push(Buffer.from([b]));
      for (let i = 0; i < 10; i++) await Promise.resolve(); // the awaits between connect and listening
      const got: number[][] = [];
      ch.on('frame', (f) => got.push([...f]));
      await new Promise((r) => setImmediate(r));
      await new Promise((r) => setImmediate(r));
      expect(got).toEqual([[1, 1, 1], [2, 2], [3]]);
      ch.close();
    });
  }
});
