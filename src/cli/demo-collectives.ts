/**
 * `smcuda demo --collectives`: N local processes join one Communicator
 * through a rendezvous directory and run every collective (allreduce with
 * each reduction, reduce, reduce-scatter, broadcast, allgather, alltoall,
 * gather, scatter, allgatherv, reduce-scatterv with sum and premul, alltoallv) ×
 * every dtype × several sizes; every rank checks every element of its output
 * against the host reference (collective-cases.ts).
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { ForcedAlgorithm } from '../collectives/communicator.js';
import { collectiveCases, type CollectiveCase } from './collective-cases.js';
import type { CaseResult, CollectivesWorkerConfig, CollectivesWorkerReady } from './demo-collectives-worker.js';
import { formatBytes, table } from './format.js';
import { freePort } from './run-nodes.js';
import { engineReduces } from './hierarchical-cases.js';
import { startWorkers, type WorkerClient, WorkerFailedError } from './worker-protocol.js';

const MiB = 1024 * 1024;

export interface CollectivesDemoOptions {
  ranks: number;
  /** Bytes of each rank's input; default 0, 1, 1001 and 1 MiB, and 64 MiB on a GPU. */
  sizes?: number[];
  /** Only these operations (labels as in the report: allreduce-sum … alltoall); default all. */
  ops?: readonly string[];
  /** Only these dtypes; default all. */
  dtypes?: readonly string[];
  /** Every rank's communicator forces this algorithm (Communicator's `algorithm` option); default chosen by size. */
  algorithm?: ForcedAlgorithm;
  driver: 'auto' | 'native' | 'sim';
  timeoutMs: number;
  /** Virtual nodes: the ranks split into this many nodes of ranks / nodes each, one Communicator across them (docs/multinode.md). */
  nodes?: number;
}

export interface CollectivesDemoReport {
  driver: { kind: string; reason: string };
  ranks: number;
  /** Virtual nodes, where --nodes split the ranks. */
  nodes?: number;
  devices: { rank: number; index: number; name: string; uuid: string }[];
  collectives: { op: string; dtype: string; size: number; algorithm: string; verified: boolean }[];
  verified: boolean;
  mismatches: string[];
  durationMs: number;
}

