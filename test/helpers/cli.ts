/** Runs the compiled `smcuda` command as a user would (dist/: `npm test` compiles first). */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

/** Every operation `smcuda demo --collectives` must cover, as its report labels them (spelt out: the tests hold the demo to it). */
export const DEMO_COLLECTIVE_OPS = [
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

export const CLI = new URL('../../dist/src/cli/main.js', import.meta.url).pathname;

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

export async function smcuda(args: string[], env: NodeJS.ProcessEnv = {}): Promise<CliResult> {
  try {
    const { stdout, stderr } = await promisify(execFile)(process.execPath, [CLI, ...args], {
      env: { ...process.env, ...env },
      maxBuffer: 64 << 20,
      timeout: 120_000,
    });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof e.code === 'number' ? e.code : 1, stdout: e.stdout ?? '', stderr: e.stderr ?? '' };
  }
}
