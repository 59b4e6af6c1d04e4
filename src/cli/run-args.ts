/**
 * `smcuda run`'s command line: the launcher's options come before the
 * script, and everything from the script on is the script's own (as with
 * mpirun and torchrun), so `smcuda run -n 2 train.mjs --lr 0.1` passes
 * `--lr 0.1` to every rank. A `--` may stand before the script.
 */
import { RUNTIMES, type RuntimeName } from './runtimes.js';
import { parse, UsageError } from './usage.js';

export interface RunArgs {
  ranks: number;
  /** As CUDA_VISIBLE_DEVICES takes them (indices or UUIDs); rank i runs on entry i % length. */
  devices: string[] | undefined;
  runtime: RuntimeName;
  /** How long the other ranks have to exit by themselves once one failed, and SIGTERM to SIGKILL. */
  graceMs: number;
  rendezvous: string | undefined;
  /** Nodes of the job (run-nodes.ts); 1: one machine, no store. */
  nodes: number;
  /** This launch's node of a job across machines; undefined: every node on this machine (virtual). */
  nodeRank: number | undefined;
  masterAddr: string | undefined;
  masterPort: number | undefined;
  json: boolean;
  help: boolean;
  script: string | undefined;
  scriptArgs: string[];
}

const OPTIONS = {
  ranks: { type: 'string', short: 'n' },
  devices: { type: 'string' },
  runtime: { type: 'string', default: 'node' },
  grace: { type: 'string', default: '5000' },
  rendezvous: { type: 'string' },
  nodes: { type: 'string' },
  'node-rank': { type: 'string' },
  'master-addr': { type: 'string' },
  'master-port': { type: 'string' },
  json: { type: 'boolean', default: false },
  help: { type: 'boolean', short: 'h', default: false },
} as const;

/** Most ranks one launch starts: a guard against a typo (`-n 40000`), far above any node's GPUs. */
export const MAX_RANKS = 1024;

/** Options taking a value, as they may be written (`-n 4`, `--ranks 4`). */
function takesValue(arg: string): boolean {
  if (arg === '-n') return true;
  const m = /^--([^=]+)$/.exec(arg);
  return m !== null && (OPTIONS as Record<string, { type: string }>)[m[1]!]?.type === 'string';
}

/** Splits argv at the script: the launcher's part, the script, its arguments. */
export function splitAtScript(argv: string[]): { own: string[]; script: string | undefined; scriptArgs: string[] } {
  const own: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '--') return { own, script: argv[i + 1], scriptArgs: argv.slice(i + 2) };
    if (!arg.startsWith('-') || arg === '-') return { own, script: arg, scriptArgs: argv.slice(i + 1) };
    // As --ranks, so that `-n -1` reaches the range check (usage.ts passes negative values of long options).
    own.push(arg === '-n' ? '--ranks' : arg);
    if (takesValue(arg) && i + 1 < argv.length) own.push(argv[++i]!);
  }
  return { own, script: undefined, scriptArgs: [] };
}

function integer(name: string, v: string, min: number, max: number): number {
  const n = Number(v);
  if (!/^\d+$/.test(v.trim()) || !Number.isSafeInteger(n) || n < min || n > max) {
    throw new UsageError(`${name} takes an integer from ${min} to ${max}, got '${v}'`);
  }
  return n;
}

function deviceList(v: string): string[] {
  const list = v.split(',').map((s) => s.trim());
  if (list.some((s) => s === '' || /[\s=]/.test(s))) {
    throw new UsageError(`--devices takes a comma-separated list of device indices or UUIDs (as CUDA_VISIBLE_DEVICES), e.g. 0,1,2,3; got '${v}'`);
  }
  return list;
}

export function parseRunArgs(argv: string[]): RunArgs {
  const { own, script, scriptArgs } = splitAtScript(argv);
  const a = parse(own, OPTIONS);
  const devices = a.devices === undefined ? undefined : deviceList(a.devices);
  const runtime = a.runtime as RuntimeName;
  if (!RUNTIMES.includes(runtime)) throw new UsageError(`--runtime takes ${RUNTIMES.join(', ')}, got '${a.runtime}'`);
  if (a.rendezvous === '') throw new UsageError('--rendezvous takes a directory path');
  const out: RunArgs = {
    ranks: a.ranks === undefined ? (devices?.length ?? 0) : integer('-n/--ranks', a.ranks, 1, MAX_RANKS),
    devices,
    runtime,
    graceMs: integer('--grace', a.grace, 0, 3_600_000),
    rendezvous: a.rendezvous,
    nodes: a.nodes === undefined ? 1 : integer('--nodes', a.nodes, 1, MAX_RANKS),
    nodeRank: a['node-rank'] === undefined ? undefined : integer('--node-rank', a['node-rank'], 0, MAX_RANKS - 1),
    masterAddr: a['master-addr'],
    masterPort: a['master-port'] === undefined ? undefined : integer('--master-port', a['master-port'], 1, 65535),
    json: a.json,
    help: a.help,
    script,
    scriptArgs,
  };
  if (out.help) return out;
  if (out.nodes === 1 && (out.nodeRank !== undefined || out.masterAddr !== undefined || out.masterPort !== undefined))
    throw new UsageError('--node-rank, --master-addr and --master-port go with --nodes K (a job across K nodes)');
  if (out.ranks === 0) throw new UsageError('give the number of ranks, e.g. smcuda run -n 4 train.mjs');
  if (out.script === undefined) throw new UsageError('give the script each rank runs, e.g. smcuda run -n 4 train.mjs');
  return out;
}
