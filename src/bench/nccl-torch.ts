/**
 * The NCCL baseline of the collectives suite: runs src/bench/nccl_allreduce.py
 * (NCCL all_reduce through PyTorch, one process per GPU) as a subprocess and
 * reads the JSON it writes. Where python3 is missing, torch does not import,
 * or there are fewer GPUs than ranks, the outcome is `skipped` with the
 * reason, and the suite says so beside the figures.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ProtocolError } from '../errors.js';

export interface NcclPoint {
  size: number;
  count: number;
  /** stream: calls back to back; graph: the calls captured in a CUDA graph and replayed. */
  mode: 'stream' | 'graph';
  /** Calls per run. */
  iters: number;
  /** µs per call, one per run (the slowest rank's). */
  runsUs: number[];
  median: number;
  min: number;
  max: number;
  /** nccl-tests' bus bandwidth at the median, GB/s. */
  busGBs: number;
}

export interface NcclReport {
  torch: string;
  cuda: string | null;
  nccl: string;
  devices: string[];
  ranks: number;
  verified: boolean;
  results: NcclPoint[];
}

export type NcclOutcome = { report: NcclReport } | { skipped: string };

export interface NcclRequest {
  ranks: number;
  sizes: number[];
  graphSizes: number[];
  runs: number;
  warmup?: number;
  /** Calls per run: budgetBytes / size, clamped to [minIters, maxIters]. */
  budgetBytes?: number;
  minIters?: number;
  maxIters?: number;
  /** Calls captured in the graph. */
  graphCalls?: number;
  timeoutMs: number;
  /** Default 'python3' (on the GPU machines, the one that holds PyTorch). */
  python?: string;
}

/** Where the script is: src/bench/ (the package ships src/), found from dist/src/bench/ or from src/bench/. */
export function ncclScriptPath(): string {
  const here = fileURLToPath(new URL('.', import.meta.url));
  for (const rel of ['nccl_allreduce.py', '../../../src/bench/nccl_allreduce.py']) {
    const p = join(here, rel);
    if (existsSync(p)) return p;
  }
  return join(here, 'nccl_allreduce.py');
}

export function scriptArgs(r: NcclRequest, out: string): string[] {
  const args = ['--ranks', String(r.ranks), '--sizes', r.sizes.join(','), '--graph-sizes', r.graphSizes.join(','), '--runs', String(r.runs), '--out', out];
  if (r.warmup !== undefined) args.push('--warmup', String(r.warmup));
  if (r.budgetBytes !== undefined) args.push('--budget-bytes', String(r.budgetBytes));
  if (r.minIters !== undefined) args.push('--min-iters', String(r.minIters));
  if (r.maxIters !== undefined) args.push('--max-iters', String(r.maxIters));
  if (r.graphCalls !== undefined) args.push('--graph-calls', String(r.graphCalls));
  return args;
}

