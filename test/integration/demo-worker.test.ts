/**
 * A rank of `smcuda demo` (src/cli/demo-worker.ts) speaks the tools' worker
 * protocol: driven here directly, without demo.ts, as any parent would:
 * ready (what it is) → connect (its buffers) → phase (its result) → report
 * (its endpoints) → exit, and a command out of order fails with a typed
 * error carrying the rank's code. Under node here; under bun and deno it is
 * driven by `smcuda demo --runtime` (runtimes.test.ts).
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import type { DemoReportEndpoint, DemoWorkerReady, MemoryReport, PhaseResult, WorkerConfig } from '../../src/cli/demo-worker.js';
import { WorkerClient, WorkerCommandError } from '../helpers/child.js';

const WORKER = fileURLToPath(new URL('../../dist/src/cli/demo-worker.js', import.meta.url));

describe('a demo rank over the worker protocol', () => {
  const cleanUp: Array<() => unknown> = [];
  afterEach(async () => {
    for (const f of cleanUp.splice(0).reverse()) await f();
  });

  async function ranks(n: number): Promise<WorkerClient<DemoWorkerReady>[]> {
    const dir = mkdtempSync(join(tmpdir(), 'smcuda-demo-worker-test-'));
    cleanUp.push(() => rmSync(dir, { recursive: true, force: true }));
    const token = randomBytes(16).toString('hex');
    const workers = await Promise.all(
      Array.from({ length: n }, (_, rank) => {
        const cfg: WorkerConfig = { rank, ranks: n, dir, sizes: [8, 64 * 1024], iters: 1, driver: 'sim', ipc: true, memory: 'legacy', token };
        return WorkerClient.start<DemoWorkerReady>(WORKER, {
          name: `rank ${rank}`,
          env: { SMCUDA_DEMO: JSON.stringify(cfg) },
          stdio: ['ignore', 'inherit', 'pipe'],
          readyTimeoutMs: 30_000,
        });
      }),
    );
    cleanUp.push(() => Promise.all(workers.map((w) => w.kill())));
    return workers;
  }

  it('ready → connect → phase → report → exit', async () => {
    const ws = await ranks(2);
    expect(ws.map((w) => w.ready.rank)).toEqual([0, 1]);
    expect(ws[0]!.ready.driver).toBe('sim');
    expect(ws[0]!.ready.runtime).toMatch(/^node /);
    expect(ws[1]!.ready.device.uuid).toMatch(/^GPU-/);

    const buffers = await Promise.all(ws.map((w) => w.call<MemoryReport>('connect')));
    expect(buffers.map((b) => b.rank)).toEqual([0, 1]);
    expect(buffers[0]!.kind).toBe('legacy-ipc');

    const results = await Promise.all(ws.map((w) => w.call<PhaseResult>('phase', { phase: 'ring', sizeIndex: 1 })));
    for (const r of results) expect(r).toMatchObject({ phase: 'ring', size: 64 * 1024, messages: 1, bytesReceived: 64 * 1024, mismatches: [] });

    // The side that answered ACK(yes) reaches OK when the initiator's confirmation arrives, which may
    // be after the phase's messages were delivered: ask again until both sides have settled (bounded).
    const report = async () => (await Promise.all(ws.map((w) => w.call<DemoReportEndpoint[]>('report')))).flat();
    let endpoints = await report();
    for (let tries = 0; tries < 100 && endpoints.some((e) => !['OK', 'BAD'].includes((e.negotiation as { state: string }).state)); tries++) {
      await new Promise((r) => setTimeout(r, 50));
      endpoints = await report();
    }
    expect(endpoints.map((e) => [e.rank, e.peer])).toEqual([
      [0, 1],
      [1, 0],
    ]);
    for (const e of endpoints) expect((e.negotiation as { state: string }).state).toBe('OK');

    await Promise.all(ws.map((w) => w.exit()));
    for (const w of ws) expect(await w.exited).toEqual({ code: 0, signal: null });
  }, 60_000);

  it('a command out of order fails with a typed error and the rank’s code; the rank goes on', async () => {
    const [w] = await ranks(2);
    const err = await w!.call('phase', { phase: 'ring', sizeIndex: 0 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(WorkerCommandError);
    expect(err).toMatchObject({ code: 'SMCUDA_WORKER_FAILED', cmd: 'phase', worker: 'rank 0' });
    expect((err as Error).message).toMatch(/phase before connect/);
    const unknown = await w!.call('dance').catch((e: unknown) => e);
    expect(unknown).toMatchObject({ code: 'SMCUDA_WORKER_FAILED', message: expect.stringMatching(/a demo rank takes connect, phase, report, exit/) });
  }, 60_000);
});
