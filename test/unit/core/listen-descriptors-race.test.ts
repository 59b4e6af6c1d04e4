/**
 * A peer that connects the moment the control socket appears gets the
 * descriptor channel too. The descriptor socket used to be served only after
 * listen()'s control socket was reachable: a peer accepted in between
 * handshook without descriptors, so that pair had no rings, no staging and
 * no shared call table (a communicator's ranks then compared calls by
 * message). Seen as rank 0 of a loaded job, whose peers connect at once.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { SimulatedCudaDriver } from '../../../src/cuda/sim-driver.js';
import type { Endpoint } from '../../../src/endpoint.js';
import { Transport } from '../../../src/transport.js';

let dir: string;
const cleanups: (() => Promise<void> | void)[] = [];
beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'smcuda-fdrace-'));
});
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
  fs.rmSync(dir, { recursive: true, force: true });
});

async function transport(id: string): Promise<Transport> {
  const driver = new SimulatedCudaDriver();
  const t = await Transport.create({ driver, id, device: 0, token: 'fd-race-token' });
  cleanups.push(async () => {
    await t.close();
    driver.close();
  });
  return t;
}

/** Resolves once `p` exists, polling every turn of the event loop. */
function appears(p: string): Promise<void> {
  return new Promise((resolve) => {
    const look = () => (fs.existsSync(p) ? resolve() : setImmediate(look));
    look();
  });
}

it('peers that connect as soon as the socket appears all get descriptor channels (rings, shared memory)', async () => {
  for (let round = 0; round < 10; round++) {
    const server = await transport(`s${round}`);
    const clients = await Promise.all([0, 1, 2].map((k) => transport(`c${round}.${k}`)));
    const p = path.join(dir, `r${round}.sock`);
    const accepted: Endpoint[] = [];
    server.on('endpoint', (ep: Endpoint) => accepted.push(ep));
    const listening = server.listen(p);
    await appears(p);
    const eps = await Promise.all(clients.map((c) => c.connect(p)));
    await listening;
    for (const ep of [...eps, ...accepted]) {
      expect(ep.sharesMemory, `round ${round}: ${ep.peerId}`).toBe(true);
      expect(ep.stats().control.channel, `round ${round}: ${ep.peerId}`).toMatch(/\+ring$/);
    }
    expect(accepted).toHaveLength(3);
  }
});
