// Two processes exchange 4 MiB of device memory over smcuda.
//
//   node two-process.mjs
//
// Rank 0 (this process) listens on a Unix socket and starts rank 1 (this file
// again). Rank 1 allocates device memory through its Transport's driver,
// fills it and sends it; rank 0 receives it into its own device memory and
// checks every byte. With a GPU, 'auto' picks the CUDA driver and the message
// moves by CUDA IPC (RGET); without one, the simulated driver is used and
// says so. The first message waits for the IPC negotiation (one of at most
// 1 MiB would go inline through the host meanwhile).
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { isDeviceBuffer, Transport } from 'smcuda';

const SIZE = 4 << 20;
const TAG = 7;
const byteAt = (i) => (i * 31 + 7) & 0xff;

async function rank0() {
  const dir = mkdtempSync(join(tmpdir(), 'smcuda-example-')); // 0700: only this user reaches the socket
  const socket = join(dir, 'rank0.sock');
  const token = randomBytes(16).toString('hex'); // both ranks must know it; it never crosses the wire
  const t = await Transport.create({ driver: 'auto', device: 0, id: 'rank0', token });
  console.log(`rank0: ${t.driverReason}`);
  try {
    await t.listen(socket);
    const endpoint = new Promise((resolve) => t.once('endpoint', resolve));
    const child = spawn(process.execPath, [fileURLToPath(import.meta.url), 'rank1'], {
      env: { ...process.env, EXAMPLE_SOCKET: socket, EXAMPLE_TOKEN: token },
      stdio: 'inherit',
    });
    const exited = new Promise((resolve) => child.once('exit', resolve));

    const ep = await endpoint;
    const into = { ptr: t.driver.memAlloc(SIZE), length: SIZE };
    try {
      // The first GPU message starts the CUDA IPC negotiation and waits for
      // it; once the endpoint is OK, messages move by RGET.
      for (let n = 0; n < 2; n++) {
        const msg = await ep.recv({ tag: TAG, into });
        if (!isDeviceBuffer(msg.data)) throw new Error('expected device memory');
        const host = new Uint8Array(SIZE);
        t.driver.memcpyDtoH(host, msg.data.ptr);
        for (let i = 0; i < SIZE; i++) {
          if (host[i] !== byteAt(i)) throw new Error(`byte ${i} is ${host[i]}, expected ${byteAt(i)}`);
        }
        console.log(`rank0: received ${msg.length} bytes by ${msg.path} from ${ep.peerId}, every byte checked`);
      }
      console.log(`rank0: negotiation ${ep.stats().negotiation.path.join('→')}`);
    } finally {
      t.driver.memFree(into.ptr);
    }
    const code = await exited;
    if (code !== 0) throw new Error(`rank1 exited with ${code}`);
  } finally {
    await t.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

async function rank1() {
  const t = await Transport.create({ driver: 'auto', device: 0, id: 'rank1', token: process.env.EXAMPLE_TOKEN });
  try {
    const ep = await t.connect(process.env.EXAMPLE_SOCKET);
    const ptr = t.driver.memAlloc(SIZE); // device memory, as a bigint pointer
    try {
      const host = new Uint8Array(SIZE);
      for (let i = 0; i < SIZE; i++) host[i] = byteAt(i);
      // From pageable memory, cuMemcpyHtoD may return before the device has the
      // bytes; a send without `stream` is ordered after it (the legacy stream).
      t.driver.memcpyHtoD(ptr, host);
      // The first device send starts the CUDA IPC negotiation and waits for it:
      // it goes by RGET once the negotiation is OK (by staging if it ends BAD).
      const settled = new Promise((resolve) => ep.on('state', (s) => (s === 'OK' || s === 'BAD') && resolve(s)));
      await ep.send({ ptr, length: SIZE }, { tag: TAG }); // resolves when the buffer may be reused
      console.log(`rank1: sent ${SIZE} bytes of device memory; negotiation ${await settled}`);
      await ep.send({ ptr, length: SIZE }, { tag: TAG });
      console.log(`rank1: sent ${SIZE} bytes of device memory`);
    } finally {
      t.driver.memFree(ptr);
    }
  } finally {
    await t.close();
  }
}

await (process.argv[2] === 'rank1' ? rank1() : rank0());
