// The two processes of the shutdown case of comm-failures.gpu.test.ts: a receiver that closes as
// soon as its receive is done must still report the message (its FIN goes before CLOSE), so the
// sender's send resolves. On the driver COMM_DRIVER names ('sim', the default, or 'native');
// SHUTDOWN_IPC=0 turns IPC off (device messages by staging). Prints one JSON line.
//
//   recv-close-pair.mjs send <dir> <bytes>   listens at <dir>/s.sock on device 0; once the
//                                            receiver says it is ready (a host message, tag 5)
//                                            sends <bytes> from device memory (tag 6) and prints
//                                            { state, outcome, sendMs, sum }: outcome 'resolved',
//                                            'rejected CODE: message' or 'pending after 2 s'
//   recv-close-pair.mjs recv <dir> <bytes>   connects (device 1 where two are visible, else 0),
//                                            settles the negotiation, receives tag 6 into its own
//                                            device buffer on its stream, synchronizes the stream,
//                                            closes at once, then prints { state, received, path, sum }
// Compiled code only (dist/): run `npx tsc -p .` first.
import { checksum, patternBytes } from '../../dist/src/cli/demo-pattern.js';
import { openDriver } from '../../dist/src/cuda/open-driver.js';
import { Transport } from '../../dist/src/transport.js';

const [role, dir, size] = process.argv.slice(2);
const n = Number(size);
const token = 'recv-close-pair-token';
const { driver } = await openDriver({ driver: process.env.COMM_DRIVER ?? 'sim' });
const options = { driver, token, ...(process.env.SHUTDOWN_IPC === '0' ? { negotiation: { ipc: false } } : {}) };
const say = (o) => console.log(JSON.stringify({ role, pid: process.pid, ...o }));

if (role === 'send') {
  const t = await Transport.create({ ...options, id: 'sender', device: 0 });
  await t.listen(`${dir}/s.sock`);
  const ep = await new Promise((resolve) => t.once('endpoint', resolve));
  const state = await ep.negotiate();
  const bytes = patternBytes(n, 7);
  const src = { ptr: driver.memAlloc(n), length: n };
  driver.memcpyHtoD(src.ptr, bytes);
  await ep.recv({ tag: 5 }); // the receiver's device receive is posted
  const t0 = performance.now();
  const outcome = await Promise.race([
    ep.send(src, { tag: 6 }).then(
      () => 'resolved',
      (e) => `rejected ${e.code ?? ''}: ${e.message}`,
    ),
    new Promise((r) => setTimeout(() => r('pending after 2 s'), 2000).unref()),
  ]);
  const sendMs = performance.now() - t0;
  await t.close();
  driver.memFree(src.ptr);
  driver.close();
  say({ state, outcome, sendMs, sum: checksum(bytes) });
} else if (role === 'recv') {
  const device = driver.deviceCount() > 1 ? 1 : 0;
  const t = await Transport.create({ ...options, id: 'receiver', device });
  const ep = await t.connect(`${dir}/s.sock`);
  const state = await ep.negotiate();
  const into = { ptr: driver.memAlloc(n), length: n };
  const stream = driver.streamCreate();
  const got = ep.recv({ tag: 6, into, stream });
  await ep.send(new Uint8Array(1), { tag: 5 });
  const r = await got;
  driver.streamSynchronize(stream);
  await t.close();
  const bytes = new Uint8Array(n);
  driver.memcpyDtoH(bytes, into.ptr);
  driver.memFree(into.ptr);
  driver.streamDestroy(stream);
  driver.close();
  say({ state, device, received: r.length, path: r.path, sum: checksum(bytes) });
} else {
  throw new Error(`unknown role ${role}: send or recv`);
}
