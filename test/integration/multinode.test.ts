/**
 * A Communicator across virtual nodes on the simulated driver: ranks in
 * separate processes, placed on nodes by SMCUDA_NODE, meeting at the TCP
 * store (MASTER_ADDR/MASTER_PORT) and, inside a node, through the node's
 * rendezvous; the hierarchy runs over the socket engine. Every collective
 * verified element by element (smcuda demo --collectives --nodes, 2 nodes ×
 * 2 ranks and 3 × 1, every dtype, uneven counts), and the failures: a rank
 * killed on the other node, calls that differ between nodes, a bad
 * argument, NCCL absent, each a typed error on every rank within bounds.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { freePort } from '../../src/cli/run-nodes.js';
import { DTYPES } from '../../src/kernels/dtypes.js';
import { DEMO_COLLECTIVE_OPS, smcuda } from '../helpers/cli.js';

const FIXTURE = new URL('../fixtures/multinode-rank.mjs', import.meta.url).pathname;
const dirs: string[] = [];
/** The rendezvous directory of the last runJob. */
let lastDir = '';
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

interface RankOut {
  rank: number;
  ok?: boolean;
  kind?: string;
  node?: number;
  nodes?: number;
  localRank?: number;
  inSetUp?: boolean;
  ms?: number;
  error?: { code: string; causeCode?: string; failedRank?: number; fields?: string[]; message: string } | null;
}

/** Starts one process per entry of `nodes` (rank r on node nodes[r]), as `smcuda run --nodes` would; resolves with each one's last line. */
async function runJob(
  nodes: readonly string[],
  mode: string,
  extra: Record<string, string> = {},
): Promise<{ out: RankOut | undefined; code: number | null; stderr: string }[]> {
  const dir = mkdtempSync(join(tmpdir(), 'smcuda-mn-'));
  dirs.push(dir);
  lastDir = dir;
  const port = await freePort();
  const token = randomBytes(16).toString('hex');
  return Promise.all(
    nodes.map(
      (node, rank) =>
        new Promise<{ out: RankOut | undefined; code: number | null; stderr: string }>((resolve) => {
          const child = spawn(process.execPath, [FIXTURE], {
            env: {
              ...process.env,
              RANK: String(rank),
              WORLD_SIZE: String(nodes.length),
              SMCUDA_NODE: node,
              MASTER_ADDR: '127.0.0.1',
              MASTER_PORT: String(port),
              SMCUDA_TOKEN: token,
              SMCUDA_RENDEZVOUS: dir,
              SMCUDA_SIM: '',
              MN_MODE: mode,
              ...extra,
            },
            stdio: ['ignore', 'pipe', 'pipe'],
          });
          let stdout = '';
          let stderr = '';
          child.stdout.on('data', (b) => (stdout += b));
          child.stderr.on('data', (b) => (stderr += b));
          child.on('exit', (code) => {
            const line = stdout.trim().split('\n').pop();
            resolve({ code, stderr, out: line ? (JSON.parse(line) as RankOut) : undefined });
          });
        }),
    ),
  );
}

interface DemoReport {
  verified: boolean;
  ranks: number;
  nodes: number;
  collectives: { op: string; dtype: string; size: number; algorithm: string; verified: boolean }[];
}

