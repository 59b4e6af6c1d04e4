// A runtime that already has a channel between its processes carries smcuda's
// control frames over it: implement ControlChannel and pass it to
// `transport.attach(channel)` instead of listen/connect.
//
//   node own-control-plane.mjs
//
// Here the runtime's channel is Node's IPC between a parent and the child it
// forked (structured clone, so frames stay binary). smcuda needs only that
// whole frames arrive in order, and a 'close' once. Device data moves by CUDA
// IPC once negotiated; until then, since this channel cannot carry file
// descriptors and so no shared ring can reach the peer, it travels inline on
// this channel (attach(channel, { descriptors }) takes a descriptor channel
// where the runtime has one: docs/reliability.md, "Trust").
import { fork } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { fileURLToPath } from 'node:url';
import { isDeviceBuffer, Transport } from 'smcuda';

/** A ControlChannel over a child_process IPC link (`process` in the child, the ChildProcess in the parent). */
class IpcControlChannel extends EventEmitter {
  closed = false;
  constructor(link, label) {
    super();
    this.link = link;
    this.label = label;
    this.onMessage = (m) => {
      if (m && m.smcuda instanceof Uint8Array) this.emit('frame', m.smcuda);
    };
    link.on('message', this.onMessage);
    link.once('disconnect', () => this.finish());
    // A frame sent as the other side exits fails later, as an 'error' on the ChildProcess: the channel is gone.
    if (link !== process) link.on('error', () => this.finish());
  }
  send(frame) {
    if (this.closed || !this.link.connected) throw Object.assign(new Error(`${this.label} is closed`), { code: 'SMCUDA_CLOSED' });
    return this.link.send({ smcuda: frame }); // false: above the high-water mark; the frame is still queued
  }
  close() {
    this.finish();
  }
  finish() {
    if (this.closed) return;
    this.closed = true;
    this.link.off('message', this.onMessage);
    this.emit('close');
  }
}

const SIZE = 256 * 1024;
const byteAt = (i) => (i ^ 0x5a) & 0xff;

if (process.argv[2] !== 'child') {
  const token = randomBytes(16).toString('hex');
  const child = fork(fileURLToPath(import.meta.url), ['child'], { serialization: 'advanced', env: { ...process.env, EXAMPLE_TOKEN: token } });
  const exited = new Promise((resolve) => child.once('exit', resolve));
  const t = await Transport.create({ driver: 'auto', id: 'parent', token });
  try {
    const ep = await t.attach(new IpcControlChannel(child, 'ipc:parent->child'));
    const msg = await ep.recv({ tag: 1 }); // no `into`: device messages arrive in a new allocation we own
    if (!isDeviceBuffer(msg.data)) throw new Error('expected device memory');
    const host = new Uint8Array(msg.length);
    t.driver.memcpyDtoH(host, msg.data.ptr);
    t.driver.memFree(msg.data.ptr);
    const bad = host.findIndex((b, i) => b !== byteAt(i));
    if (bad >= 0) throw new Error(`byte ${bad} differs`);
    await ep.send(Buffer.from('thanks'), { tag: 2 }); // host bytes go eagerly, inline in a control frame
    console.log(`parent: ${msg.length} device bytes by ${msg.path} over ${ep.peerId}'s own channel, every byte checked`);
    const code = await exited;
    if (code !== 0) throw new Error(`child exited with ${code}`);
  } finally {
    await t.close();
  }
} else {
  const t = await Transport.create({ driver: 'auto', id: 'child', token: process.env.EXAMPLE_TOKEN });
  const ep = await t.attach(new IpcControlChannel(process, 'ipc:child->parent'));
  const ptr = t.driver.memAlloc(SIZE);
  const host = new Uint8Array(SIZE).map((_, i) => byteAt(i));
  t.driver.memcpyHtoD(ptr, host);
  await ep.send({ ptr, length: SIZE }, { tag: 1 });
  t.driver.memFree(ptr);
  const reply = await ep.recv({ tag: 2 });
  console.log(`child: parent says ${Buffer.from(reply.data).toString()}`);
  await t.close();
  process.disconnect();
}
