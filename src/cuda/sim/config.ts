/**
 * The simulated world: which devices exist, which pairs have peer access,
 * which of them this process sees, and which faults to inject.
 *
 * Every process of a test must agree on the world, so the configuration
 * travels in the environment: `SMCUDA_SIM` (JSON of `SimOptions`) is
 * inherited by child processes, and `SMCUDA_SIM_VISIBLE` (like
 * CUDA_VISIBLE_DEVICES: indices into the world's device list, or UUIDs)
 * lets two processes see the same device under different ordinals. Devices
 * are always identified across processes by UUID.
 *
 * Precedence, field by field: constructor options, then SMCUDA_SIM_VISIBLE
 * (for `visible` only), then SMCUDA_SIM, then the defaults below.
 */
import { envSim } from '../../env.js';
import { ConfigError } from '../../errors.js';
import { isCudaErrorName, type CudaErrorName } from './result-codes.js';

export interface SimDevice {
  name: string;
  /** 'GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx' */
  uuid: string;
  pciBusId: string;
  computeCapability: [major: number, minor: number];
  /** Bytes this process may allocate on the device. */
  totalMemory: number;
  /** Streaming multiprocessors (default SIM_MULTIPROCESSORS, an H100's or H200's). */
  multiprocessors?: number;
}

/** The multiprocessors of a simulated device that does not say (an H100 SXM's or H200's: 132). */
export const SIM_MULTIPROCESSORS = 132;

/** A device named by UUID, or by its index in the world's device list. */
export type DeviceRef = string | number;

export interface SimFaults {
  /**
   * isReady() answers false for the first `calls` calls, and/or for `forMs`
   * after the driver was created, and/or until the epoch time `untilEpochMs`
   * — so a negotiation peer answers NOT_READY.
   */
  notReady?: { calls?: number; forMs?: number; untilEpochMs?: number };
  /** Device pairs (either order) without peer access, on top of `peerAccess`. */
  noPeerAccess?: Array<[DeviceRef, DeviceRef]>;
  /** The next ipcOpenMemHandle calls fail with these codes, one each, in order. */
  openFailures?: string[];
  /** Each ipcOpenMemHandle fails with `probability`, code drawn from `codes`, seeded PRNG. */
  openFailureRate?: { probability: number; codes?: string[]; seed?: number };
  /** At most this many distinct open IPC mappings in the process; beyond: `code` (default TOO_MANY_PEERS). */
  maxOpenMappings?: number | { limit: number; code?: string };
  /** Each copy and memset takes at least this long. */
  copyDelayMs?: number;
  /** Each copy takes bytes / (GB/s) on top of copyDelayMs. */
  copyBandwidthGBs?: number;
  /**
   * cuMemcpyHtoD from pageable host memory and cuMemsetD8 return before the
   * device has the bytes, as real drivers may: the write is queued on the
   * legacy default stream (0) and lands this long later (ms; 0: at once,
   * inside the call). Work ordered after the legacy stream sees it; a copy on
   * another stream, or another process's, may not.
   */
  pageableLagMs?: number;
  /**
   * Peer access says yes, yet every ipcOpenMemHandle fails with this code
   * (true: CUDA_ERROR_OPERATING_SYSTEM), as between containers that do not
   * share an IPC namespace, or under some drivers. false: off.
   */
  ipcOpenFails?: boolean | string;
  /**
   * The process dies of SIGSEGV at its call of `call` after `after` earlier
   * ones (default 0: the first), as a native driver that crashes: for tests
   * of what outlives a lost process.
   */
  crashOn?: { call: string; after?: number };
}

export interface SimOptions {
  devices?: SimDevice[];
  /** Pairs with peer access; default 'all'. Same device always has access. */
  peerAccess?: 'all' | 'none' | Array<[DeviceRef, DeviceRef]>;
  /** Which world devices this process sees, in ordinal order: '1,0', 'GPU-…', or a list. */
  visible?: string | Array<DeviceRef>;
  faults?: SimFaults;
  /**
   * The seed of the order in which cuMemcpyBatchAsync runs a batch's copies
   * (a GPU runs them concurrently, in no order it promises). Default: a
   * random seed per driver, which `batchOrderSeed` on the driver reports.
   */
  batchOrderSeed?: number;
}

/** Resolved faults: every option validated, codes typed. */
export interface ResolvedFaults {
  notReady: { calls: number; forMs: number; untilEpochMs: number };
  noPeerAccess: Array<[string, string]>;
  openFailures: CudaErrorName[];
  openFailureRate: { probability: number; codes: CudaErrorName[]; seed: number };
  maxOpenMappings: { limit: number; code: CudaErrorName };
  copyDelayMs: number;
  copyBandwidthGBs: number;
  pageableLagMs: number;
  ipcOpenFails: CudaErrorName | null;
  crashOn: { call: string; after: number } | null;
}

