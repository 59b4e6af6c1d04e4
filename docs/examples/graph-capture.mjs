// A persistent transfer captured in a CUDA graph and replayed with no host
// work per round.
//
//   node graph-capture.mjs [replays]
//
// Rank 0 (this process) starts rank 1 (this file again). Both register a
// device buffer with each other — rank 1 its source, rank 0 its
// destination — and make the two halves of one persistent transfer. Each
// captures one start of it in a CUDA graph and launches the graph `replays`
// times: every replay waits for the peer's flag, copies 64 KiB through the
// mapping and raises the peer's flag, all on the GPU. Rank 1 writes fresh
// bytes before each checked replay; rank 0 checks every byte. Without a GPU
// the simulated driver runs it and says so.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Transport } from 'smcuda';

const SIZE = 64 << 10;
const REPLAYS = Number(process.argv[3] ?? process.argv[2] ?? 100) || 100;
const byteAt = (round, i) => (i * 31 + round * 7) & 0xff;

/** Captures one start of `transfer` on a fresh stream: the graph a training step would hold. */
function capture(driver, transfer) {
  const stream = driver.streamCreate();
  driver.streamBeginCapture(stream);
  transfer.start(stream);
  const graph = driver.streamEndCapture(stream);
  return { stream, graph, exec: driver.graphInstantiate(graph) };
}

async function finished(driver, stream) {
  const ev = driver.eventCreate({ disableTiming: true });
  driver.eventRecord(ev, stream);
  await driver.whenComplete(ev);
  driver.eventDestroy(ev);
}

/** Both ranks, with `role` 'recv' (rank 0) or 'send' (rank 1). */
async function run(t, ep, role, say) {
  const d = t.driver;
  const buf = { ptr: d.memAlloc(SIZE), length: SIZE };
  const reg = await ep.register(buf); // collective: the peer registers its buffer at the same time
  const transfer = await ep.persistent(reg, { role, length: SIZE });
  const g = capture(d, transfer);
  const host = new Uint8Array(SIZE);
  const barrier = () => Promise.all([ep.send(new Uint8Array(0), { tag: 1 }), ep.recv({ tag: 1 })]);
  try {
    // 1. Replays back to back: the host only launches.
    const t0 = performance.now();
    for (let k = 0; k < REPLAYS; k++) d.graphLaunch(g.exec, g.stream);
    const hostUs = ((performance.now() - t0) * 1000) / REPLAYS;
    await finished(d, g.stream);
    say(`${REPLAYS} replays launched, ${hostUs.toFixed(1)} µs of host time per replay`);
    // 2. Three replays with fresh bytes each, every byte checked.
    for (let round = 1; round <= 3; round++) {
      await barrier();
      if (role === 'send') {
        for (let i = 0; i < SIZE; i++) host[i] = byteAt(round, i);
        d.memcpyHtoD(buf.ptr, host);
      }
      d.graphLaunch(g.exec, g.stream);
      await finished(d, g.stream);
      if (role === 'recv') {
        d.memcpyDtoH(host, buf.ptr);
        for (let i = 0; i < SIZE; i++) if (host[i] !== byteAt(round, i)) throw new Error(`round ${round}: byte ${i} is ${host[i]}`);
        say(`replay with fresh data ${round}: ${SIZE} bytes, every byte checked`);
      }
    }
    transfer.check(); // throws SMCUDA_PERSISTENT_* if the transfer failed on either side
    await barrier();
  } finally {
    d.graphExecDestroy(g.exec);
    d.graphDestroy(g.graph);
    await transfer.close();
    await reg.deregister(); // returns once the peer deregistered too
    d.streamDestroy(g.stream);
    d.memFree(buf.ptr);
  }
}

async function rank0() {
  const dir = mkdtempSync(join(tmpdir(), 'smcuda-example-'));
  const socket = join(dir, 'rank0.sock');
  const token = randomBytes(16).toString('hex');
  const t = await Transport.create({ driver: 'auto', device: 0, id: 'rank0', token });
  console.log(`rank0: ${t.driverReason}`);
  try {
    await t.listen(socket);
    const endpoint = new Promise((resolve) => t.once('endpoint', resolve));
    const child = spawn(process.execPath, [fileURLToPath(import.meta.url), 'rank1', String(REPLAYS)], { env: { ...process.env, EXAMPLE_SOCKET: socket, EXAMPLE_TOKEN: token }, stdio: 'inherit' });
    const exited = new Promise((resolve) => child.once('exit', resolve));
    await run(t, await endpoint, 'recv', (line) => console.log(`rank0: ${line}`));
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
    await run(t, await t.connect(process.env.EXAMPLE_SOCKET), 'send', (line) => console.log(`rank1: ${line}`));
  } finally {
    await t.close();
  }
}

await (process.argv[2] === 'rank1' ? rank1() : rank0());
