/**
 * Registered memory of every kind: VMM and pool memory are registered
 * through RGET's descriptor side's offer (one RemoteKey, opened as an RGET's), so two
 * transports joined by a Unix socket (the descriptor channel needs one)
 * register a VMM range on one side and a pool allocation on the other and
 * run a persistent transfer between them.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, expect, it } from 'vitest';
import { SimulatedCudaDriver } from '../../../src/cuda/sim-driver.js';
import type { Endpoint } from '../../../src/endpoint.js';
import { Transport } from '../../../src/transport.js';
import { randomBytes } from '../../helpers/transport-pair.js';

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

it('a VMM range here and a pool allocation there: registered both ways, a persistent transfer between them', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'smcuda-regk-'));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  const [da, db] = [new SimulatedCudaDriver(), new SimulatedCudaDriver()];
  const a = await Transport.create({ driver: da, id: 'a', device: 0 });
  const b = await Transport.create({ driver: db, id: 'b', device: 1 });
  cleanups.push(
    () => da.close(),
    () => db.close(),
    () => a.close(),
    () => b.close(),
  );
  await a.listen(join(dir, 'a.sock'));
  const accepted = new Promise<Endpoint>((resolve) => a.once('endpoint', resolve));
  const epB = await b.connect(join(dir, 'a.sock'));
  const epA = await accepted;
  for (let k = 0; k < 200 && !(epA.stats().fd.channel && epB.stats().fd.channel); k++) await new Promise((r) => setTimeout(r, 10));
  expect(epA.stats().fd.channel && epB.stats().fd.channel).toBe(true);

  const n = 1 << 20;
  const vmm = da.vmmAlloc(n);
  const pool = db.memPoolCreate();
  const sb = db.streamCreate();
  const poolPtr = db.memAllocFromPoolAsync(n, pool, sb);
  db.streamSynchronize(sb);
  da.memcpyHtoD(vmm.ptr, randomBytes(n, 5));
  expect(da.memoryKind(vmm.ptr).kind).toBe('vmm');
  expect(db.memoryKind(poolPtr).kind).toBe('pool');

  const [ra, rb] = await Promise.all([epA.register({ ptr: vmm.ptr, length: n }), epB.register({ ptr: poolPtr, length: n })]);
  expect(ra.peer.length).toBe(n);
  const [ta, tb] = await Promise.all([epA.persistent(ra, { role: 'send', length: n }), epB.persistent(rb, { role: 'recv', length: n })]);
  const sa = da.streamCreate();
  ta.start(sa);
  tb.start(sb);
  const done = async (d: SimulatedCudaDriver, s: bigint) => {
    const ev = d.eventCreate({ disableTiming: true });
    d.eventRecord(ev, s);
    await d.whenComplete(ev);
    d.eventDestroy(ev);
  };
  await Promise.all([done(da, sa), done(db, sb)]);
  const out = new Uint8Array(n);
  db.memcpyDtoH(out, poolPtr);
  expect(Buffer.compare(out, randomBytes(n, 5))).toBe(0);
  await Promise.all([ta.close(), tb.close()]);
  await Promise.all([ra.deregister(), rb.deregister()]);
  db.memFreeAsync(poolPtr, sb);
  db.streamSynchronize(sb);
});
