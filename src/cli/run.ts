/**
 * `smcuda run -n N script.mjs args…`: starts N ranks of a script on this
 * machine, as torchrun and mpirun do, each with what Communicator.fromEnv
 * reads (RANK, LOCAL_RANK, WORLD_SIZE, SMCUDA_RENDEZVOUS, SMCUDA_TOKEN) and
 * LOCAL_WORLD_SIZE; prefixes each rank's output lines with its rank; stops
 * the job when a rank fails (run-job.ts) or the launcher is interrupted; and
 * leaves nothing behind: the rendezvous directory it made is removed and the
 * dead ranks' shared-memory segments are swept.
 */
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { sweepDeadSegments } from '../segment-owner.js';
import { parseRunArgs, type RunArgs } from './run-args.js';
import { deviceEnv } from './run-devices.js';
import { Job, type JobResult, type RankSpec } from './run-job.js';
import { launchedRanks, nodeEnv, planNodes, type NodePlan } from './run-nodes.js';
import { findRuntime } from './runtimes.js';
import { UsageError } from './usage.js';

const HELP = `usage: smcuda run -n N [options] SCRIPT [ARGS…]

Starts N ranks of SCRIPT on this machine, each with RANK, LOCAL_RANK,
WORLD_SIZE, LOCAL_WORLD_SIZE, SMCUDA_RENDEZVOUS (a fresh directory, mode
0700) and SMCUDA_TOKEN (a fresh job token, by environment only): what
Communicator.fromEnv() reads. Every line a rank prints is prefixed with its
rank: [2] line. When a rank fails, the others get --grace ms to exit, then
SIGTERM, then SIGKILL after another --grace; the exit code is the first
failure's (128 + the signal's number for a signal). Ctrl-C stops every rank.
Everything after SCRIPT goes to the script.

  -n, --ranks N         ranks to start (default: the --devices count)
  --devices LIST        devices as CUDA_VISIBLE_DEVICES names them (indices or
                        UUIDs); rank i runs on entry i % length, e.g. 0,1,2,3
                        (default: rank i on device LOCAL_RANK % the devices seen)
  --runtime NAME        node | bun | deno (default node: the one running smcuda)
  --grace MS            grace before SIGTERM, and SIGTERM to SIGKILL (default 5000)
  --rendezvous DIR      this rendezvous directory instead of a fresh one (created
                        0700 when missing, and then removed at the end)
  --nodes K             a job across K nodes (docs/multinode.md): without
                        --node-rank, K virtual nodes on this machine, -n ranks in
                        all (n/K a node), the TCP store on 127.0.0.1; each rank also
                        gets SMCUDA_NODE, NODE_RANK, MASTER_ADDR and MASTER_PORT
  --node-rank I         with --nodes: this machine is node I of a real job, -n its
                        ranks (RANK = I·n + i); run on every node with the same
                        --master-addr, --master-port and SMCUDA_TOKEN
  --master-addr HOST    node 0's address (default MASTER_ADDR)
  --master-port PORT    the store's port on it (default MASTER_PORT; virtual
                        nodes: a free one)
  --json                a last line on stdout: one JSON object with every rank's
                        pid, exit code, signal and duration
  -h, --help            this help`;

/** What `--json` prints last. */
export interface RunReport extends JobResult {
  size: number;
  runtime: string;
  script: string;
  rendezvous: string;
  rendezvousRemoved: boolean;
  /** Shared-memory segments of dead processes removed after the ranks were gone. */
  sweptSegments: number;
}

/** The rendezvous directory, and whether this launch made it (and so removes it). */
function rendezvousDir(given: string | undefined): { dir: string; made: boolean } {
  if (given === undefined) return { dir: mkdtempSync(join(tmpdir(), 'smcuda-run-')), made: true };
  const dir = resolve(given);
  if (existsSync(dir)) {
    if (!statSync(dir).isDirectory()) throw new UsageError(`--rendezvous ${given} is not a directory`);
    return { dir, made: false };
  }
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  return { dir, made: true };
}

