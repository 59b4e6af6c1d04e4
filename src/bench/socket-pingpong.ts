/**
 * The floor under any control-plane message: a plain Node Unix-socket
 * ping-pong of small fixed-size frames, no smcuda code at all. The server
 * echoes each whole frame as its own write (as a transport writes each
 * frame); the client times each round trip and halves it.
 */
import { once } from 'node:events';
import * as net from 'node:net';
import type { Repeat } from './protocol.js';

export interface EchoServer {
  path: string;
  close(): Promise<void>;
}

export async function startEchoServer(path: string, frameBytes = 64): Promise<EchoServer> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    const frame = Buffer.alloc(frameBytes);
    let pending = 0;
    socket.on('data', (chunk) => {
      pending += chunk.byteLength;
      while (pending >= frameBytes) {
        socket.write(frame);
        pending -= frameBytes;
      }
    });
    socket.on('error', () => socket.destroy());
    socket.on('close', () => sockets.delete(socket));
  });
  server.listen(path);
  await once(server, 'listening');
  return {
    path,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

/** Half round trips in µs, one per measured iteration. */
export async function pingPong(path: string, frameBytes: number, repeat: Repeat): Promise<number[]> {
  const socket = net.connect(path);
  await once(socket, 'connect');
  const frame = Buffer.alloc(frameBytes, 0x5a);
  let have = 0;
  let wake: (() => void) | undefined;
  socket.on('data', (chunk) => {
    have += chunk.byteLength;
    if (have >= frameBytes && wake) {
      have -= frameBytes;
      const w = wake;
      wake = undefined;
      w();
    }
  });
  const samples: number[] = [];
  try {
    for (let i = 0; i < repeat.warmup + repeat.iters; i++) {
      const t0 = process.hrtime.bigint();
      const back = new Promise<void>((r) => (wake = r));
      socket.write(frame);
      await back;
      if (i >= repeat.warmup) samples.push(Number(process.hrtime.bigint() - t0) / 2000);
    }
  } finally {
    socket.destroy();
  }
  return samples;
}