export interface SimWorld {
  /** Every device of the world, in world order. */
  devices: SimDevice[];
  /** World indices of the devices this process sees; ordinal i is devices[visible[i]]. */
  visible: number[];
  /** Peer access by UUID, before faults. */
  peerPairs: 'all' | 'none' | Array<[string, string]>;
  faults: ResolvedFaults;
  /** The seed of the batch copy order (given, or drawn for this driver). */
  batchOrderSeed: number;
}

const GiB = 1024 ** 3;

export const DEFAULT_SIM_DEVICES: readonly SimDevice[] = Object.freeze([
  {
    name: 'Simulated GPU 0',
    uuid: 'GPU-5170a11e-0000-4000-8000-000000000000',
    pciBusId: '0000:18:00.0',
    computeCapability: [9, 0],
    totalMemory: 16 * GiB,
  },
  {
    name: 'Simulated GPU 1',
    uuid: 'GPU-5170a11e-0001-4000-8000-000000000001',
    pciBusId: '0000:2a:00.0',
    computeCapability: [9, 0],
    totalMemory: 16 * GiB,
  },
]);

const UUID_RE = /^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** Environment variables a child process needs to live in the same simulated world. */
export function simEnv(options: SimOptions): Record<string, string> {
  const { visible, ...world } = options;
  const env: Record<string, string> = { SMCUDA_SIM: JSON.stringify(world) };
  if (visible !== undefined) env.SMCUDA_SIM_VISIBLE = Array.isArray(visible) ? visible.join(',') : visible;
  return env;
}

/** Builds the world from options and environment; throws ConfigError with what to fix. */
export function resolveSimWorld(options: SimOptions = {}, env: Record<string, string | undefined> = envSim()): SimWorld {
  const fromEnv = parseEnvOptions(env.SMCUDA_SIM);
  const devices = checkDevices(options.devices ?? fromEnv.devices ?? DEFAULT_SIM_DEVICES.map((d) => ({ ...d })));
  const visibleSpec = options.visible ?? env.SMCUDA_SIM_VISIBLE ?? fromEnv.visible;
  const visible = resolveVisible(visibleSpec, devices);
  const peerSpec = options.peerAccess ?? fromEnv.peerAccess ?? 'all';
  const peerPairs = peerSpec === 'all' || peerSpec === 'none' ? peerSpec : peerSpec.map((p) => resolvePair(p, devices, 'peerAccess'));
  const faults = resolveFaults({ ...fromEnv.faults, ...options.faults }, devices);
  const batchOrderSeed = resolveSeed(options.batchOrderSeed ?? fromEnv.batchOrderSeed);
  return { devices, visible, peerPairs, faults, batchOrderSeed };
}

/** Validates and fills in a fault set (used at start and by `inject`). */
export function resolveFaults(f: SimFaults, devices: SimDevice[]): ResolvedFaults {
  const nr = f.notReady ?? {};
  const maxOpen = typeof f.maxOpenMappings === 'number' ? { limit: f.maxOpenMappings } : (f.maxOpenMappings ?? { limit: Infinity });
  const rate = f.openFailureRate ?? { probability: 0 };
  if (!(rate.probability >= 0 && rate.probability <= 1)) {
    throw new ConfigError(`faults.openFailureRate.probability must be between 0 and 1, got ${rate.probability}`);
  }
  return {
    notReady: {
      calls: nonNegative('faults.notReady.calls', nr.calls ?? 0),
      forMs: nonNegative('faults.notReady.forMs', nr.forMs ?? 0),
      untilEpochMs: nonNegative('faults.notReady.untilEpochMs', nr.untilEpochMs ?? 0),
    },
    noPeerAccess: (f.noPeerAccess ?? []).map((p) => resolvePair(p, devices, 'faults.noPeerAccess')),
    openFailures: (f.openFailures ?? []).map((c) => errorName('faults.openFailures', c)),
    openFailureRate: {
      probability: rate.probability,
      codes: (rate.codes ?? ['CUDA_ERROR_OUT_OF_MEMORY']).map((c) => errorName('faults.openFailureRate.codes', c)),
      seed: rate.seed ?? 1,
    },
    maxOpenMappings: {
      limit: maxOpen.limit === Infinity ? Infinity : nonNegative('faults.maxOpenMappings', maxOpen.limit),
      code: errorName('faults.maxOpenMappings.code', maxOpen.code ?? 'CUDA_ERROR_TOO_MANY_PEERS'),
    },
    copyDelayMs: nonNegative('faults.copyDelayMs', f.copyDelayMs ?? 0),
    copyBandwidthGBs: nonNegative('faults.copyBandwidthGBs', f.copyBandwidthGBs ?? 0),
    pageableLagMs: nonNegative('faults.pageableLagMs', f.pageableLagMs ?? 0),
    ipcOpenFails: resolveIpcOpenFails(f.ipcOpenFails),
    crashOn: f.crashOn ? { call: driverCall('faults.crashOn.call', f.crashOn.call), after: nonNegative('faults.crashOn.after', f.crashOn.after ?? 0) } : null,
  };
}

