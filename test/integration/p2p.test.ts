/**
 * Point to point across real processes on the simulated driver (each rank
 * maps its peers' scratch through IPC): a ring of messages of many slots
 * through comm.batch, eager and then captured in a graph and replayed,
 * every element verified on every rank; and a rank SIGKILLed while the
 * others wait in a recv from it fails their recv with SMCUDA_PEER_LOST
 * within a bounded time.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';

const FIXTURE = new URL('../fixtures/p2p-rank.mjs', import.meta.url).pathname;
let dir: string;
afterEach(() => rmSync(dir, { recursive: true, force: true }));

interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
  out: Record<string, unknown> | undefined;
  stderr: string;
}

function runRanks(size: number, mode: string): Promise<Exit[]> {
  dir = mkdtempSync(join(tmpdir(), 'smcuda-p2p-'));
  return Promise.all(
    [...Array(size).keys()].map(
      (rank) =>
        new Promise<Exit>((resolve) => {
          const { SMCUDA_TOKEN: _t, ...env } = process.env;
          const child = spawn(process.execPath, [FIXTURE], {
            env: { ...env, RANK: String(rank), WORLD_SIZE: String(size), SMCUDA_RENDEZVOUS: dir, P2P_MODE: mode, SMCUDA_SIM: '' },
            stdio: ['ignore', 'pipe', 'pipe'],
          });
          let stdout = '';
          let stderr = '';
          child.stdout.on('data', (b) => (stdout += b));
          child.stderr.on('data', (b) => (stderr += b));
          child.on('exit', (code, signal) => {
            const line = stdout.trim().split('\n').pop();
            resolve({ code, signal, out: line ? (JSON.parse(line) as Record<string, unknown>) : undefined, stderr });
          });
        }),
    ),
  );
}

describe('point to point across processes (simulated driver)', () => {
  it('three ranks: a ring through batch, eager and as 20 graph replays, every element verified', async () => {
    const exits = await runRanks(3, 'ring');
    for (const e of exits) {
      expect(e.code, e.stderr).toBe(0);
      expect(e.out).toMatchObject({ ok: true, paths: ['device'], replays: 20 });
      // Eager and captured batches are counted once each (replays run on the device, not through the communicator).
      expect(e.out!.p2p).toMatchObject({ sends: 4, recvs: 4, bytesSent: 4 * 40_001 * 4 });
    }
  }, 60_000);

  it('a rank killed while the others wait in a recv from it: every recv fails with SMCUDA_PEER_LOST naming it, within a bounded time', async () => {
    const exits = await runRanks(3, 'die');
    expect(exits[2]!.signal).toBe('SIGKILL');
    for (const e of exits.slice(0, 2)) {
      expect(e.code, e.stderr).toBe(0);
      expect(e.out).toMatchObject({ error: { code: 'SMCUDA_COMM_ABORTED', failedRank: 2, causeCode: 'SMCUDA_PEER_LOST' } });
      expect(e.out!.ms as number).toBeLessThan(5000);
    }
  }, 60_000);
});
