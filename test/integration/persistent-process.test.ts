/**
 * Persistent transfers with a real second process (test/fixtures/transport-peer.mjs)
 * on the simulated driver: rounds cross processes with no message per
 * round, and a peer killed with SIGKILL while this side's stream waits for
 * its round fails the transfer here with a typed error and releases the
 * stream — never a hang. A register() that fails here fails the other
 * process's matching call at once, and the next pair still matches. Needs
 * compiled code (`npx tsc -p .`).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { SimulatedCudaDriver } from '../../src/cuda/sim-driver.js';
import { sweepSimSegments } from '../../src/cuda/sim/sweep.js';
import type { Endpoint } from '../../src/endpoint.js';
import { PersistentTransferError } from '../../src/errors.js';
import { Transport } from '../../src/transport.js';
import { spawnPeer } from '../helpers/child.js';
import type { WorkerClient } from '../../src/cli/worker-protocol.js';

let dir: string;
let driver: SimulatedCudaDriver;
let t: Transport;
let peer: WorkerClient | undefined;

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'smcuda-pt-'));
  driver = new SimulatedCudaDriver();
  t = await Transport.create({ driver, id: 'survivor', device: 0, persistent: { timeoutMs: 30_000 } });
  await t.listen(join(dir, 's.sock'));
});

afterEach(async () => {
  await peer?.kill();
  peer = undefined;
  sweepSimSegments();
  await t.close();
  driver.close();
  rmSync(dir, { recursive: true, force: true });
});

async function connect(): Promise<Endpoint> {
  const ep = new Promise<Endpoint>((resolve) => t.once('endpoint', resolve));
  peer = await spawnPeer('transport-peer.mjs', { args: [join(dir, 's.sock')], env: { SMCUDA_TEST_DRIVER: 'sim', SMCUDA_TEST_DEVICE: '1' } });
  return ep;
}

async function settle(stream: bigint): Promise<void> {
  const ev = driver.eventCreate({ disableTiming: true });
  driver.eventRecord(ev, stream);
  try {
    await driver.whenComplete(ev);
  } finally {
    driver.eventDestroy(ev);
  }
}

describe('persistent transfers between two processes', () => {
  it('rounds from the other process land here; its death fails the transfer and releases the waiting stream', async () => {
    const ep = await connect();
    const n = 32 * 1024;
    const dst = { ptr: driver.memAlloc(n), length: n };
    driver.memsetD8(dst.ptr, 0, n);
    const [reg, tr] = await Promise.all([
      ep.register(dst).then(async (r) => [r, await ep.persistent(r, { role: 'recv', length: n })] as const),
      peer!.call('persistent', { role: 'send', length: n }),
    ]).then(([x]) => x);
    expect(reg.peer.length).toBe(n);
    const s = driver.streamCreate();
    for (let round = 0; round < 3; round++) {
      tr.start(s);
      await peer!.call('start');
      await settle(s);
    }
    const out = new Uint8Array(n);
    driver.memcpyDtoH(out, dst.ptr);
    expect(
      Buffer.compare(
        out,
        new Uint8Array(n).map((_, i) => (i * 13 + 5) & 0xff),
      ),
    ).toBe(0);
    expect(ep.stats().received.rget.messages + ep.stats().received.staging.messages + ep.stats().received.eager.messages).toBe(0);
    // A round the peer will never send: it dies meanwhile.
    tr.start(s);
    const started = performance.now();
    peer!.child.kill('SIGKILL');
    const err = await tr.whenFailed();
    expect(err).toBeInstanceOf(PersistentTransferError);
    expect(err.code).toBe('SMCUDA_PERSISTENT_CLOSED');
    await settle(s); // the stream was released
    expect(performance.now() - started).toBeLessThan(10_000); // well before the 30 s watchdog: the lost channel did it
    expect(() => tr.start(s)).toThrow(PersistentTransferError);
  });

  it("a register() that fails here (a bad buffer) fails the other process's matching call at once; the next pair works", async () => {
    const ep = await connect();
    const n = 4096;
    const started = performance.now();
    const [here, there] = await Promise.allSettled([ep.register({ ptr: 'nope' } as never), peer!.call('persistent', { role: 'send', length: n })]);
    expect(here.status).toBe('rejected');
    expect((here as PromiseRejectedResult).reason).toBeInstanceOf(TypeError);
    expect(there.status).toBe('rejected');
    expect(String((there as PromiseRejectedResult).reason)).toMatch(/SMCUDA_PERSISTENT_PEER_FAILED|matching register\(\) call 1 failed/);
    expect(performance.now() - started).toBeLessThan(1000);
    const dst = { ptr: driver.memAlloc(n), length: n };
    driver.memsetD8(dst.ptr, 0, n);
    const [[reg, tr]] = await Promise.all([
      ep.register(dst).then(async (r) => [r, await ep.persistent(r, { role: 'recv', length: n })] as const),
      peer!.call('persistent', { role: 'send', length: n }),
    ]);
    expect(reg.id).toBe(2);
    const s = driver.streamCreate();
    tr.start(s);
    await peer!.call('start');
    await settle(s);
    const out = new Uint8Array(n);
    driver.memcpyDtoH(out, dst.ptr);
    expect(
      Buffer.compare(
        out,
        new Uint8Array(n).map((_, i) => (i * 13 + 5) & 0xff),
      ),
    ).toBe(0);
  });
});
