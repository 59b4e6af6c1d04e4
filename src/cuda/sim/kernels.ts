/**
 * The simulator's modules and kernels: a loaded PTX text is parsed for its
 * `.entry` names and parameter lists, and each entry is bound to the
 * TypeScript twin registered under the same name (src/kernels/sim/). A
 * launch checks the arguments against the entry's parameters, as the PTX
 * declares them, and runs the twin over the simulated device memory when its
 * stream reaches it.
 */
import type { KernelArg, LaunchConfig } from '../driver.js';
import type { KernelTwin } from '../../kernels/sim/twin.js';
import { COPY_LIST_TWINS } from '../../kernels/sim/copy-list.js';
import { FILL_TWINS } from '../../kernels/sim/fill.js';
import { REDUCE_TWINS } from '../../kernels/sim/reduce.js';
import { type SteppedOp, MEMOP_TWINS } from '../../kernels/sim/flag-ops.js';
import type { TwinMemory } from '../../kernels/sim/twin.js';
import { cudaError } from './result-codes.js';

/** Twins by entry name: the package's kernels, plus any a test registers. */
const twins = new Map<string, KernelTwin>([...Object.entries(REDUCE_TWINS), ...Object.entries(FILL_TWINS), ...Object.entries(COPY_LIST_TWINS)]);

/** A kernel the simulated driver queues as a memory-operation batch (it waits on other processes), or undefined. */
export function memOpTwinOf(entry: string): ((args: readonly KernelArg[], config: LaunchConfig, memory: TwinMemory) => SteppedOp[]) | undefined {
  return MEMOP_TWINS[entry];
}

/** Binds `entry` (a PTX `.entry` name) to its TypeScript twin; for tests and kernels shipped elsewhere. */
export function registerKernelTwin(entry: string, twin: KernelTwin): void {
  twins.set(entry, twin);
}

/** PTX parameter classes: what a KernelArg of each type must match. */
type ParamClass = 'b64' | 'b32' | 'f32' | 'f64';

export interface SimEntry {
  name: string;
  params: ParamClass[];
}

const ENTRY = /\.entry\s+([A-Za-z_$%][\w$]*)\s*\(([^)]*)\)/g;
const PARAM = /\.param\s+\.(u64|s64|b64|u32|s32|b32|f32|f64)\b/g;

/** The entries of a PTX text; refuses text that is not PTX (CUDA_ERROR_INVALID_PTX, as the JIT does). */
export function parsePtx(ptx: string): Map<string, SimEntry> {
  if (!/^\s*\.version\s+\d+\.\d+/m.test(ptx) || !/^\s*\.target\s+/m.test(ptx)) {
    throw cudaError('cuModuleLoadData', 'CUDA_ERROR_INVALID_PTX', 'the text has no .version and .target: not PTX');
  }
  const entries = new Map<string, SimEntry>();
  for (const m of ptx.matchAll(ENTRY)) {
    const params: ParamClass[] = [];
    for (const p of m[2]!.matchAll(PARAM)) {
      const t = p[1]!;
      params.push(t === 'f32' || t === 'f64' ? t : t.endsWith('64') ? 'b64' : 'b32');
    }
    entries.set(m[1]!, { name: m[1]!, params });
  }
  return entries;
}

function classOf(arg: KernelArg): ParamClass {
  switch (arg.type) {
    case 'ptr':
    case 'u64':
    case 'i64':
      return 'b64';
    case 'u32':
    case 'i32':
      return 'b32';
    default:
      return arg.type;
  }
}

/** The twin that runs `entry` with `args`; CUDA_ERROR_INVALID_VALUE when the arguments do not match the parameters. */
export function bindLaunch(entry: SimEntry, _config: LaunchConfig, args: readonly KernelArg[]): KernelTwin {
  const call = 'cuLaunchKernel';
  // The sizes and values were validated as on the native driver (validate-gpu-driven.ts); the simulator
  // also checks them against the entry's parameters, which a real launch does not: a mismatch is a bug.
  if (args.length !== entry.params.length) {
    throw cudaError(call, 'CUDA_ERROR_INVALID_VALUE', `${entry.name} takes ${entry.params.length} parameters, got ${args.length}`);
  }
  args.forEach((a, k) => {
    const want = entry.params[k]!;
    const is64 = a.type === 'ptr' || a.type === 'u64' || a.type === 'i64';
    if (classOf(a) !== want || (is64 ? typeof a.value !== 'bigint' : typeof a.value !== 'number')) {
      throw cudaError(call, 'CUDA_ERROR_INVALID_VALUE', `${entry.name} parameter ${k} is .${want}, got ${a.type} ${String(a.value)}`);
    }
  });
  if (memOpTwinOf(entry.name)) return () => {}; // queued as a batch by the driver
  const twin = twins.get(entry.name);
  if (!twin)
    throw cudaError(call, 'CUDA_ERROR_NOT_SUPPORTED', `the simulated driver has no TypeScript twin of ${entry.name}: register one (registerKernelTwin)`);
  return twin;
}
