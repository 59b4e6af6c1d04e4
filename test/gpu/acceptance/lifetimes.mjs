// One acceptance scenario of issue 24 or 43 on the native driver, for running under
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
// and of issue 43 (close during flight for a persistent transfer and a communicator):
//   close-persistent  a persistent transfer of 256 MiB a round from a peer; this side
//                   queues 16 rounds, the peer 8, and the transport closes once the
//                   first arrived (the rest in flight or waiting on the peer): both
//                   sides' transfers fail SMCUDA_PERSISTENT_*, their streams are
//                   released, and the destination holds the sender's bytes
//   close-persistent-ep  as close-persistent, but the endpoint closes (the transport
//                   after this side's stream was released)
//   close-comm      a communicator of 2 ranks (rank 0 a child, test/fixtures/comm-rank.mjs
//                   die-loop) allreducing 25M f32 in a loop; this rank closes with 4 of
//                   its calls queued on a stream: close() returns, its calls settle
//                   (done or SMCUDA_*), rank 0's next call fails with SMCUDA_PEER_CLOSED
//   comm-peer-sigkill  as close-comm, but rank 0 is SIGKILLed once a call completed: this
//                   rank's calls reject with SMCUDA_COMM_ABORTED (SMCUDA_PEER_LOST); it
//                   frees its buffer and closes, each in < 1 s
// Needs compiled code (`npx tsc -p .`) and a GPU. Two GPUs: peers on the second.
// SMCUDA_TEST_DRIVER=sim runs the same on the simulated driver (a dry run of the script;
// the issue 43 scenarios with smaller buffers there, as its copies are the CPU's).
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { checksum, patternBytes } from '../../../dist/src/cli/demo-pattern.js';
import { WorkerClient } from '../../../dist/src/cli/worker-protocol.js';
import { Communicator } from '../../../dist/src/collectives/communicator.js';
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
const sim = kind === 'sim';
/**
 * The persistent transfer's bytes a round, and the rounds this side queues (the peer queues half).
 * LIFETIMES_PT_MB sets the size (MiB): under compute-sanitizer 16 rounds of 256 MiB did not finish in
 * 150 s, and whether they would have is not known, so run-sanitizer.sh takes it smaller.
 */
const PT_SIZE = process.env.LIFETIMES_PT_MB ? Number(process.env.LIFETIMES_PT_MB) << 20 : sim ? 8 << 20 : 256 << 20;
const PT_ROUNDS = 16;
/** f32 elements of each allreduce of the communicator scenarios, and how many this rank keeps queued. */
const COMM_COUNT = sim ? 1_000_000 : 25_000_000;
const COMM_QUEUED = 4;

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

