// One acceptance scenario of issue 24 on the native driver, for running under
// compute-sanitizer (run-sanitizer.sh runs them all, memcheck and synccheck):
// GPU work in flight while a transport closes or a peer dies. Exits 0 when the
// scenario's outcome is right (the sanitizer's own exit code reports its
// findings); prints one line saying what happened.
//   node test/gpu/acceptance/lifetimes.mjs <scenario>
// Scenarios:
//   two-transports  two transports in this process, each with a peer sending
//                   4 × 256 MiB by RGET; the first transport closes while its
//                   copies and the second's are in flight; the second's
//                   messages all arrive with the right bytes
//   close-rget      this process receives 4 × 256 MiB by RGET and closes its
//                   transport after the first arrived (the others in flight)
//   close-rget-fd   this process sends 4 × 256 MiB of pool memory (RGET, descriptor keys);
//                   the peer closes its endpoint after the first arrived
//   close-staged    as close-rget, with IPC off: staged through the pinned rings
//   peer-sigkill    as close-rget, but the sending peer is SIGKILLed instead;
//                   the pending receives reject with PeerLostError
// Needs compiled code (`npx tsc -p .`) and a GPU. Two GPUs: peers on the second.
// SMCUDA_TEST_DRIVER=sim runs the same on the simulated driver (a dry run of the script).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { checksum, patternBytes } from '../../../dist/src/cli/demo-pattern.js';
import { WorkerClient } from '../../../dist/src/cli/worker-protocol.js';
import { openDriver } from '../../../dist/src/cuda/open-driver.js';
import { Transport } from '../../../dist/src/transport.js';

const SIZE = 256 << 20;
const COUNT = 4;
const fixture = (name) => fileURLToPath(new URL(`../../fixtures/${name}`, import.meta.url));
const scenario = process.argv[2];
const dir = mkdtempSync(join(tmpdir(), 'smcuda-accept-'));
const kind = process.env.SMCUDA_TEST_DRIVER ?? 'native';
const newDriver = async () => (await openDriver({ driver: kind })).driver;
const probe = await newDriver();
probe.init();
const peerDevice = String(probe.deviceCount() > 1 ? 1 : 0);
probe.close();

function fail(msg) {
  console.error(`${scenario}: FAILED: ${msg}`);
  process.exitCode = 1;
}

/** A transport listening here and a fault-peer.mjs (native) connected to it. */
async function withPeer(id, opts = {}) {
  const driver = await newDriver();
  const t = await Transport.create({ driver, id, device: 0, ...opts });
  const sock = join(dir, `${id}.sock`);
  await t.listen(sock);
  const accepted = new Promise((r) => t.once('endpoint', r));
  const peer = await WorkerClient.start(fixture('fault-peer.mjs'), {
    name: `peer of ${id}`,
    args: [sock],
    env: { ...process.env, SMCUDA_PEER_ID: `${id}-peer`, SMCUDA_PEER_OPTS: JSON.stringify(opts), SMCUDA_TEST_DEVICE: peerDevice, SMCUDA_TEST_DRIVER: kind },
  });
  const ep = await accepted;
  // The first device message negotiates; wait for the outcome so the rest go by RGET (or staging, IPC off).
  const warm = ep.recv({ tag: 1 });
  await peer.call('send', { tag: 1, size: 1 << 20, count: 1, seed: 1, wait: true });
  received(driver, await warm);
  for (let i = 0; i < 200 && ep.state !== 'OK' && ep.state !== 'BAD'; i++) await new Promise((r) => setTimeout(r, 10));
  return { driver, t, ep, peer };
}

/** The bytes of a received message (a new device buffer is freed). */
function received(driver, r) {
  if (!('ptr' in r.data)) return r.data;
  const out = new Uint8Array(r.length);
  driver.memcpyDtoH(out, r.data.ptr);
  driver.memFree(r.data.ptr);
  return out;
}

const settle = (p) =>
  p.then(
    (v) => ({ ok: true, v }),
    (err) => ({ ok: false, err }),
  );

/** The peer sends COUNT messages of SIZE with seeds 100.. (fill pattern); this side posts the receives. */
async function flood(s, tag) {
  const recvs = Array.from({ length: COUNT }, () => s.ep.recv({ tag }));
  await s.peer.call('send', { tag, size: SIZE, count: COUNT, seed: 100 });
  return recvs;
}

async function closeWhileReceiving(opts, expectPath) {
  const s = await withPeer('rx', opts);
  const recvs = await flood(s, 2);
  const pending = recvs.slice(1).map(settle);
  const first = await recvs[0];
  if (first.path !== expectPath) fail(`the first message came by ${first.path}, not ${expectPath}`);
  received(s.driver, first);
  await s.t.close(); // the other messages' copies are in flight
  const rest = await Promise.all(pending);
  for (const r of rest) if (r.ok) received(s.driver, r.v);
  await s.peer.exit().catch(() => s.peer.kill());
  s.driver.close();
  console.log(`${scenario}: closed with ${rest.filter((r) => !r.ok).length} of ${COUNT - 1} receives in flight rejected`);
}