function rankSpecs(a: RunArgs, script: string, dir: string, token: string, plan: NodePlan | undefined): RankSpec[] {
  const rt = findRuntime(a.runtime);
  return Array.from({ length: plan ? launchedRanks(plan) : a.ranks }, (_, i) => ({
    // Output lines and the report name a rank by its rank in the job (node I's first is I·n).
    rank: plan ? Number(nodeEnv(plan, i).RANK) : i,
    command: rt.command,
    args: [...rt.args, script, ...a.scriptArgs],
    env: {
      ...process.env,
      RANK: String(i),
      LOCAL_RANK: String(i),
      WORLD_SIZE: String(a.ranks),
      LOCAL_WORLD_SIZE: String(a.ranks),
      SMCUDA_RENDEZVOUS: dir,
      SMCUDA_TOKEN: token,
      // Across nodes: RANK, WORLD_SIZE, LOCAL_RANK … of the job, its node and the store's address.
      ...(plan ? nodeEnv(plan, i) : {}),
      // --devices by launch index: virtual nodes on one machine get GPUs of their own (--devices 0,1 with --nodes 2).
      ...deviceEnv(a.devices, i),
    },
  }));
}

function failureLines(r: RunReport): string[] {
  const lines: string[] = [];
  if (r.interrupted) lines.push(`smcuda run: ${r.interrupted}: stopped ${r.size} rank(s)`);
  if (r.firstFailure !== null) {
    const f = r.ranks.find((x) => x.rank === r.firstFailure)!;
    lines.push(
      `smcuda run: rank ${f.rank} (pid ${f.pid}) failed first: ${f.signal ? `killed by ${f.signal}` : `exit code ${f.exitCode}`} after ${(f.durationMs / 1000).toFixed(1)} s`,
    );
    const stopped = r.ranks.filter((x) => x.stoppedBy);
    if (stopped.length) lines.push(`smcuda run: stopped the others still running: ${stopped.map((x) => `rank ${x.rank} (${x.stoppedBy})`).join(', ')}`);
  }
  return lines;
}

export async function runRun(argv: string[]): Promise<number> {
  const a = parseRunArgs(argv);
  if (a.help) {
    console.log(HELP);
    return 0;
  }
  const script = resolve(a.script!);
  if (!existsSync(script)) throw new UsageError(`script ${a.script} not found`);
  const plan =
    a.nodes > 1 || a.nodeRank !== undefined
      ? await planNodes(
          {
            ranks: a.ranks,
            nodes: a.nodes,
            ...(a.nodeRank !== undefined ? { nodeRank: a.nodeRank } : {}),
            ...(a.masterAddr !== undefined ? { masterAddr: a.masterAddr } : {}),
            ...(a.masterPort !== undefined ? { masterPort: a.masterPort } : {}),
          },
          process.env,
        )
      : undefined;
  // The nodes of a job across machines share one token: the one every launcher was given.
  const token = plan?.nodeRank !== undefined ? process.env.SMCUDA_TOKEN! : randomBytes(24).toString('hex');
  const { dir, made } = rendezvousDir(a.rendezvous);
  let result: JobResult;
  try {
    const job = new Job(rankSpecs(a, script, dir, token, plan), a.graceMs, { stdout: process.stdout, stderr: process.stderr });
    const onSignal = (signal: NodeJS.Signals) => {
      process.stderr.write(`smcuda run: ${signal}: stopping ranks (pid ${job.livePids().join(', ')})…\n`);
      job.interrupt(signal);
    };
    const signals: NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP'];
    for (const s of signals) process.on(s, onSignal);
    // A reader that went away (`smcuda run … | head`) must not end the launcher before its ranks: their output is dropped.
    const dropOutput = () => undefined;
    process.stdout.on('error', dropOutput);
    process.stderr.on('error', dropOutput);
    try {
      result = await job.run();
    } finally {
      for (const s of signals) process.off(s, onSignal);
    }
  } finally {
    if (made) rmSync(dir, { recursive: true, force: true });
  }
  // The ranks are gone: what they left in /dev/shm (and any other dead process's of this user) goes.
  const swept = sweepDeadSegments();
  const report: RunReport = {
    size: plan ? launchedRanks(plan) : a.ranks,
    runtime: a.runtime,
    script,
    rendezvous: dir,
    rendezvousRemoved: made,
    sweptSegments: swept.length,
    ...result,
  };
  for (const line of failureLines(report)) process.stderr.write(`${line}\n`);
  if (a.json) process.stdout.write(`${JSON.stringify(report)}\n`);
  return report.exitCode;
}