/** `p`, or a rejection naming `what` after `ms`: a hang fails the scenario instead of the sanitizer run. */
function within(p, ms, what) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not settle within ${ms} ms`)), ms);
  });
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

const since = (t0) => Math.round(performance.now() - t0);

/** An event recorded on `stream` now. */
function mark(driver, stream) {
  const ev = driver.eventCreate({ disableTiming: true });
  driver.eventRecord(ev, stream);
  return ev;
}

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

/** The receiver's half of a persistent transfer from the peer (pattern seed 300 there) into `dst`. */
async function persistentFromPeer(s, dst) {
  const [tr] = await Promise.all([
    s.ep.register({ ptr: dst, length: PT_SIZE }).then((reg) => s.ep.persistent(reg, { role: 'recv', length: PT_SIZE })),
    s.peer.call('persistent', { role: 'send', length: PT_SIZE, seed: 300 }),
  ]);
  return tr;
}

/** `byEndpoint`: the endpoint closes (its transport after the stream was released), else the transport. */
async function closePersistent(byEndpoint) {
  const s = await withPeer('pt');
  const { driver, peer } = s;
  const dst = driver.memAlloc(PT_SIZE);
  driver.memsetD8(dst, 0, PT_SIZE);
  const tr = await persistentFromPeer(s, dst);
  const stream = driver.streamCreate();
  const marks = Array.from({ length: PT_ROUNDS }, () => {
    tr.start(stream);
    return mark(driver, stream);
  });
  // The peer starts half: the other rounds wait on it, so some are in flight whatever the GPU's speed.
  await peer.call('start', { count: PT_ROUNDS / 2 });
  await within(driver.whenComplete(marks[0]), 30_000, 'the first round');
  const done = marks.filter((ev) => driver.eventQuery(ev)).length;
  const t0 = performance.now();
  if (byEndpoint) s.ep.close();
  else await within(s.t.close(), 10_000, 'the transport close');
  const closeMs = since(t0);
  // The close released the waits of the rounds left (each wait resets its word: one watchdog tick a round).
  await within(driver.whenComplete(marks.at(-1)), 10_000, 'the stream after the close');
  const releasedMs = since(t0);
  if (byEndpoint) await within(s.t.close(), 10_000, 'the transport close');
  if (tr.error?.code !== 'SMCUDA_PERSISTENT_CLOSED') fail(`the transfer here failed with ${tr.error?.code}, not SMCUDA_PERSISTENT_CLOSED`);
  const later = settle(Promise.resolve().then(() => tr.start(stream)));
  if ((await later).err?.code !== 'SMCUDA_PERSISTENT_CLOSED') fail('a start after the close did not throw SMCUDA_PERSISTENT_CLOSED');
  const there = await peer.call('ptSettled', { ms: 20_000 });
  if (!there.settled || !/^SMCUDA_PERSISTENT_/.test(there.code ?? ''))
    fail(`the peer's transfer: ${there.code ?? 'did not fail'}, its stream ${there.settled ? 'released' : 'stuck'}`);
  const out = new Uint8Array(PT_SIZE);
  driver.memcpyDtoH(out, dst);
  if (!Buffer.from(out.buffer).equals(Buffer.from(patternBytes(PT_SIZE, 300).buffer))) fail("the destination does not hold the sender's bytes");
  for (const ev of marks) driver.eventDestroy(ev);
  driver.streamDestroy(stream);
  // Freed once the peer is gone: it maps the destination until its transport closes.
  await peer.exit().catch(() => peer.kill());
  driver.memFree(dst);
  driver.close();
  console.log(
    `${scenario}: the ${byEndpoint ? 'endpoint' : 'transport'} closed in ${closeMs} ms with ${PT_ROUNDS - done} of ${PT_ROUNDS} rounds in flight (the peer started ${PT_ROUNDS / 2}), the stream released after ${releasedMs} ms; both transfers failed (${tr.error?.code}, peer ${there.code}), the bytes right`,
  );
}

/** Rank 0 of a job of 2 in a child: comm-rank.mjs's die-loop (allreduces until one fails); its exit, with its last line parsed. */
function rankZero(rendezvous) {
  const env = { ...process.env, COMM_DRIVER: kind, COMM_MODE: 'die-loop', COMM_COUNT: String(COMM_COUNT) };
  Object.assign(env, { RANK: '0', WORLD_SIZE: '2', LOCAL_RANK: peerDevice, SMCUDA_RENDEZVOUS: rendezvous });
  const child = spawn(process.execPath, [fixture('comm-rank.mjs')], { env, stdio: ['ignore', 'pipe', 'inherit'] });
  process.once('exit', () => child.kill('SIGKILL')); // a failed scenario leaves no rank behind
  let out = '';
  child.stdout.on('data', (b) => (out += b));
  const exit = new Promise((resolve) =>
    child.on('exit', (code, signal) => {
      const line = out.trim().split('\n').pop();
      let report;
      try {
        report = line ? JSON.parse(line) : undefined;
      } catch {
        report = { unparsed: line };
      }
      resolve({ code, signal, report });
    }),
  );
  return { child, exit };
}

/** This process as rank 1 with rank 0 in a child, past the barrier that starts rank 0's loop; a buffer and a stream for the calls. */
async function commPair() {
  const rendezvous = join(dir, 'comm');
  mkdirSync(rendezvous, { mode: 0o700 }); // the rendezvous refuses a directory others can enter
  const peer = rankZero(rendezvous);
  const driver = await newDriver();
  // This driver is the caller's: close() leaves it open, so the buffer is freed after.
  const comm = await Communicator.create({ rank: 1, size: 2, dir: rendezvous, driver, device: 0, timeoutMs: 30_000 });
  const grads = driver.memAlloc(COMM_COUNT * 4);
  driver.memsetD8(grads, 0, COMM_COUNT * 4);
  const stream = driver.streamCreate();
  await comm.barrier();
  return { driver, comm, peer, grads, stream };
}

/** An allreduce matching rank 0's loop, queued on `stream`. */
const allreduce = (c) => c.comm.allreduce({ send: c.grads, count: COMM_COUNT, dtype: 'f32', op: 'avg', stream: c.stream });