try {
  if (scenario === 'two-transports') {
    const a = await withPeer('one');
    const b = await withPeer('two');
    const ra = (await flood(a, 2)).map(settle);
    const rb = (await flood(b, 2)).map(settle);
    await new Promise((r) => setTimeout(r, 1)); // copies of both in flight
    await a.t.close();
    for (const r of await Promise.all(ra)) if (r.ok) received(a.driver, r.v);
    const got = await Promise.all(rb);
    got.forEach((r, i) => {
      if (!r.ok) return fail(`transport two's message ${i} failed when transport one closed: ${r.err?.code ?? ''} ${r.err?.message}`);
      if (checksum(received(b.driver, r.v)) !== checksum(patternBytes(SIZE, 100 + i))) fail(`transport two's message ${i} has wrong bytes`);
    });
    await b.t.close();
    for (const s of [a, b]) {
      await s.peer.exit().catch(() => s.peer.kill());
      s.driver.close();
    }
    console.log(`${scenario}: transport two received ${got.filter((r) => r.ok).length} of ${COUNT} while transport one closed`);
  } else if (scenario === 'close-rget') {
    await closeWhileReceiving({}, 'rget');
  } else if (scenario === 'close-staged') {
    await closeWhileReceiving({ negotiation: { ipc: false } }, 'staging');
  } else if (scenario === 'peer-sigkill') {
    const s = await withPeer('rx');
    const recvs = await flood(s, 2);
    const pending = recvs.slice(1).map(settle);
    received(s.driver, await recvs[0]);
    await s.peer.kill(); // SIGKILL with copies out of its memory in flight
    const rest = await Promise.all(pending);
    for (const r of rest) if (r.ok) received(s.driver, r.v);
    const lost = rest.filter((r) => !r.ok);
    if (lost.some((r) => r.err?.code !== 'SMCUDA_PEER_LOST'))
      fail(`a receive failed otherwise than with SMCUDA_PEER_LOST: ${lost.map((r) => r.err?.code).join(', ')}`);
    await s.t.close();
    s.driver.close();
    console.log(`${scenario}: ${lost.length} of ${COUNT - 1} receives rejected with SMCUDA_PEER_LOST`);
  } else if (scenario === 'close-rget-fd') {
    const driver = await newDriver();
    const t = await Transport.create({ driver, id: 'tx', device: 0 });
    const sock = join(dir, 'tx.sock');
    await t.listen(sock);
    const accepted = new Promise((r) => t.once('endpoint', r));
    const peer = await WorkerClient.start(fixture('fd-path-peer.mjs'), {
      name: 'fd peer',
      args: [sock],
      env: { ...process.env, SMCUDA_TEST_DRIVER: kind, SMCUDA_TEST_DEVICE: peerDevice },
    });
    const ep = await accepted;
    const stream = driver.streamCreate();
    const pool = driver.memPoolCreate();
    const ptr = driver.memAllocFromPoolAsync(COUNT * SIZE, pool, stream);
    driver.streamSynchronize(stream);
    driver.memsetD8(ptr, 7, COUNT * SIZE);
    for (let i = 0; (ep.state !== 'OK' || !ep.stats().fd.channel) && i < 200; i++) {
      const got = peer.call('recv', { tag: 9 });
      await ep.send({ ptr, length: 4096 }, { tag: 9 });
      await got;
      await new Promise((r) => setTimeout(r, 10));
    }
    const first = peer.call('recv', { tag: 2 });
    const sends = Array.from({ length: COUNT }, (_, k) => settle(ep.send({ ptr: ptr + BigInt(k * SIZE), length: SIZE }, { tag: 2 })));
    const r = await first;
    if (r.path !== 'rget-fd') fail(`the first message came by ${r.path}, not rget-fd`);
    const rest = Array.from({ length: COUNT - 1 }, () => settle(peer.call('recv', { tag: 2 })));
    await new Promise((res) => setTimeout(res, 1));
    await peer.call('close'); // the peer's endpoint closes with its import copies in flight
    await Promise.all(rest);
    await Promise.all(sends);
    await peer.exit().catch(() => peer.kill());
    await t.close();
    driver.memFreeAsync(ptr, stream);
    driver.streamSynchronize(stream);
    driver.memPoolDestroy(pool);
    driver.close();
    console.log(`${scenario}: the receiver closed with RGET copies of descriptor keys in flight`);
  } else {
    fail(`unknown scenario (two-transports, close-rget, close-rget-fd, close-staged, peer-sigkill)`);
  }
} catch (err) {
  fail(err?.stack ?? String(err));
} finally {
  rmSync(dir, { recursive: true, force: true });
}
