/**
 * Issue 16 item 13 end to end on the simulated driver: peer access says yes
 * but IPC opens fail (sim fault `ipcOpenFails`, as between containers that do
 * not share IPC): the negotiation ends BAD on both sides and device data
 * moves by staging. When IPC works, the probe's mapping is already in the
 * receiver's pool before the first RGET.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { DeviceBuffer } from '../../../src/buffers.js';
import { SimulatedCudaDriver } from '../../../src/cuda/sim-driver.js';
import { makePair, deviceWith, randomBytes, readDevice, reach, sameBytes, type Pair } from '../../helpers/transport-pair.js';

let pair: Pair | undefined;
afterEach(async () => {
  await pair?.close();
  pair = undefined;
});

describe('the IPC probe between two endpoints', () => {
  it.each(['a', 'b'] as const)('peer access yes, every open fails on %s: both BAD (PROBE_FAILED on that side), data by staging', async (broken) => {
    const faults = { ipcOpenFails: true };
    // negotiationEagerLimit 0: the first message waits for the negotiation, which ends BAD.
    pair = await makePair(broken === 'a' ? { a: { negotiationEagerLimit: 0 }, simA: { faults } } : { a: { negotiationEagerLimit: 0 }, simB: { faults } });
    const { a, b } = pair;
    expect(a.driver.canAccessPeer(0, 1)).toBe(true);
    const data = randomBytes(256 << 10, 5);
    const src = deviceWith(a.driver, data);
    for (let i = 0; i < 2; i++) {
      const r = b.ep.recv({ tag: 1 });
      await a.ep.send(src, { tag: 1 });
      const got = await r;
      expect(got.path).toBe('staging');
      expect(sameBytes(readDevice(b.driver, got.data as DeviceBuffer), data)).toBe(true);
      await reach(a.ep, 'BAD');
      await reach(b.ep, 'BAD');
    }
    const side = broken === 'a' ? a : b;
    const other = broken === 'a' ? b : a;
    expect(side.ep.stats().negotiation.reason).toMatch(/probe allocation could not be opened.*CUDA_ERROR_OPERATING_SYSTEM/);
    expect(other.ep.stats().negotiation.reason).toMatch(broken === 'a' ? /aborted.*PROBE_FAILED/ : /answered IPC_ACK\(ok=false\)/);
    expect(a.ep.stats().sent.rget.messages).toBe(0);
    expect(a.ep.stats().sent.staging.messages).toBe(2);
  });

  it("OK: each side's pool already holds the other's probe before the first RGET", async () => {
    pair = await makePair({ a: { negotiationEagerLimit: 0 } });
    const { a, b } = pair;
    const src = deviceWith(a.driver, randomBytes(64 << 10, 6));
    const r = b.ep.recv();
    await a.ep.send(src);
    expect((await r).path).toBe('rget'); // it waited for the negotiation
    await reach(a.ep, 'OK');
    await reach(b.ep, 'OK');
    expect(a.ep.stats().cache.openMappings).toBe(1); // b's probe
    expect(b.ep.stats().cache.openMappings).toBe(2); // a's probe, then the message's allocation
    expect(b.ep.stats().cache.misses).toBe(2);
  });

  it('the sim fault ipcOpenFails: peer access yes, cuIpcOpenMemHandle fails with the code given', () => {
    const owner = new SimulatedCudaDriver();
    const opener = new SimulatedCudaDriver({ faults: { ipcOpenFails: 'CUDA_ERROR_INVALID_HANDLE' } });
    try {
      owner.init();
      owner.setDevice(0);
      opener.init();
      opener.setDevice(1);
      const h = owner.ipcGetMemHandle(owner.memAlloc(64));
      expect(opener.canAccessPeer(1, 0)).toBe(true);
      expect(() => opener.ipcOpenMemHandle(h)).toThrow(/CUDA_ERROR_INVALID_HANDLE/);
      expect(() => new SimulatedCudaDriver({ faults: { ipcOpenFails: 'NOT_A_CODE' } })).toThrow(/ipcOpenFails/);
    } finally {
      opener.close();
      owner.close();
    }
  });
});