/** Frees the pair's buffer and stream, timed, after its close. */
function freePair(c) {
  const t0 = performance.now();
  c.driver.memFree(c.grads);
  c.driver.streamDestroy(c.stream);
  return since(t0);
}

async function closeComm() {
  const c = await commPair();
  await within(allreduce(c), 30_000, 'the first allreduce');
  const calls = Array.from({ length: COMM_QUEUED }, () => settle(allreduce(c)));
  const t0 = performance.now();
  await within(c.comm.close(), 10_000, 'close()');
  const closeMs = since(t0);
  const mine = await within(Promise.all(calls), 10_000, "this rank's calls after close()");
  const untyped = mine.filter((r) => !r.ok && !/^SMCUDA_/.test(r.err?.code ?? ''));
  if (untyped.length > 0) fail(`calls in flight failed untyped: ${untyped.map((r) => r.err?.message).join('; ')}`);
  const freeMs = freePair(c);
  const zero = await within(c.peer.exit, 30_000, "rank 0's exit");
  const cause = zero.report?.error?.causeCode;
  if (zero.code !== 0 || cause !== 'SMCUDA_PEER_CLOSED') fail(`rank 0 exited ${zero.code ?? zero.signal} with ${JSON.stringify(zero.report)}`);
  c.driver.close();
  const done = mine.filter((r) => r.ok).length;
  console.log(
    `${scenario}: close() returned in ${closeMs} ms with ${COMM_QUEUED} allreduces in flight (${done} completed, ${COMM_QUEUED - done} ${[...new Set(mine.filter((r) => !r.ok).map((r) => r.err.code))].join('/') || 'failed'}); rank 0 got ${zero.report?.error?.code} (${cause}); freed in ${freeMs} ms`,
  );
}

async function commPeerSigkill() {
  const c = await commPair();
  const queued = [];
  let completed = 0;
  let error;
  try {
    for (;;) {
      while (queued.length < COMM_QUEUED) queued.push(allreduce(c));
      await within(queued.shift(), 30_000, 'an allreduce with rank 0 dead');
      // Killed once a call completed: mid-loop, with calls queued behind it whatever the driver's speed.
      if (++completed === 1) c.peer.child.kill('SIGKILL');
    }
  } catch (err) {
    error = err;
  }
  const rest = await within(Promise.all(queued.map(settle)), 10_000, 'the calls queued after the abort');
  const errors = [error, ...rest.filter((r) => !r.ok).map((r) => r.err)];
  const wrong = errors.filter((e) => e?.code !== 'SMCUDA_COMM_ABORTED' || e?.causeCode !== 'SMCUDA_PEER_LOST' || e?.failedRank !== 0);
  if (wrong.length > 0)
    fail(`calls failed otherwise than SMCUDA_COMM_ABORTED (SMCUDA_PEER_LOST, rank 0): ${wrong.map((e) => `${e?.code} ${e?.message}`).join('; ')}`);
  const freeMs = freePair(c);
  const t0 = performance.now();
  await within(c.comm.close(), 10_000, 'close()');
  const closeMs = since(t0);
  if (freeMs >= 1000 || closeMs >= 1000) fail(`freeing took ${freeMs} ms, close() ${closeMs} ms: not both < 1 s`);
  const zero = await within(c.peer.exit, 10_000, "rank 0's exit");
  if (zero.signal !== 'SIGKILL') fail(`rank 0 was not SIGKILLed: it exited ${zero.code} with ${JSON.stringify(zero.report)}`);
  c.driver.close();
  console.log(
    `${scenario}: rank 0 SIGKILLed once an allreduce completed here (${completed} completed in all); ${errors.length} calls rejected with ${error?.code} (${error?.causeCode}); freed in ${freeMs} ms, closed in ${closeMs} ms`,
  );
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
  } else if (scenario === 'close-persistent') {
    await closePersistent(false);
  } else if (scenario === 'close-persistent-ep') {
    await closePersistent(true);
  } else if (scenario === 'close-comm') {
    await closeComm();
  } else if (scenario === 'comm-peer-sigkill') {
    await commPeerSigkill();
  } else {
    fail(
      'unknown scenario (two-transports, close-rget, close-rget-fd, close-staged, peer-sigkill, close-persistent, close-persistent-ep, close-comm, comm-peer-sigkill)',
    );
  }
} catch (err) {
  fail(err?.stack ?? String(err));
  setTimeout(() => process.exit(), 5_000).unref(); // a handle left by the failure must not hang the sanitizer run
} finally {
  rmSync(dir, { recursive: true, force: true });
}