export async function runNcclAllreduce(r: NcclRequest): Promise<NcclOutcome> {
  const dir = mkdtempSync(join(tmpdir(), 'smcuda-nccl-'));
  const out = join(dir, 'nccl.json');
  const python = r.python ?? 'python3';
  try {
    const { code, signal, stderr, spawnError } = await new Promise<{ code: number | null; signal: NodeJS.Signals | null; stderr: string; spawnError?: Error }>(
      (resolve) => {
        const child = spawn(python, [ncclScriptPath(), ...scriptArgs(r, out)], {
          stdio: ['ignore', 'ignore', 'pipe'],
          // Multicast off whatever the caller's environment says (see the GPU machines' notes).
          env: { ...process.env, NCCL_NVLS_ENABLE: '0', TORCH_SYMM_MEM_DISABLE_MULTICAST: '1', NVSHMEM_DISABLE_NVLS: '1', PYTHONDONTWRITEBYTECODE: '1' },
        });
        let err = '';
        child.stderr.setEncoding('utf8');
        child.stderr.on('data', (s: string) => (err = (err + s).slice(-4000)));
        const timer = setTimeout(() => child.kill('SIGKILL'), r.timeoutMs);
        child.once('error', (e) => {
          clearTimeout(timer);
          resolve({ code: null, signal: null, stderr: err, spawnError: e });
        });
        child.once('close', (c, s) => {
          clearTimeout(timer);
          resolve({ code: c, signal: s, stderr: err });
        });
      },
    );
    if (spawnError) return { skipped: `${python} could not be started (${spawnError.message}): NCCL baseline not measured` };
    if (!existsSync(out)) {
      const why = signal ? `was killed (${signal}${signal === 'SIGKILL' ? `, after ${r.timeoutMs / 1000} s at most` : ''})` : `exited with code ${code}`;
      throw new ProtocolError(`the NCCL baseline (${python} ${ncclScriptPath()}) ${why} without a result: ${stderr.trim().split('\n').slice(-5).join(' | ')}`);
    }
    return parseNcclOutput(readFileSync(out, 'utf8'));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The script's JSON, checked field by field; a document of another shape is a ProtocolError. */
export function parseNcclOutput(text: string): NcclOutcome {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (err) {
    throw new ProtocolError(`the NCCL baseline wrote no valid JSON: ${(err as Error).message}`);
  }
  const bad = (what: string): never => {
    throw new ProtocolError(`the NCCL baseline's JSON ${what}`);
  };
  if (!isObject(doc)) return bad('is not an object');
  if (typeof doc.skipped === 'string') return { skipped: doc.skipped };
  for (const k of ['torch', 'nccl'] as const) if (typeof doc[k] !== 'string') bad(`lacks ${k}`);
  if (typeof doc.ranks !== 'number' || !(doc.ranks >= 1)) bad('lacks ranks');
  if (typeof doc.verified !== 'boolean') bad('lacks verified');
  if (!Array.isArray(doc.results)) return bad('lacks results');
  if (!Array.isArray(doc.devices) || !doc.devices.every((d) => typeof d === 'string')) bad('lacks devices');
  const results = doc.results.map((p: unknown, i: number): NcclPoint => {
    if (!isObject(p)) return bad(`results[${i}] is not an object`);
    for (const k of ['size', 'count', 'iters', 'median', 'min', 'max', 'busGBs'] as const) {
      if (typeof p[k] !== 'number' || !Number.isFinite(p[k])) bad(`results[${i}].${k} is not a finite number`);
    }
    if (p.mode !== 'stream' && p.mode !== 'graph') bad(`results[${i}].mode is ${String(p.mode)}, not stream or graph`);
    if (!Array.isArray(p.runsUs) || p.runsUs.length === 0 || !p.runsUs.every((x) => typeof x === 'number' && Number.isFinite(x)))
      bad(`results[${i}].runsUs is not a list of numbers`);
    return {
      size: p.size as number,
      count: p.count as number,
      mode: p.mode as NcclPoint['mode'],
      iters: p.iters as number,
      runsUs: p.runsUs as number[],
      median: p.median as number,
      min: p.min as number,
      max: p.max as number,
      busGBs: p.busGBs as number,
    };
  });
  return {
    report: {
      torch: doc.torch as string,
      cuda: typeof doc.cuda === 'string' ? doc.cuda : null,
      nccl: doc.nccl as string,
      devices: doc.devices as string[],
      ranks: doc.ranks as number,
      verified: doc.verified as boolean,
      results,
    },
  };
}

function isObject(x: unknown): x is Record<string, unknown> {
  return typeof x === 'object' && x !== null && !Array.isArray(x);
}

/** The point at `size` and `mode`, if measured. */
export function ncclAt(report: NcclReport | undefined, size: number, mode: NcclPoint['mode'] = 'stream'): NcclPoint | undefined {
  return report?.results.find((p) => p.size === size && p.mode === mode);
}