describe('a Communicator across virtual nodes (socket engine, simulated driver)', () => {
  it.each([
    [4, 2],
    [3, 3],
  ])(
    'smcuda demo --collectives --ranks %i --nodes %i: every collective × dtype × size (uneven counts), every element',
    async (ranks, nodes) => {
      const r = await smcuda(
        ['demo', '--collectives', '--driver', 'sim', '--ranks', String(ranks), '--nodes', String(nodes), '--sizes', '0,1,1001,8192', '--json'],
        {
          SMCUDA_SIM: '',
        },
      );
      expect(r.code, r.stderr).toBe(0);
      const report = JSON.parse(r.stdout) as DemoReport;
      expect(report.verified).toBe(true);
      expect(report.nodes).toBe(nodes);
      expect(new Set(report.collectives.map((c) => c.dtype))).toEqual(new Set(DTYPES));
      expect(new Set(report.collectives.map((c) => c.op))).toEqual(new Set(DEMO_COLLECTIVE_OPS));
      expect(report.collectives.every((c) => c.verified && c.algorithm === 'hierarchical')).toBe(true);
    },
    180_000,
  );

  it('Communicator.fromEnv with SMCUDA_NODE: 2 nodes × 2 ranks, each its node, local rank and the socket engine', async () => {
    const exits = await runJob(['a', 'a', 'b', 'b'], 'ok');
    for (const [r, e] of exits.entries()) {
      expect(e.code, e.stderr).toBe(0);
      expect(e.out, JSON.stringify(e.out)).toMatchObject({ rank: r, ok: true, kind: 'sockets', node: Math.floor(r / 2), nodes: 2, localRank: r % 2 });
    }
    // Each node met in its own folder of the rendezvous directory, removed by the node's last rank to close.
    expect(readdirSync(lastDir)).toEqual([]);
  }, 60_000);

  it.each([
    [3, [0, 1]],
    [1, [2, 3]],
  ])(
    'rank %i killed: every surviving rank fails with a typed abort within seconds, and those of the other node name it',
    async (victim, otherNode) => {
      const exits = await runJob(['a', 'a', 'b', 'b'], 'kill', { MN_VICTIM: String(victim) });
      expect(exits[victim]!.out).toBeUndefined();
      for (const e of exits.filter((_, r) => r !== victim)) {
        expect(e.code, e.stderr).toBe(0);
        expect(e.out?.error, JSON.stringify(e.out)).toMatchObject({ code: 'SMCUDA_COMM_ABORTED' });
        // The lost socket (the engine) or the lost local rank (smcuda) reached every rank; never a wrong answer or a hang.
        expect(['SMCUDA_PEER_LOST', 'SMCUDA_COMM_ABORTED']).toContain(e.out!.error!.causeCode);
        expect(e.out!.ms!).toBeLessThan(15_000);
      }
      // The ranks of the other node learn it from the engine: the lost rank by its number in the job.
      for (const r of otherNode) expect(exits[r]!.out!.error!.message).toMatch(new RegExp(`rank ${victim}\\b`));
    },
    60_000,
  );

  it.each(['count', 'dtype', 'op'])(
    'calls that differ in %s between nodes (3 nodes × 1 rank: only the engine compares them) fail on every rank',
    async (field) => {
      const exits = await runJob(['a', 'b', 'c'], 'mismatch', { MN_ODD: '2', MN_FIELD: field });
      for (const e of exits) {
        expect(e.code, e.stderr).toBe(0);
        const err = e.out?.error;
        expect(err, JSON.stringify(e.out)).toBeTruthy();
        expect([err!.code, err!.causeCode]).toContain('SMCUDA_CALL_MISMATCH');
        expect(e.out!.ms!).toBeLessThan(10_000);
      }
      // The ranks that compared with the odd one name the field.
      expect(exits.flatMap((e) => e.out!.error!.fields ?? [])).toContain(field);
    },
    60_000,
  );

  it('a count that differs on one node of 2 × 2 fails on every rank (the node and the engine both compare)', async () => {
    const exits = await runJob(['a', 'a', 'b', 'b'], 'mismatch', { MN_ODD: '3', MN_FIELD: 'count' });
    for (const e of exits) {
      expect(e.code, e.stderr).toBe(0);
      expect([e.out?.error?.code, e.out?.error?.causeCode]).toContain('SMCUDA_CALL_MISMATCH');
    }
  }, 60_000);

  it.each([
    [['a', 'a', 'b', 'b'], 3],
    [['a', 'b', 'c'], 2],
  ])(
    'allgatherv counts that differ in another rank’s entry (nodes %j, rank %i odd) fail on every rank, never a wrong block',
    async (nodes, odd) => {
      const exits = await runJob(nodes, 'vmismatch', { MN_ODD: String(odd) });
      for (const e of exits) {
        expect(e.code, e.stderr).toBe(0);
        expect([e.out?.error?.code, e.out?.error?.causeCode], JSON.stringify(e.out)).toContain('SMCUDA_CALL_MISMATCH');
        expect(e.out!.ms!).toBeLessThan(10_000);
      }
      expect(exits.flatMap((e) => e.out!.error!.fields ?? [])).toContain('counts');
    },
    60_000,
  );

  it.each([
    [['a', 'a', 'b', 'b'], 3],
    [['a', 'b', 'c'], 2],
  ])(
    'alltoallv whose counts do not pair up (nodes %j: rank %i expects less from rank 0 than it sends) fails on every rank',
    async (nodes, odd) => {
      const exits = await runJob(nodes, 'a2av', { MN_ODD: String(odd) });
      for (const e of exits) {
        expect(e.code, e.stderr).toBe(0);
        expect([e.out?.error?.code, e.out?.error?.causeCode], JSON.stringify(e.out)).toContain('SMCUDA_CALL_MISMATCH');
        expect(e.out!.ms!).toBeLessThan(10_000);
      }
      expect(exits[odd]!.out!.error!.message).toMatch(/rank 0 sends rank \d+ 2 elements, and rank \d+ expects 1/);
    },
    60_000,
  );

  it('an allreduce on a stream being captured is refused on every rank (the host sequences the steps across nodes)', async () => {
    const exits = await runJob(['a', 'a', 'b', 'b'], 'capture');
    for (const e of exits) {
      expect(e.code, e.stderr).toBe(0);
      const err = e.out?.error;
      expect([err?.code, err?.causeCode], JSON.stringify(e.out)).toContain('SMCUDA_CAPTURE_UNSUPPORTED');
    }
  }, 60_000);

  it("a bad argument on one rank throws there and aborts every other node's ranks", async () => {
    const exits = await runJob(['a', 'a', 'b', 'b'], 'badarg', { MN_ODD: '2' });
    expect(exits[2]!.out?.error?.code).toBe('SMCUDA_OUT_OF_RANGE');
    for (const e of [exits[0]!, exits[1]!, exits[3]!]) {
      expect(e.code, e.stderr).toBe(0);
      expect(e.out?.error, JSON.stringify(e.out)).toMatchObject({ code: 'SMCUDA_COMM_ABORTED', causeCode: 'SMCUDA_OUT_OF_RANGE' });
      expect(e.out!.ms!).toBeLessThan(10_000);
    }
  }, 60_000);

  it('comm.abort() on one rank fails every rank of every node with its cause', async () => {
    const exits = await runJob(['a', 'a', 'b', 'b'], 'abort', { MN_ODD: '1' });
    for (const e of exits) {
      expect(e.code, e.stderr).toBe(0);
      expect(e.out?.error, JSON.stringify(e.out)).toMatchObject({ code: 'SMCUDA_COMM_ABORTED', causeCode: 'APP_STOP' });
      expect(e.out!.ms!).toBeLessThan(10_000);
    }
  }, 60_000);

  it('nodes of different sizes: the same ConfigError on every rank, saying what to change', async () => {
    const exits = await runJob(['a', 'a', 'b'], 'setup');
    for (const e of exits) {
      expect(e.code, e.stderr).toBe(0);
      expect(e.out).toMatchObject({ inSetUp: true, error: { code: 'SMCUDA_CONFIG' } });
      expect(e.out!.error!.message).toMatch(/a: 2, b: 1.*same number of ranks on every node/);
    }
  }, 60_000);

  it("NCCL absent: SMCUDA_INTERNODE=nccl across nodes fails on every rank with the NCCL engine's typed error; on one node nothing needs NCCL", async () => {
    const nccl = { SMCUDA_INTERNODE: 'nccl', SMCUDA_NCCL_LIBRARY: '/nonexistent/libnccl.so.2' };
    const across = await runJob(['a', 'b'], 'setup', nccl);
    for (const e of across) {
      expect(e.code, e.stderr).toBe(0);
      expect(e.out).toMatchObject({ inSetUp: true, error: { code: 'SMCUDA_NCCL_UNAVAILABLE' } });
      expect(e.out!.error!.message).toMatch(/pip install nvidia-nccl/);
    }
    const oneNode = await runJob(['a', 'a'], 'ok', nccl);
    for (const e of oneNode) {
      expect(e.code, e.stderr).toBe(0);
      expect(e.out).toMatchObject({ ok: true, kind: 'one node' });
    }
  }, 60_000);
});