function driverCall(what: string, v: unknown): string {
  if (typeof v !== 'string' || !/^cu[A-Z]\w*$/.test(v))
    throw new ConfigError(`${what} must name a driver call (e.g. "cuMemPoolImportPointer"), got ${JSON.stringify(v)}`);
  return v;
}

function resolveSeed(seed: number | undefined): number {
  if (seed === undefined) return (Math.random() * 0x1_0000_0000) >>> 0;
  if (!Number.isInteger(seed) || seed < 0 || seed > 0xffff_ffff) {
    throw new ConfigError(`batchOrderSeed must be an integer from 0 to 4294967295, got ${JSON.stringify(seed)}`);
  }
  return seed;
}

function parseEnvOptions(text: string | undefined): SimOptions {
  if (text === undefined || text.trim() === '') return {};
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    throw new ConfigError(`SMCUDA_SIM must be JSON of the simulator options (devices, peerAccess, faults): ${(err as Error).message}`);
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) {
    throw new ConfigError('SMCUDA_SIM must be a JSON object, e.g. {"faults":{"copyDelayMs":5}}');
  }
  return parsed as SimOptions;
}

function checkDevices(devices: SimDevice[]): SimDevice[] {
  if (!Array.isArray(devices)) throw new ConfigError('sim devices must be an array');
  const seen = new Set<string>();
  for (const [i, d] of devices.entries()) {
    if (!d || typeof d.name !== 'string' || typeof d.pciBusId !== 'string') {
      throw new ConfigError(`sim device ${i} needs name, uuid, pciBusId, computeCapability and totalMemory`);
    }
    if (!UUID_RE.test(d.uuid)) {
      throw new ConfigError(`sim device ${i}: uuid must look like 'GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx' (lower-case hex), got ${JSON.stringify(d.uuid)}`);
    }
    if (seen.has(d.uuid)) throw new ConfigError(`sim device ${i}: uuid ${d.uuid} appears twice`);
    seen.add(d.uuid);
    if (!Array.isArray(d.computeCapability) || d.computeCapability.length !== 2) {
      throw new ConfigError(`sim device ${i}: computeCapability must be [major, minor]`);
    }
    nonNegative(`sim device ${i} totalMemory`, d.totalMemory);
    if (d.multiprocessors !== undefined && (!Number.isSafeInteger(d.multiprocessors) || d.multiprocessors < 1)) {
      throw new ConfigError(`sim device ${i}: multiprocessors must be a positive integer, got ${JSON.stringify(d.multiprocessors)}`);
    }
  }
  return devices;
}

function resolveVisible(spec: string | DeviceRef[] | undefined, devices: SimDevice[]): number[] {
  if (spec === undefined) return devices.map((_, i) => i);
  const items = Array.isArray(spec)
    ? spec
    : spec
        .split(',')
        .map((s) => s.trim())
        .filter((s) => s !== '');
  const out: number[] = [];
  for (const item of items) {
    const idx = resolveRef(typeof item === 'string' && /^\d+$/.test(item) ? Number(item) : item, devices, 'SMCUDA_SIM_VISIBLE');
    if (out.includes(idx)) throw new ConfigError(`SMCUDA_SIM_VISIBLE lists device ${String(item)} twice`);
    out.push(idx);
  }
  return out;
}

function resolveRef(ref: DeviceRef, devices: SimDevice[], what: string): number {
  if (typeof ref === 'number') {
    if (Number.isInteger(ref) && ref >= 0 && ref < devices.length) return ref;
    throw new ConfigError(`${what}: device index ${ref} is out of range (the world has ${devices.length} devices)`);
  }
  const idx = devices.findIndex((d) => d.uuid === ref);
  if (idx < 0) throw new ConfigError(`${what}: no simulated device has uuid ${JSON.stringify(ref)}`);
  return idx;
}

function resolvePair(pair: [DeviceRef, DeviceRef], devices: SimDevice[], what: string): [string, string] {
  if (!Array.isArray(pair) || pair.length !== 2) throw new ConfigError(`${what}: each entry must be a pair [a, b]`);
  return [devices[resolveRef(pair[0], devices, what)]!.uuid, devices[resolveRef(pair[1], devices, what)]!.uuid];
}

function errorName(what: string, code: string): CudaErrorName {
  if (!isCudaErrorName(code))
    throw new ConfigError(`${what}: ${JSON.stringify(code)} is not a CUDA error name the simulator knows (e.g. CUDA_ERROR_ALREADY_MAPPED)`);
  return code;
}

function nonNegative(what: string, n: unknown): number {
  if (typeof n !== 'number' || !(n >= 0)) throw new ConfigError(`${what} must be a non-negative number, got ${String(n)}`);
  return n;
}

function resolveIpcOpenFails(v: SimFaults['ipcOpenFails']): CudaErrorName | null {
  if (v === undefined || v === false) return null;
  if (v === true) return 'CUDA_ERROR_OPERATING_SYSTEM';
  if (typeof v !== 'string') throw new ConfigError(`faults.ipcOpenFails must be a boolean or a CUDA error name, got ${String(v)}`);
  return errorName('faults.ipcOpenFails', v);
}
