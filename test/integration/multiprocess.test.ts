/**
 * Real processes: `smcuda demo` run as a user would, on the simulated
 * driver — 2 and 4 Node processes over Unix sockets exchange device buffers
 * and verify every byte; with IPC off the data goes by staging and verifies
 * too. No process may outlive the command.
 */
import { execFile } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { ownerAlive, parseSegmentName } from '../../src/segment-owner.js';

const run = promisify(execFile);

const CLI = new URL('../../dist/src/cli/main.js', import.meta.url).pathname;

interface DemoJson {
  driver: { kind: string };
  verified: boolean;
  mismatches: string[];
  devices: { rank: number; uuid: string }[];
  endpoints: {
    rank: number;
    peer: number;
    negotiation: { state: string; path: string[]; tries: number };
    sent: Record<'eager' | 'rget' | 'staging', { messages: number; bytes: number }>;
    received: Record<'eager' | 'rget' | 'staging', { messages: number; bytes: number }>;
    cache: { hits: number; misses: number };
  }[];
}

async function demo(args: string[]): Promise<DemoJson> {
  const { stdout } = await run(process.execPath, [CLI, 'demo', '--driver', 'sim', '--json', ...args], { maxBuffer: 16 << 20, timeout: 120_000 });
  return JSON.parse(stdout) as DemoJson;
}

function simSegments(): string[] {
  return readdirSync('/dev/shm').filter((n) => n.startsWith('smcuda-'));
}

/**
 * Segments whose owner has exited: what a process that did not clean up leaves.
 * (Live processes of other test runs sharing /dev/shm create and remove their
 * own meanwhile; the owner stamp in each name tells them apart.)
 */
function orphaned(names: string[]): string[] {
  return names.filter((n) => {
    const p = parseSegmentName(n);
    return p !== undefined && !ownerAlive(p.owner);
  });
}

describe('smcuda demo on the simulated driver', () => {
  it('2 processes: every byte verified, both endpoints OK, RGET used with cache hits', async () => {
    const before = new Set(simSegments());
    const r = await demo(['--ranks', '2', '--sizes', '0,8,4K,64K,1M,16M,64M', '--iters', '2']);
    expect(r.driver.kind).toBe('sim');
    expect(r.verified).toBe(true);
    expect(r.mismatches).toEqual([]);
    expect(r.endpoints).toHaveLength(2);
    for (const e of r.endpoints) {
      expect(e.negotiation.state).toBe('OK');
      expect(e.negotiation.path[0]).toBe('INIT');
      expect(e.received.rget.messages).toBeGreaterThan(0);
      expect(e.cache.hits).toBeGreaterThan(0);
    }
    // the processes cleaned up after themselves
    expect(orphaned(simSegments().filter((n) => !before.has(n)))).toEqual([]);
  });

  it('4 processes on 2 devices: same-GPU and cross-GPU pairs, all OK, all verified', async () => {
    const r = await demo(['--ranks', '4', '--sizes', '0,8,64K,1M,4M', '--iters', '2']);
    expect(r.verified).toBe(true);
    expect(r.endpoints).toHaveLength(12);
    const uuid = new Map(r.devices.map((d) => [d.rank, d.uuid]));
    const same = r.endpoints.filter((e) => uuid.get(e.rank) === uuid.get(e.peer));
    const cross = r.endpoints.filter((e) => uuid.get(e.rank) !== uuid.get(e.peer));
    expect(same.length).toBeGreaterThan(0);
    expect(cross.length).toBeGreaterThan(0);
    for (const e of r.endpoints) expect(e.negotiation.state).toBe('OK');
  });

  it('IPC off: every endpoint BAD, device data staged, all verified', async () => {
    const r = await demo(['--ranks', '2', '--ipc', 'off', '--sizes', '0,8,64K,5M', '--iters', '2']);
    expect(r.verified).toBe(true);
    for (const e of r.endpoints) {
      expect(e.negotiation.state).toBe('BAD');
      expect(e.received.rget.messages).toBe(0);
      expect(e.received.staging.messages).toBeGreaterThan(0);
    }
  });

  it('NODE_DEBUG=smcuda logs endpoints and negotiation transitions on stderr', async () => {
    const { stderr } = await run(process.execPath, [CLI, 'demo', '--driver', 'sim', '--json', '--sizes', '8', '--iters', '1'], {
      env: { ...process.env, NODE_DEBUG: 'smcuda' },
      maxBuffer: 16 << 20,
    });
    expect(stderr).toMatch(/SMCUDA \d+: transport rank0: endpoint to rank1/);
    expect(stderr).toMatch(/SMCUDA \d+: endpoint rank[01]: .*→ OK/);
  });

  it('bad usage exits 2 with a message; --help exits 0', async () => {
    await expect(run(process.execPath, [CLI, 'demo', '--ranks', '1'])).rejects.toMatchObject({ code: 2, stderr: expect.stringMatching(/--ranks/) });
    const help = await run(process.execPath, [CLI, 'demo', '--help']);
    expect(help.stdout).toMatch(/usage: smcuda demo/);
  });
});

describe('smcuda probe', () => {
  it('--json parses; without a GPU it says the driver is unavailable and why, and exits 0', async () => {
    const { stdout } = await run(process.execPath, [CLI, 'probe', '--json']);
    const r = JSON.parse(stdout) as { available: boolean; reason?: string; devices: unknown[] };
    if (!r.available) {
      expect(r.reason).toMatch(/libcuda|driver/i);
      expect(r.devices).toEqual([]);
    } else {
      expect(r.devices.length).toBeGreaterThan(0);
    }
  });

  it('on the simulated driver: devices, peer matrix, and IPC checked by a second process', async () => {
    const { stdout } = await run(process.execPath, [CLI, 'probe', '--json', '--driver', 'sim']);
    const r = JSON.parse(stdout) as { available: boolean; devices: { uuid: string }[]; peerAccess: boolean[][]; ipc: { supported: boolean } };
    expect(r.available).toBe(true);
    expect(r.devices.length).toBe(2);
    expect(r.devices[0]!.uuid).toMatch(/^GPU-/);
    expect(r.peerAccess).toEqual([
      [true, true],
      [true, true],
    ]);
    expect(r.ipc.supported).toBe(true);
  });
});
