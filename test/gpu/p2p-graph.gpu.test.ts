/**
 * Point to point in stream order captured in a CUDA graph and replayed on a
 * GPU (issue 44): two ranks in separate processes (./p2p-graph-rank.mjs)
 * capture, in one graph on their streams, an exchange both ways (a
 * comm.batch of a send and a receive, then a plain send and receive in
 * opposite orders on the two ranks), replay it 1000 times with fresh inputs
 * written on the stream before each launch, and check every byte of every
 * replay (and of an eager exchange every 250 replays: the flags are at rest
 * between replays). Sizes: 4 KiB (one chunk) and 4 MiB + 12 B (chunks
 * through the receiver's scratch slots, the last one partial, the slots
 * reused within a replay). Ranks share one GPU (under MPS where the caller
 * started it: required when SMCUDA_EXPECT_MPS is set) and, where two are
 * visible, run across two.
 *
 * Compiled code (dist/, imported as 'smcuda'): `npx tsc -p .` first.
 * Skipped, visibly, where no GPU is usable or the native driver lacks
 * graphs or 64-bit stream memory operations (point to point then takes the
 * staged path, which capture refuses). P2P_GRAPH_DRIVER=sim runs the same
 * on the simulated driver (what checks this harness without a GPU;
 * P2P_GRAPH_REPLAYS fewer replays there).
 */
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { mpsStatus } from '../../src/cli/mps.js';
import { type JsonChildExit, runJsonChild } from '../helpers/json-child.js';
import { itChecksMps } from './mps-check.js';
import { probeNativeGpuDriven } from './native-probe.js';

const DRIVER = process.env.P2P_GRAPH_DRIVER === 'sim' ? 'sim' : 'native';
const p =
  DRIVER === 'sim'
    ? { devices: 2, skip: false as const }
    : await probeNativeGpuDriven((g) =>
        !g.graphs
          ? `the native driver cannot capture graphs: ${g.reason ?? 'not supported'}`
          : !g.streamMemOps || !g.memOps64
            ? `the native driver has no 64-bit stream memory operations (point to point would be staged, which capture refuses): ${g.reason ?? 'not supported'}`
            : undefined,
      );
const RANK = fileURLToPath(new URL('./p2p-graph-rank.mjs', import.meta.url));
const REPLAYS = Number(process.env.P2P_GRAPH_REPLAYS ?? 1000);
const EAGER_EVERY = 250;
const SIZES = [4096, (4 << 20) + 12];
/** How long one rank process may run before it counts as hung. */
const PROCESS_LIMIT_MS = 100_000;

interface SizeReport {
  bytes: number;
  paths: string[];
  replays: number;
  eager: number;
  chunksPerMessage: number;
  replayMs: number;
}
interface RankReport {
  rank: number;
  driver: string;
  steps: string;
  sizes: SizeReport[];
  p2p: { sends: number; recvs: number; bytesSent: number; bytesReceived: number; byPath: { device: number; staged: number } };
}
type Exit = JsonChildExit<RankReport>;

function runRank(rank: number, dir: string, visible: string): Promise<Exit> {
  const { SMCUDA_TOKEN: _t, SMCUDA_SIM: _s, SMCUDA_SIM_VISIBLE: _v, ...env } = process.env;
  return runJsonChild<RankReport>(
    RANK,
    [],
    {
      ...env,
      ...(DRIVER === 'native' ? { CUDA_VISIBLE_DEVICES: visible } : {}),
      P2P_GRAPH_DRIVER: DRIVER,
      RANK: String(rank),
      WORLD_SIZE: '2',
      LOCAL_RANK: String(rank),
      SMCUDA_RENDEZVOUS: dir,
      SIZES: SIZES.join(','),
      REPLAYS: String(REPLAYS),
      EAGER_EVERY: String(EAGER_EVERY),
    },
    PROCESS_LIMIT_MS,
  );
}

async function exchange(visible: string): Promise<RankReport[]> {
  const dir = mkdtempSync(join(tmpdir(), 'smcuda-p2p-graph-'));
  try {
    const exits = await Promise.all([0, 1].map((r) => runRank(r, dir, visible)));
    for (const [r, e] of exits.entries()) {
      expect({ code: e.code, signal: e.signal }, `rank ${r} stderr:\n${e.stderr}\nstdout:\n${e.stdout.slice(-2000)}`).toEqual({ code: 0, signal: null });
      expect(e.out, `rank ${r} printed no report: ${e.stdout.slice(-2000)}`).toBeDefined();
    }
    expect(readdirSync(dir)).toEqual([]);
    return exits.map((e) => e.out!);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function verified(reports: RankReport[], topology: string): void {
  for (const [r, out] of reports.entries()) {
    expect(out).toMatchObject({ rank: r, driver: DRIVER, steps: 'device' });
    expect(out.sizes.map((s) => s.bytes)).toEqual(SIZES);
    for (const s of out.sizes) {
      // Four calls captured per size (the batch's send and receive, the plain send and receive), every one on the device path.
      expect(s.paths).toEqual(['device', 'device', 'device', 'device']);
      expect(s.replays).toBe(REPLAYS);
      expect(s.eager).toBe(Math.floor(REPLAYS / EAGER_EVERY));
    }
    // The larger size goes in several chunks per message: the scratch slots are reused within a replay.
    expect(out.sizes.at(-1)!.chunksPerMessage).toBeGreaterThan(2);
    // Completed calls: the captures and the eager exchanges (graph replays complete no call).
    const calls = SIZES.length * 2 + out.sizes.reduce((n, s) => n + 2 * s.eager, 0);
    expect(out.p2p).toMatchObject({ sends: calls, recvs: calls, byPath: { device: 2 * calls, staged: 0 } });
  }
  console.log(
    `p2p-graph [${DRIVER}, ${topology}, MPS ${mpsStatus().active ? 'on' : 'off'}]: ${reports[0]!.sizes
      .map((s) => `${s.bytes} B × ${s.replays} replays, ${s.chunksPerMessage} chunk(s)/message, ${s.replayMs} ms/replay (with fill and check)`)
      .join('; ')}`,
  );
}

const topologies = [
  { name: 'two ranks on one GPU', visible: '0', devices: 1 },
  { name: 'two ranks on two GPUs', visible: '0,1', devices: 2 },
] as const;

describe.skipIf(p.skip !== false)(`point to point captured in a CUDA graph on the ${DRIVER} driver${p.skip ? ` (skipped: ${p.skip})` : ''}`, () => {
  itChecksMps(DRIVER, 'the ranks');

  for (const topo of topologies) {
    const fewer = p.skip === false && p.devices < topo.devices;
    it.skipIf(p.devices < topo.devices)(
      `${topo.name}: a batch exchange and a plain send/receive both ways, ${SIZES.join(' and ')} B, captured once, replayed ${REPLAYS} times with fresh inputs, every byte of every replay checked${fewer ? ` (skipped: ${p.devices} GPU visible)` : ''}`,
      async () => {
        verified(await exchange(topo.visible), topo.name);
      },
      PROCESS_LIMIT_MS + 10_000,
    );
  }
});
