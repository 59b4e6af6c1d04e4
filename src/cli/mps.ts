/**
 * Whether the CUDA Multi-Process Service runs on this machine. Processes that
 * share a GPU without it take turns through GPU context switches: measured on
 * an H200, an 8 B half round trip between two processes on one GPU costs
 * several times more without MPS (docs/benchmarks.md, 'Running it').
 *
 * MPS is running when its control daemon's pipe directory
 * ($CUDA_MPS_PIPE_DIRECTORY, default /tmp/nvidia-mps) holds the `control`
 * socket; the daemon process (nvidia-cuda-mps-control) is reported when
 * /proc shows it.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';

export const MPS_START_COMMAND = 'nvidia-cuda-mps-control -d';
export const MPS_COST = 'ranks on one GPU without MPS pay a GPU context switch per message: ~150 µs per half round trip on an H200, against ~19 µs with MPS';

export interface MpsStatus {
  active: boolean;
  pipeDirectory: string;
  controlSocket: boolean;
  /** pid of nvidia-cuda-mps-control, when /proc shows it. */
  controlPid?: number;
  /** pid of nvidia-cuda-mps-server (started on the first client), when /proc shows it. */
  serverPid?: number;
}

function processNamed(name: string, proc: string): number | undefined {
  let entries: string[];
  try {
    entries = readdirSync(proc);
  } catch {
    return undefined;
  }
  for (const e of entries) {
    if (!/^\d+$/.test(e)) continue;
    try {
      if (readFileSync(join(proc, e, 'comm'), 'utf8').trim() === name.slice(0, 15)) return Number(e);
    } catch {
      // the process ended while we looked
    }
  }
  return undefined;
}

export function mpsStatus(env: NodeJS.ProcessEnv = process.env, proc = '/proc'): MpsStatus {
  const pipeDirectory = env.CUDA_MPS_PIPE_DIRECTORY || '/tmp/nvidia-mps';
  const control = join(pipeDirectory, 'control');
  let controlSocket = false;
  try {
    controlSocket = existsSync(control) && (statSync(control).isSocket() || statSync(control).isFIFO());
  } catch {
    controlSocket = false;
  }
  const controlPid = processNamed('nvidia-cuda-mps-control', proc);
  const serverPid = processNamed('nvidia-cuda-mps-server', proc);
  return {
    active: controlSocket,
    pipeDirectory,
    controlSocket,
    ...(controlPid !== undefined ? { controlPid } : {}),
    ...(serverPid !== undefined ? { serverPid } : {}),
  };
}

/** The lines to print when ranks share a GPU without MPS (none otherwise). */
export function sharedGpuAdvice(sharing: boolean, mps: MpsStatus): string[] {
  if (!sharing || mps.active) return [];
  return [
    `note: ${MPS_COST}.`,
    `      Start MPS for this user with \`${MPS_START_COMMAND}\` (stop it with \`echo quit | nvidia-cuda-mps-control\`); no ${join(mps.pipeDirectory, 'control')} now.`,
  ];
}
