/**
 * Registered memory and persistent transfers between two transports on
 * simulated drivers (two "processes" to the simulator): registration is
 * collective and maps once, rounds move the bytes with no frame per round,
 * graphs replay them, the watchdog turns a stuck start into a typed error
 * on both sides, and closing or deregistering fails transfers cleanly.
 */
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { DeviceBuffer } from '../../../src/buffers.js';
import type { CudaDriver } from '../../../src/cuda/driver.js';
import { PersistentTransferError } from '../../../src/errors.js';
import { startGroup, startSequence } from '../../../src/persistent/transfers.js';
import { deviceWith, makePair, randomBytes, readDevice, type Pair } from '../../helpers/transport-pair.js';

let pair: Pair | undefined;
afterEach(async () => {
  await pair?.close();
  pair = undefined;
});

const open = (timeoutMs = 10_000) => makePair({ a: { persistent: { timeoutMs } }, b: { persistent: { timeoutMs } } });

function zeros(d: CudaDriver, n: number): DeviceBuffer {
  return deviceWith(d, new Uint8Array(n));
}

async function settle(d: CudaDriver, stream: bigint): Promise<void> {
  const ev = d.eventCreate({ disableTiming: true });
  d.eventRecord(ev, stream);
  try {
    await d.whenComplete(ev);
  } finally {
    d.eventDestroy(ev);
  }
}

describe('registered memory', () => {
  it('both sides register together; each maps the other buffer once, until both deregister', async () => {
    pair = await open();
    const { a, b } = pair;
    const bufA = deviceWith(a.driver, randomBytes(4096, 1));
    const bufB = deviceWith(b.driver, randomBytes(8192, 2));
    const [ra, rb] = await Promise.all([a.ep.register(bufA), b.ep.register(bufB)]);
    expect(ra.id).toBe(rb.id);
    expect(ra.peer.length).toBe(8192);
    expect(rb.peer.length).toBe(4096);
    const seen = new Uint8Array(4096);
    b.driver.memcpyDtoH(seen, rb.peer.ptr); // B reads A's buffer through its mapping
    expect(Buffer.compare(seen, randomBytes(4096, 1))).toBe(0);
    expect(b.ep.stats().cache.openMappings).toBe(1);
    // A second registration of the same allocation maps nothing new.
    const [ra2, rb2] = await Promise.all([a.ep.register(bufA), b.ep.register({ ptr: bufB.ptr + 64n, length: 64 })]);
    expect(b.ep.stats().cache.openMappings).toBe(1);
    expect(b.ep.stats().cache.opens).toBe(1);
    expect(ra2.peer.ptr).toBe(ra.peer.ptr + 64n);
    // One side deregisters: still mapped until the other does too.
    let aDone = false;
    const da = ra.deregister().then(() => (aDone = true));
    await new Promise((r) => setTimeout(r, 20));
    expect(aDone).toBe(false);
    expect(ra.state).toBe('deregistering');
    await Promise.all([da, rb.deregister()]);
    expect(ra.state).toBe('released');
    expect(rb.state).toBe('released');
    await Promise.all([ra2.deregister(), rb2.deregister()]);
  });

  it('refuses what is not device memory, before any frame', async () => {
    pair = await open();
    await expect(pair.a.ep.register(new Uint8Array(8) as never)).rejects.toThrow(TypeError);
    await expect(pair.a.ep.register({ ptr: 1n << 40n, length: 0 })).rejects.toThrow(RangeError);
  });
});

