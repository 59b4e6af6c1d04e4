/**
 * Communicator.create through a rendezvous directory, with the ranks in one
 * process (each its own simulated driver and Transport, over real Unix
 * sockets): the token rank 0 shares through a 0600 file, the full mesh, an
 * empty directory after close; a token file others could read is refused; a
 * rank that never comes is a timeout, not a hang.
 */
import { chmodSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Communicator } from '../../../src/collectives/communicator.js';
import { SimulatedCudaDriver } from '../../../src/cuda/sim-driver.js';
import { AccessDeniedError, CommunicatorTimeoutError } from '../../../src/errors.js';

let dir: string;
const drivers: SimulatedCudaDriver[] = [];
afterEach(() => {
  for (const d of drivers.splice(0)) d.close();
  rmSync(dir, { recursive: true, force: true });
});

function driver(): SimulatedCudaDriver {
  const d = new SimulatedCudaDriver({ env: {} });
  drivers.push(d);
  return d;
}

describe('Communicator.create', () => {
  it('three ranks meet through the directory (token made by rank 0), allreduce, and leave it empty', async () => {
    dir = mkdtempSync(join(tmpdir(), 'smcuda-rdv-'));
    const saved = process.env.SMCUDA_TOKEN;
    delete process.env.SMCUDA_TOKEN;
    try {
      const comms = await Promise.all([0, 1, 2].map((rank) => Communicator.create({ rank, size: 3, dir, driver: driver() })));
      expect(comms.map((c) => c.rank)).toEqual([0, 1, 2]);
      expect(readdirSync(dir).filter((f) => f === 'token')).toEqual([]); // removed once everyone joined
      const bufs = comms.map((c, r) => {
        const p = c.driver.memAlloc(8);
        c.driver.memcpyHtoD(p, new Uint8Array(new Float64Array([r + 0.5]).buffer));
        return p;
      });
      await Promise.all(comms.map((c, r) => c.allreduce({ send: bufs[r]!, count: 1, dtype: 'f64', op: 'sum' })));
      const out = new Uint8Array(8);
      comms[2]!.driver.memcpyDtoH(out, bufs[2]!);
      expect(new Float64Array(out.buffer)[0]).toBe(4.5);
      comms.forEach((c, r) => c.driver.memFree(bufs[r]!));
      await Promise.all(comms.map((c) => c.close()));
      expect(readdirSync(dir)).toEqual([]);
    } finally {
      if (saved !== undefined) process.env.SMCUDA_TOKEN = saved;
    }
  });

  it('refuses a token file that others could read', async () => {
    dir = mkdtempSync(join(tmpdir(), 'smcuda-rdv-'));
    writeFileSync(join(dir, 'token'), 'abc');
    chmodSync(join(dir, 'token'), 0o644);
    const saved = process.env.SMCUDA_TOKEN;
    delete process.env.SMCUDA_TOKEN;
    try {
      await expect(Communicator.create({ rank: 1, size: 2, dir, driver: driver(), joinTimeoutMs: 2000 })).rejects.toBeInstanceOf(AccessDeniedError);
    } finally {
      if (saved !== undefined) process.env.SMCUDA_TOKEN = saved;
    }
  });

  it('a rank that never comes: the others fail with SMCUDA_COMM_TIMEOUT within the join timeout', async () => {
    dir = mkdtempSync(join(tmpdir(), 'smcuda-rdv-'));
    const started = Date.now();
    await expect(Communicator.create({ rank: 0, size: 2, dir, token: 't', driver: driver(), joinTimeoutMs: 300 })).rejects.toBeInstanceOf(
      CommunicatorTimeoutError,
    );
    expect(Date.now() - started).toBeLessThan(10_000);
    expect(readdirSync(dir)).toEqual([]);
  });
});