export async function collectivesDemo(opts: CollectivesDemoOptions, progress: (line: string) => void = () => {}): Promise<CollectivesDemoReport> {
  const started = performance.now();
  const dir = mkdtempSync(join(tmpdir(), 'smcuda-collectives-')); // 0700: the rendezvous of this run only
  const token = randomBytes(16).toString('hex');
  const workerPath = fileURLToPath(new URL('./demo-collectives-worker.js', import.meta.url));
  let workers: WorkerClient<CollectivesWorkerReady>[] = [];
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new WorkerFailedError(`demo --collectives did not finish within ${opts.timeoutMs / 1000} s`)), opts.timeoutMs);
  });
  timedOut.catch(() => {});
  const until = <T>(p: Promise<T>) => Promise.race([p, timedOut]);
  const nodes = opts.nodes !== undefined && opts.nodes > 1 ? { count: opts.nodes, port: await freePort() } : undefined;
  try {
    workers = await until(
      startWorkers<CollectivesWorkerReady>(
        workerPath,
        [...Array(opts.ranks).keys()].map((rank) => {
          const cfg: CollectivesWorkerConfig = {
            rank,
            ranks: opts.ranks,
            dir,
            token,
            driver: opts.driver,
            timeoutMs: Math.min(opts.timeoutMs, 120_000),
            ...(opts.algorithm ? { algorithm: opts.algorithm } : {}),
            ...(nodes ? { nodes } : {}),
          };
          return { name: `rank ${rank}`, env: { SMCUDA_DEMO_COLLECTIVES: JSON.stringify(cfg) }, readyTimeoutMs: opts.timeoutMs };
        }),
      ),
    );
    const first = workers[0]!.ready;
    progress(
      `smcuda demo --collectives: ${opts.ranks} ranks${nodes ? ` on ${nodes.count} virtual nodes` : ''} on the ${first.driver === 'sim' ? 'simulated' : 'native'} driver (${first.reason})`,
    );
    const sizes = opts.sizes ?? [0, 1, 1001, MiB, ...(first.driver === 'native' ? [64 * MiB] : [])];
    const cases = collectiveCases(sizes, opts.ranks).filter(
      (c) => (!opts.ops || opts.ops.includes(label(c))) && (!opts.dtypes || opts.dtypes.includes(c.dtype)) && (!nodes || engineReduces(first.engine, c)), // every call the demo runs has a counterpart across nodes (MultiNodeOp)
    );
    const collectives: CollectivesDemoReport['collectives'] = [];
    const mismatches: string[] = [];
    let dtype: string | undefined;
    for (const c of cases) {
      // Checking every element on the host takes a while at 64 MiB (seconds a case): say where it is.
      if (c.dtype !== dtype) progress(`smcuda demo --collectives: ${(dtype = c.dtype)}, ${cases.filter((x) => x.dtype === dtype).length} calls`);
      const results = await until(Promise.all(workers.map((w) => w.call<CaseResult>('case', c))));
      const verified = results.every((r) => r.verified);
      for (const r of results) if (r.mismatch) mismatches.push(r.mismatch);
      collectives.push({ op: label(c), dtype: c.dtype, size: c.size, algorithm: results[0]!.algorithm, verified });
    }
    await until(Promise.all(workers.map((w) => w.exit())));
    return {
      driver: { kind: first.driver, reason: first.reason },
      ranks: opts.ranks,
      ...(nodes ? { nodes: nodes.count } : {}),
      devices: workers.map((w) => ({ rank: w.ready.rank, ...w.ready.device })),
      collectives,
      verified: mismatches.length === 0 && collectives.every((c) => c.verified),
      mismatches,
      durationMs: performance.now() - started,
    };
  } finally {
    clearTimeout(timer);
    await Promise.all(workers.map((w) => w.kill()));
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The operations' labels, as --ops takes them. */
export const COLLECTIVE_LABELS = [
  'allreduce-sum',
  'allreduce-avg',
  'allreduce-min',
  'allreduce-max',
  'allreduce-prod',
  'allreduce-premul',
  'allreduce-band',
  'allreduce-bor',
  'allreduce-bxor',
  'reduce',
  'reduce-scatter',
  'broadcast',
  'allgather',
  'alltoall',
  'gather',
  'scatter',
  'allgatherv',
  'reduce-scatterv',
  'alltoallv',
];

function label(c: CollectiveCase): string {
  return c.reduce && c.op === 'allreduce' ? `allreduce-${c.reduce}` : c.op;
}

export function renderCollectives(r: CollectivesDemoReport): string {
  const byOp = new Map<string, { n: number; ok: number; algorithms: Set<string> }>();
  for (const c of r.collectives) {
    const e = byOp.get(c.op) ?? { n: 0, ok: 0, algorithms: new Set() };
    e.n++;
    if (c.verified) e.ok++;
    e.algorithms.add(c.algorithm);
    byOp.set(c.op, e);
  }
  const sizes = [...new Set(r.collectives.map((c) => c.size))].sort((a, b) => a - b);
  const rows = [['collective', 'calls verified', 'algorithms']];
  for (const [op, e] of byOp) rows.push([op, `${e.ok}/${e.n}`, [...e.algorithms].join(', ')]);
  const dtypes = [...new Set(r.collectives.map((c) => c.dtype))];
  const lines = [
    '',
    `${r.ranks} ranks${r.nodes ? ` on ${r.nodes} nodes (hierarchical: smcuda inside a node, the socket engine between)` : ''}; dtypes ${dtypes.join(' ')}; sizes up to ${formatBytes(sizes.at(-1) ?? 0)} per rank`,
    table(rows).replace(/^/gm, '  '),
    '',
  ];
  if (r.verified) lines.push(`verified: all ${r.collectives.length} collectives, every element on every rank (${(r.durationMs / 1000).toFixed(1)} s)`);
  else lines.push(`NOT verified: ${r.mismatches.length} mismatches\n  ${r.mismatches.slice(0, 20).join('\n  ')}`);
  return lines.join('\n');
}