describe('persistent transfers', () => {
  async function transferPair(p: Pair, n: number) {
    const src = deviceWith(p.a.driver, randomBytes(n, 7));
    const dst = zeros(p.b.driver, n);
    const [ra, rb] = await Promise.all([p.a.ep.register(src), p.b.ep.register(dst)]);
    const [ta, tb] = await Promise.all([p.a.ep.persistent(ra, { role: 'send', length: n }), p.b.ep.persistent(rb, { role: 'recv', length: n })]);
    return { src, dst, ra, rb, ta, tb };
  }

  it('each round copies the source into the destination, with no message per round', async () => {
    pair = await open();
    const p = pair;
    const n = 64 * 1024;
    const { src, dst, ta, tb } = await transferPair(p, n);
    const sa = p.a.driver.streamCreate();
    const sb = p.b.driver.streamCreate();
    for (let round = 1; round <= 5; round++) {
      p.a.driver.memcpyHtoD(src.ptr, randomBytes(n, round));
      ta.start(sa);
      tb.start(sb);
      await Promise.all([settle(p.a.driver, sa), settle(p.b.driver, sb)]);
      expect(Buffer.compare(readDevice(p.b.driver, dst), randomBytes(n, round))).toBe(0);
    }
    const moved = (st: ReturnType<typeof p.a.ep.stats>) =>
      Object.values(st.sent).reduce((k, c) => k + c.messages, 0) + Object.values(st.received).reduce((k, c) => k + c.messages, 0);
    expect(moved(p.a.ep.stats()) + moved(p.b.ep.stats())).toBe(0);
    expect(ta.state).toBe('armed');
  });

  it("follows each transfer's life in its machine, and traces every change of state", async () => {
    const trace = join(mkdtempSync(join(tmpdir(), 'smcuda-pt-')), 'a.jsonl');
    pair = await makePair({ a: { trace, persistent: { timeoutMs: 120 } }, b: { persistent: { timeoutMs: 120 } } });
    const p = pair;
    const { ta, tb } = await transferPair(p, 128);
    expect(ta.machineState).toBe('armed');
    const sa = p.a.driver.streamCreate();
    const sb = p.b.driver.streamCreate();
    ta.start(sa);
    expect(ta.machineState).toBe('replaying');
    tb.start(sb);
    await Promise.all([settle(p.a.driver, sa), settle(p.b.driver, sb)]);
    for (let k = 0; k < 100 && ta.machineState !== 'armed'; k++) await new Promise((r) => setTimeout(r, 5));
    expect(ta.machineState).toBe('armed');
    ta.start(sa); // a round the receiver never starts: stuck, then closed
    await ta.whenFailed();
    expect(ta.machineState).toBe('closed');
    await p.a.transport.close();
    const recs = readFileSync(trace, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .filter((r) => r.kind === 'persistent');
    expect(recs.map((r) => `${r.from}→${r.to}`)).toEqual([
      'registered→armed',
      'armed→replaying',
      'replaying→armed',
      'armed→replaying',
      'replaying→stuck',
      'stuck→closed',
    ]);
    expect(recs.at(-1)).toMatchObject({ transfer: ta.id, role: 'send', reason: 'SMCUDA_PERSISTENT_STUCK', peer: 'b' });
  });

  it('the receiver starting first waits; the sender never overwrites a round the receiver has not released', async () => {
    pair = await open();
    const p = pair;
    const n = 1024;
    const { src, dst, ta, tb } = await transferPair(p, n);
    const sa = p.a.driver.streamCreate();
    const sb = p.b.driver.streamCreate();
    tb.start(sb);
    await new Promise((r) => setTimeout(r, 20));
    expect(readDevice(p.b.driver, dst).every((x) => x === 0)).toBe(true);
    ta.start(sa);
    await Promise.all([settle(p.a.driver, sa), settle(p.b.driver, sb)]);
    expect(Buffer.compare(readDevice(p.b.driver, dst), randomBytes(n, 7))).toBe(0);
    // Round 2 from the sender alone: it must wait for the receiver's next start.
    p.a.driver.memcpyHtoD(src.ptr, randomBytes(n, 99));
    ta.start(sa);
    await new Promise((r) => setTimeout(r, 30));
    expect(Buffer.compare(readDevice(p.b.driver, dst), randomBytes(n, 7))).toBe(0);
    tb.start(sb);
    await Promise.all([settle(p.a.driver, sa), settle(p.b.driver, sb)]);
    expect(Buffer.compare(readDevice(p.b.driver, dst), randomBytes(n, 99))).toBe(0);
  });

  it('captured in graphs on both sides and replayed, every replay delivers its round', async () => {
    pair = await open();
    const p = pair;
    const n = 4096;
    const { src, dst, ta, tb } = await transferPair(p, n);
    const [da, db] = [p.a.driver, p.b.driver];
    const [ca, cb] = [da.streamCreate(), db.streamCreate()];
    const [la, lb] = [da.streamCreate(), db.streamCreate()];
    da.streamBeginCapture(ca);
    ta.start(ca);
    const ga = da.streamEndCapture(ca);
    db.streamBeginCapture(cb);
    tb.start(cb);
    const gb = db.streamEndCapture(cb);
    const [ea, eb] = [da.graphInstantiate(ga), db.graphInstantiate(gb)];
    for (let k = 1; k <= 20; k++) {
      da.memcpyHtoD(src.ptr, randomBytes(n, 1000 + k));
      da.graphLaunch(ea, la);
      db.graphLaunch(eb, lb);
      await Promise.all([settle(da, la), settle(db, lb)]);
      expect(Buffer.compare(readDevice(db, dst), randomBytes(n, 1000 + k))).toBe(0);
    }
    ta.check();
    tb.check();
    for (const [d, e, g] of [
      [da, ea, ga],
      [db, eb, gb],
    ] as const) {
      d.graphExecDestroy(e);
      d.graphDestroy(g);
    }
  });

  it('both directions on one stream per side, in one captured graph each (startGroup): every replay exchanges both rounds', async () => {
    pair = await open();
    const p = pair;
    const [da, db] = [p.a.driver, p.b.driver];
    const n = 2048;
    const aOut = deviceWith(da, randomBytes(n, 1));
    const aIn = zeros(da, n);
    const bOut = deviceWith(db, randomBytes(n, 2));
    const bIn = zeros(db, n);
    // A registration pairs a sender's source with the receiver's destination: the two sides register in matching order.
    const [r1a, r1b] = await Promise.all([p.a.ep.register(aOut), p.b.ep.register(bIn)]);
    const [r2a, r2b] = await Promise.all([p.a.ep.register(aIn), p.b.ep.register(bOut)]);
    const [a1, b1] = await Promise.all([p.a.ep.persistent(r1a, { role: 'send', length: n }), p.b.ep.persistent(r1b, { role: 'recv', length: n })]);
    const [a2, b2] = await Promise.all([p.a.ep.persistent(r2a, { role: 'recv', length: n }), p.b.ep.persistent(r2b, { role: 'send', length: n })]);
    const [ca, cb] = [da.streamCreate(), db.streamCreate()];
    // Each side lists its transfers in a different order: the grouping, not the order, avoids waiting on itself.
    da.streamBeginCapture(ca);
    startGroup(ca, [a2, a1]);
    const ea = da.graphInstantiate(da.streamEndCapture(ca));
    db.streamBeginCapture(cb);
    startGroup(cb, [b2, b1]);
    const eb = db.graphInstantiate(db.streamEndCapture(cb));
    for (let k = 0; k < 5; k++) {
      da.memcpyHtoD(aOut.ptr, randomBytes(n, 10 + k));
      db.memcpyHtoD(bOut.ptr, randomBytes(n, 20 + k));
      da.graphLaunch(ea, ca);
      db.graphLaunch(eb, cb);
      await Promise.all([settle(da, ca), settle(db, cb)]);
      expect(Buffer.compare(readDevice(db, bIn), randomBytes(n, 10 + k))).toBe(0);
      expect(Buffer.compare(readDevice(da, aIn), randomBytes(n, 20 + k))).toBe(0);
    }
    // Two rounds of one transfer in one group would announce READY twice at once (a flag, not a counter).
    expect(() => startGroup(ca, [a1, a2, a1])).toThrow(/each transfer once/);
  });

  it("flags: 'kernel' — the flag operations as launches of the flag kernel, captured and replayed both ways; the watchdog still releases a stuck one", async () => {
    pair = await open(150);
    const p = pair;
    const [da, db] = [p.a.driver, p.b.driver];
    const n = 1024;
    const aOut = deviceWith(da, randomBytes(n, 1));
    const bIn = zeros(db, n);
    const bOut = deviceWith(db, randomBytes(n, 2));
    const aIn = zeros(da, n);
    const [r1a, r1b] = await Promise.all([p.a.ep.register(aOut), p.b.ep.register(bIn)]);
    const [r2a, r2b] = await Promise.all([p.a.ep.register(aIn), p.b.ep.register(bOut)]);
    // Each side chooses for itself: a runs its flags in the kernel, b's receive too, b's send by stream memory operations.
    const [a1, b1] = await Promise.all([
      p.a.ep.persistent(r1a, { role: 'send', length: n, flags: 'kernel' }),
      p.b.ep.persistent(r1b, { role: 'recv', length: n, flags: 'kernel' }),
    ]);
    const [a2, b2] = await Promise.all([
      p.a.ep.persistent(r2a, { role: 'recv', length: n, flags: 'kernel' }),
      p.b.ep.persistent(r2b, { role: 'send', length: n }),
    ]);
    const launches = { a: 0, b: 0, bBatches: 0 };
    const spy = (d: CudaDriver, k: 'a' | 'b') => {
      const launch = d.launchKernel.bind(d);
      d.launchKernel = (...args) => (launches[k]++, launch(...args));
      if (k === 'b') {
        const batch = d.streamBatchMemOp.bind(d);
        d.streamBatchMemOp = (...args) => (launches.bBatches++, batch(...args));
      }
    };
    spy(da, 'a');
    spy(db, 'b');
    const [ca, cb] = [da.streamCreate(), db.streamCreate()];
    da.streamBeginCapture(ca);
    startSequence(ca, [a1, a2]); // a sends, then receives
    const ea = da.graphInstantiate(da.streamEndCapture(ca));
    db.streamBeginCapture(cb);
    startSequence(cb, [b1, b2]); // b receives, then sends: mixed flags, so stream memory operations
    const eb = db.graphInstantiate(db.streamEndCapture(cb));
    expect(launches.a).toBeGreaterThan(0);
    expect(launches.b).toBe(0);
    expect(launches.bBatches).toBeGreaterThan(0);
    for (let k = 0; k < 4; k++) {
      da.memcpyHtoD(aOut.ptr, randomBytes(n, 10 + k));
      db.memcpyHtoD(bOut.ptr, randomBytes(n, 20 + k));
      da.graphLaunch(ea, ca);
      db.graphLaunch(eb, cb);
      await Promise.all([settle(da, ca), settle(db, cb)]);
      expect(Buffer.compare(readDevice(db, bIn), randomBytes(n, 10 + k))).toBe(0);
      expect(Buffer.compare(readDevice(da, aIn), randomBytes(n, 20 + k))).toBe(0);
    }
    da.graphLaunch(ea, ca); // a replays once more than b: stuck in its kernel's wait, released by the watchdog
    const [ea1, eb1] = await Promise.all([a1.whenFailed(), b1.whenFailed()]);
    expect([ea1.code, eb1.code].sort()).toEqual(['SMCUDA_PERSISTENT_PEER_FAILED', 'SMCUDA_PERSISTENT_STUCK']);
    await settle(da, ca);
  });

  it("flags: 'kernel' with 8-byte rounds: the kernel copies the words itself (no copy-engine copy), every replay lands", async () => {
    pair = await open();
    const p = pair;
    const [da, db] = [p.a.driver, p.b.driver];
    const n = 8;
    const src = deviceWith(da, randomBytes(n, 1));
    const dst = zeros(db, n);
    const [ra, rb] = await Promise.all([p.a.ep.register(src), p.b.ep.register(dst)]);
    const [ta, tb] = await Promise.all([
      p.a.ep.persistent(ra, { role: 'send', length: n, flags: 'kernel' }),
      p.b.ep.persistent(rb, { role: 'recv', length: n, flags: 'kernel' }),
    ]);
    let copies = 0;
    const copy = da.memcpyAsync.bind(da);
    da.memcpyAsync = (...args) => (copies++, copy(...args));
    const [ca, cb] = [da.streamCreate(), db.streamCreate()];
    da.streamBeginCapture(ca);
    startSequence(ca, [ta, ta, ta]); // three rounds per replay
    const ea = da.graphInstantiate(da.streamEndCapture(ca));
    db.streamBeginCapture(cb);
    startSequence(cb, [tb, tb, tb]);
    const eb = db.graphInstantiate(db.streamEndCapture(cb));
    expect(copies).toBe(0);
    for (let k = 0; k < 5; k++) {
      da.memcpyHtoD(src.ptr, randomBytes(n, 30 + k));
      da.graphLaunch(ea, ca);
      db.graphLaunch(eb, cb);
      await Promise.all([settle(da, ca), settle(db, cb)]);
      expect(Buffer.compare(readDevice(db, dst), randomBytes(n, 30 + k))).toBe(0);
    }
    ta.check();
    tb.check();
  });

  it("flags: 'kernel' is refused where the driver cannot load modules, and a bad flags value is a TypeError", async () => {
    pair = await open();
    const p = pair;
    const src = deviceWith(p.a.driver, randomBytes(64, 3));
    const dst = zeros(p.b.driver, 64);
    const [ra, rb] = await Promise.all([p.a.ep.register(src), p.b.ep.register(dst)]);
    await expect(p.a.ep.persistent(ra, { role: 'send', length: 64, flags: 'gpu' as 'kernel' })).rejects.toThrow(TypeError);
    const status = p.b.driver.gpuDrivenStatus.bind(p.b.driver);
    p.b.driver.gpuDrivenStatus = () => ({ ...status(), modules: false, reason: 'no modules here' });
    await expect(p.b.ep.persistent(rb, { role: 'recv', length: 64, flags: 'kernel' })).rejects.toMatchObject({ code: 'SMCUDA_PERSISTENT_UNSUPPORTED' });
  });

  it('calls that do not match fail on both sides with SMCUDA_PERSISTENT_MISMATCH', async () => {
    pair = await open();
    const p = pair;
    const x = deviceWith(p.a.driver, randomBytes(256, 1));
    const y = zeros(p.b.driver, 256);
    const [ra, rb] = await Promise.all([p.a.ep.register(x), p.b.ep.register(y)]);
    const results = await Promise.allSettled([p.a.ep.persistent(ra, { role: 'send', length: 256 }), p.b.ep.persistent(rb, { role: 'send', length: 256 })]);
    for (const r of results) {
      expect(r.status).toBe('rejected');
      expect((r as PromiseRejectedResult).reason).toBeInstanceOf(PersistentTransferError);
      expect((r as PromiseRejectedResult).reason.code).toBe('SMCUDA_PERSISTENT_MISMATCH');
    }
  });

  it('replay counts that differ: the watchdog releases the stuck wait and both sides get SMCUDA_PERSISTENT_STUCK / PEER_FAILED', async () => {
    pair = await open(150);
    const p = pair;
    const n = 512;
    const { ta, tb } = await transferPair(p, n);
    const sa = p.a.driver.streamCreate();
    const sb = p.b.driver.streamCreate();
    ta.start(sa);
    tb.start(sb);
    await Promise.all([settle(p.a.driver, sa), settle(p.b.driver, sb)]);
    ta.start(sa); // one more round than the receiver will ever start
    const [ea, eb] = await Promise.all([ta.whenFailed(), tb.whenFailed()]);
    expect(ea.code).toBe('SMCUDA_PERSISTENT_STUCK');
    expect(eb.code).toBe('SMCUDA_PERSISTENT_PEER_FAILED');
    await settle(p.a.driver, sa); // the stream was released, not left hanging
    expect(() => ta.start(sa)).toThrow(PersistentTransferError);
    // Graph replays of a failed transfer run through (poisoned every tick), they never hang.
    const c = p.b.driver.streamCreate();
    p.b.driver.streamBeginCapture(c);
    expect(() => tb.start(c)).toThrow(PersistentTransferError);
    p.b.driver.graphDestroy(p.b.driver.streamEndCapture(c));
  });

  it('a dead peer: closing its endpoint fails the transfer here and releases the waiting stream', async () => {
    pair = await open(10_000);
    const p = pair;
    const { tb } = await transferPair(p, 256);
    const db = p.b.driver;
    const sb = db.streamCreate();
    const cap = db.streamCreate();
    db.streamBeginCapture(cap);
    tb.start(cap);
    const exec = db.graphInstantiate(db.streamEndCapture(cap));
    tb.start(sb); // waits for a round the sender will never start
    db.graphLaunch(exec, sb); // and replays queued behind it
    db.graphLaunch(exec, sb);
    p.a.ep.close('the sender goes away');
    const err = await tb.whenFailed();
    expect(err).toBeInstanceOf(PersistentTransferError);
    expect(err.code).toBe('SMCUDA_PERSISTENT_CLOSED');
    await settle(db, sb); // released: every queued replay ran through
    db.graphLaunch(exec, sb); // a replay after the failure runs through too
    await settle(db, sb);
  });

  it('deregistering waits for eager rounds in flight, then closes the transfers on it on both sides', async () => {
    pair = await open();
    const p = pair;
    const n = 256;
    const { ra, rb, ta, tb } = await transferPair(p, n);
    const sa = p.a.driver.streamCreate();
    const sb = p.b.driver.streamCreate();
    ta.start(sa);
    const deregA = ra.deregister();
    let released = false;
    void deregA.then(() => (released = true));
    await new Promise((r) => setTimeout(r, 20));
    expect(released).toBe(false); // the sender's round waits for the receiver: in flight
    tb.start(sb);
    await Promise.all([deregA, rb.deregister()]);
    expect(ta.state).toBe('closed');
    expect(tb.state).toBe('closed');
    expect(() => ta.start(sa)).toThrow(PersistentTransferError);
  });

  it('a slot freed by a closed transfer is reused clean: the next transfers there neither pass on its poison nor hang', async () => {
    // Two slots per side: the third pair of transfers must reuse a slot whose words the first pair's close poisoned.
    pair = await makePair({ a: { persistent: { timeoutMs: 2000, flagSlots: 2 } }, b: { persistent: { timeoutMs: 2000, flagSlots: 2 } } });
    const p = pair;
    const n = 1024;
    const sa = p.a.driver.streamCreate();
    const sb = p.b.driver.streamCreate();
    for (let gen = 0; gen < 4; gen++) {
      const { src, dst, ra, rb, ta, tb } = await transferPair(p, n);
      for (let round = 1; round <= 3; round++) {
        p.a.driver.memcpyHtoD(src.ptr, randomBytes(n, 100 * gen + round));
        // The receiver starts first: a stale DONE would let it read the destination before the round's bytes.
        tb.start(sb);
        const waiting = p.b.driver.eventCreate({ disableTiming: true });
        p.b.driver.eventRecord(waiting, sb);
        let passed = false;
        const reached = p.b.driver.whenComplete(waiting).then(() => (passed = true));
        await new Promise((r) => setTimeout(r, 20));
        expect(passed).toBe(false); // still waiting for this round's DONE
        ta.start(sa);
        await reached;
        p.b.driver.eventDestroy(waiting);
        await Promise.all([settle(p.a.driver, sa), settle(p.b.driver, sb)]);
        expect(Buffer.compare(readDevice(p.b.driver, dst), randomBytes(n, 100 * gen + round))).toBe(0);
      }
      ta.check();
      tb.check();
      await Promise.all([ta.close(), tb.close()]);
      await Promise.all([ra.deregister(), rb.deregister()]);
    }
  });
});