describe('smcuda run --nodes', () => {
  const RUN_RANK = new URL('../fixtures/run-rank.mjs', import.meta.url).pathname;
  interface Line {
    rank: number;
    ok: boolean;
    env: Record<string, string>;
  }
  const linesOf = (stdout: string) =>
    stdout
      .split('\n')
      .map((l) => /^\[(\d+)\] (\{.*\})$/.exec(l))
      .filter((m) => m !== null)
      .map((m) => ({ prefix: Number(m[1]), ...(JSON.parse(m[2]!) as Line) }));

  it('virtual nodes: -n 4 --nodes 2 gives each rank its node and local rank, and the hierarchical allreduce verifies', async () => {
    const r = await smcuda(['run', '-n', '4', '--nodes', '2', RUN_RANK], { SMCUDA_SIM: '', SMCUDA_TOKEN: '' });
    expect(r.code, r.stderr).toBe(0);
    const lines = linesOf(r.stdout);
    expect(lines.map((l) => l.rank).sort()).toEqual([0, 1, 2, 3]);
    for (const l of lines) {
      expect(l.ok).toBe(true);
      expect(l.prefix).toBe(l.rank);
      expect(l.env).toMatchObject({ RANK: String(l.rank), WORLD_SIZE: '4', LOCAL_RANK: String(l.rank % 2), LOCAL_WORLD_SIZE: '2' });
    }
  }, 60_000);

  it('a job across machines: one launcher per node (--node-rank, the same --master-addr/--master-port and SMCUDA_TOKEN), each with its own rendezvous', async () => {
    const port = String(await freePort());
    const token = randomBytes(24).toString('hex');
    const args = (node: number) => [
      'run',
      '-n',
      '2',
      '--nodes',
      '2',
      '--node-rank',
      String(node),
      '--master-addr',
      '127.0.0.1',
      '--master-port',
      port,
      RUN_RANK,
    ];
    const [a, b] = await Promise.all([0, 1].map((n) => smcuda(args(n), { SMCUDA_SIM: '', SMCUDA_TOKEN: token })));
    expect(a!.code, a!.stderr).toBe(0);
    expect(b!.code, b!.stderr).toBe(0);
    const lines = [...linesOf(a!.stdout), ...linesOf(b!.stdout)];
    expect(lines.map((l) => l.rank).sort()).toEqual([0, 1, 2, 3]);
    for (const l of lines)
      expect(l).toMatchObject({ ok: true, prefix: l.rank, env: { WORLD_SIZE: '4', LOCAL_RANK: String(l.rank % 2), LOCAL_WORLD_SIZE: '2' } });
    // Each launcher made its own rendezvous directory: the ranks of a node meet there, the nodes at the store.
    expect(new Set(lines.map((l) => l.env.SMCUDA_RENDEZVOUS)).size).toBe(2);
  }, 60_000);

  it('refuses a node count that does not divide the ranks, and a node of a real job without the store or the token', async () => {
    const uneven = await smcuda(['run', '-n', '3', '--nodes', '2', RUN_RANK]);
    expect(uneven.code).toBe(2);
    expect(uneven.stderr).toMatch(/--nodes 2 must divide -n 3/);
    const noStore = await smcuda(['run', '-n', '2', '--nodes', '2', '--node-rank', '1', RUN_RANK], { MASTER_ADDR: '', MASTER_PORT: '' });
    expect(noStore.code).toBe(2);
    expect(noStore.stderr).toMatch(/--master-addr HOST --master-port PORT/);
    const noToken = await smcuda(['run', '-n', '2', '--nodes', '2', '--node-rank', '1', '--master-addr', 'h', '--master-port', '1234', RUN_RANK], {
      SMCUDA_TOKEN: '',
    });
    expect(noToken.code).toBe(2);
    expect(noToken.stderr).toMatch(/SMCUDA_TOKEN/);
  }, 60_000);
});
