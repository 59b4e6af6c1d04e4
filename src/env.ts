/**
 * Every environment variable smcuda reads, in one place: what it overrides,
 * its default, and its validation. Library and driver code read the
 * environment only through this module (test/unit/core/env.test.ts checks that, and
 * that docs/debugging.md's table lists exactly these). A malformed value is a
 * ConfigError naming the variable, never silently ignored.
 *
 * Options given in code (TransportOptions) win over the environment; the
 * environment wins over the defaults. The variables are meant for tuning and
 * debugging a deployed program without changing its code.
 */
import { ConfigError } from './errors.js';

/** The environment a reader looks at (process.env unless a caller passes its own, as tests and child processes do). */
export type Env = Readonly<Record<string, string | undefined>>;

export interface EnvOverride {
  readonly name: string;
  /** What a value looks like. */
  readonly value: string;
  /** The default, as a user would write it. */
  readonly default: string;
  /** What it overrides or does. */
  readonly effect: string;
}

/** The table docs/debugging.md shows (kept in step by test/unit/core/env.test.ts). */
export const ENV_OVERRIDES: readonly EnvOverride[] = [
  {
    name: 'SMCUDA_TRACE',
    value: 'file path',
    default: 'off',
    effect:
      "append a JSON-lines trace of every transport to this file, created 0600; a symbolic link or another user's file there is refused (`Transport.create({ trace })` wins)",
  },
  {
    name: 'SMCUDA_CONTROL_RING',
    value: '0 or 1',
    default: '1',
    effect: 'the `controlRing` option: 0 keeps control frames on the socket (no shared-memory rings)',
  },
  {
    name: 'SMCUDA_CONTROL_SPIN_US',
    value: 'integer µs ≥ 0',
    default: '250',
    effect: 'the `controlSpinUs` option: how long the progress engine polls after the last activity (0: wake-ups only)',
  },
  {
    name: 'SMCUDA_COMPLETION_SPIN_US',
    value: 'integer µs ≥ 0',
    default: '20',
    effect: 'the `completionSpinUs` option: inline poll of a lone small copy before the progress engine takes it',
  },
  {
    name: 'SMCUDA_POLL_SPIN_US',
    value: 'integer µs ≥ 0',
    default: '20000',
    effect:
      'how long the native completion thread spins after its last completion before it sleeps (read by native/completion.cc when the thread starts; checked when a Transport is created)',
  },
  {
    name: 'SMCUDA_DEVICE_EAGER_LIMIT',
    value: 'integer bytes ≥ 0',
    default: '8192',
    effect: 'the `deviceEagerLimit` option: device messages up to this size go inline through the host while IPC is not in use',
  },
  {
    name: 'SMCUDA_NEGOTIATION_EAGER_LIMIT',
    value: 'integer bytes ≥ 0',
    default: '1048576',
    effect:
      'the `negotiationEagerLimit` option: device messages up to this size go inline through the host while the IPC negotiation has not settled, instead of waiting for it',
  },
  { name: 'SMCUDA_ADDON', value: 'file path', default: 'build/Release/smcuda.node', effect: 'load the native addon from this file' },
  {
    name: 'SMCUDA_SIM',
    value: 'JSON (SimOptions)',
    default: 'two simulated GPUs',
    effect: "the simulated driver's world: devices, peer access, faults (src/cuda/sim/config.ts)",
  },
  {
    name: 'SMCUDA_SIM_FD_FAULTS',
    value: 'JSON (SimFdFaults)',
    default: 'none',
    effect: 'faults the simulated driver injects into VMM/pool memory imports (src/cuda/sim/fd-faults.ts)',
  },
  {
    name: 'SMCUDA_SIM_VISIBLE',
    value: 'comma-separated indices or UUIDs',
    default: 'all',
    effect: 'which simulated devices this process sees (as CUDA_VISIBLE_DEVICES)',
  },
  { name: 'SMCUDA_CHROMIUM', value: 'file path', default: 'a system Chromium', effect: 'the browser `smcuda diagram --format svg` and the docs tests drive' },
  {
    name: 'SMCUDA_RENDEZVOUS',
    value: 'directory path, or tcp://host:port',
    default: 'none',
    effect:
      '`Communicator.fromEnv()`: the rendezvous directory every rank of the job shares (mode 0700); tcp://host:port: the TCP store rank 0 serves for ranks across machines (wins over MASTER_ADDR/MASTER_PORT)',
  },
  {
    name: 'SMCUDA_TOKEN',
    value: 'string',
    default: 'made by rank 0',
    effect:
      'the job token of `Communicator.create` and `fromEnv` (the `token` option wins); unset, rank 0 makes one and shares it through the rendezvous directory',
  },
  { name: 'RANK', value: 'integer ≥ 0', default: 'none', effect: "`Communicator.fromEnv()`: this process's rank (as torchrun sets it)" },
  { name: 'WORLD_SIZE', value: 'integer ≥ 1', default: 'none', effect: '`Communicator.fromEnv()`: how many ranks the job has' },
  {
    name: 'MASTER_ADDR',
    value: 'host name or IP address',
    default: 'none',
    effect: "the TCP store's host (rank 0's machine), as torchrun sets it; with MASTER_PORT",
  },
  { name: 'MASTER_PORT', value: 'integer 1–65535', default: 'none', effect: "the TCP store's port, as torchrun sets it; with MASTER_ADDR" },
  {
    name: 'SMCUDA_NODE',
    value: 'name (letters, digits, . _ -)',
    default: 'none',
    effect:
      "`Communicator.fromEnv()`: this rank's node; set, the ranks meet at the TCP store and those of one node through the node's rendezvous, and the collectives are hierarchical (docs/multinode.md)",
  },
  {
    name: 'SMCUDA_INTERNODE',
    value: 'nccl or sockets',
    default: 'nccl on a GPU, sockets on the simulated driver',
    effect: 'the engine between nodes of a job across nodes: NCCL, or the socket twin CI tests the hierarchy with (docs/multinode.md)',
  },
  {
    name: 'SMCUDA_NCCL_LIBRARY',
    value: 'file path',
    default: 'searched',
    effect:
      "load NCCL from this file (or this directory's libnccl.so.2) and nowhere else; unset: the loader's paths, then PyTorch's nvidia/nccl/lib (docs/multinode.md)",
  },
  {
    name: 'VIRTUAL_ENV',
    value: 'directory path',
    default: 'none',
    effect: 'a Python environment whose site-packages the NCCL search looks in first (as its activation sets it)',
  },
  {
    name: 'CONDA_PREFIX',
    value: 'directory path',
    default: 'none',
    effect: 'a conda environment whose site-packages the NCCL search looks in (as its activation sets it)',
  },
  {
    name: 'LOCAL_RANK',
    value: 'integer ≥ 0',
    default: 'RANK',
    effect: "`Communicator.fromEnv()`: the rank's index on this machine; its device is LOCAL_RANK % devices",
  },
  {
    name: 'NODE_DEBUG',
    value: 'list containing smcuda',
    default: 'off',
    effect: "debug lines on stderr (util.debuglog('smcuda')); the CLI also prints stacks",
  },
];

/**
 * Variables a parent process sets for the child it forks (the CLI's demo,
 * soak and bench workers): plumbing, not overrides, so not in the table.
 */
export const CHILD_CONFIG_VARIABLES: readonly string[] = ['SMCUDA_DEMO', 'SMCUDA_SOAK', 'SMCUDA_BENCH_WORKER', 'SMCUDA_DEMO_COLLECTIVES'];

/** The defaults TransportOptions take from the environment; absent where the variable is unset or empty. */
export interface EnvTransportDefaults {
  deviceEagerLimit?: number;
  negotiationEagerLimit?: number;
  completionSpinUs?: number;
  controlRing?: boolean;
  controlSpinUs?: number;
}

function raw(env: Env, name: string): string | undefined {
  const v = env[name];
  return v === undefined || v === '' ? undefined : v;
}

function nonNegativeInt(env: Env, name: string): number | undefined {
  const v = raw(env, name);
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!/^\s*\d+\s*$/.test(v) || !Number.isSafeInteger(n)) {
    throw new ConfigError(`${name} must be a non-negative integer, got ${JSON.stringify(v)}: fix or unset it`);
  }
  return n;
}

function flag(env: Env, name: string): boolean | undefined {
  const v = raw(env, name);
  if (v === undefined) return undefined;
  if (v === '0') return false;
  if (v === '1') return true;
  throw new ConfigError(`${name} must be 0 or 1, got ${JSON.stringify(v)}: fix or unset it`);
}

/**
 * The TransportOptions defaults the environment sets, validated. Also checks
 * SMCUDA_POLL_SPIN_US, which the native completion thread reads (it would
 * otherwise ignore a malformed value without a word).
 */
export function envTransportDefaults(env: Env = process.env): EnvTransportDefaults {
  nonNegativeInt(env, 'SMCUDA_POLL_SPIN_US');
  const out: EnvTransportDefaults = {};
  const deviceEagerLimit = nonNegativeInt(env, 'SMCUDA_DEVICE_EAGER_LIMIT');
  if (deviceEagerLimit !== undefined) out.deviceEagerLimit = deviceEagerLimit;
  const negotiationEagerLimit = nonNegativeInt(env, 'SMCUDA_NEGOTIATION_EAGER_LIMIT');
  if (negotiationEagerLimit !== undefined) out.negotiationEagerLimit = negotiationEagerLimit;
  const completionSpinUs = nonNegativeInt(env, 'SMCUDA_COMPLETION_SPIN_US');
  if (completionSpinUs !== undefined) out.completionSpinUs = completionSpinUs;
  const controlRing = flag(env, 'SMCUDA_CONTROL_RING');
  if (controlRing !== undefined) out.controlRing = controlRing;
  const controlSpinUs = nonNegativeInt(env, 'SMCUDA_CONTROL_SPIN_US');
  if (controlSpinUs !== undefined) out.controlSpinUs = controlSpinUs;
  return out;
}

/** SMCUDA_TRACE: the trace file every transport of this process appends to, if set. */
export function envTracePath(env: Env = process.env): string | undefined {
  return raw(env, 'SMCUDA_TRACE');
}

/** SMCUDA_ADDON: where to load the native addon from, if set. */
export function envAddonPath(env: Env = process.env): string | undefined {
  return raw(env, 'SMCUDA_ADDON');
}

/** SMCUDA_CHROMIUM: the browser to drive, if set. */
export function envChromium(env: Env = process.env): string | undefined {
  return raw(env, 'SMCUDA_CHROMIUM');
}

/** SMCUDA_SIM and SMCUDA_SIM_VISIBLE, unparsed: src/cuda/sim/config.ts parses and validates them. */
export function envSim(env: Env = process.env): { SMCUDA_SIM?: string; SMCUDA_SIM_VISIBLE?: string } {
  return { SMCUDA_SIM: raw(env, 'SMCUDA_SIM'), SMCUDA_SIM_VISIBLE: raw(env, 'SMCUDA_SIM_VISIBLE') };
}

/** SMCUDA_SIM_FD_FAULTS, unparsed: src/cuda/sim/fd-faults.ts parses and validates it. */
export function envSimFdFaults(env: Env = process.env): { SMCUDA_SIM_FD_FAULTS?: string } {
  return { SMCUDA_SIM_FD_FAULTS: raw(env, 'SMCUDA_SIM_FD_FAULTS') };
}

/** What Communicator.fromEnv reads: torchrun's RANK, WORLD_SIZE and LOCAL_RANK, and the rendezvous. */
export interface CommunicatorEnv {
  rank?: number;
  size?: number;
  localRank?: number;
  rendezvous?: string;
  token?: string;
}

/** RANK, WORLD_SIZE, LOCAL_RANK, SMCUDA_RENDEZVOUS and SMCUDA_TOKEN, validated (a malformed number is a ConfigError naming it). */
export function envCommunicator(env: Env = process.env): CommunicatorEnv {
  const out: CommunicatorEnv = {};
  const rank = nonNegativeInt(env, 'RANK');
  if (rank !== undefined) out.rank = rank;
  const size = nonNegativeInt(env, 'WORLD_SIZE');
  if (size !== undefined) out.size = size;
  const localRank = nonNegativeInt(env, 'LOCAL_RANK');
  if (localRank !== undefined) out.localRank = localRank;
  const rendezvous = raw(env, 'SMCUDA_RENDEZVOUS');
  // tcp://host:port names the TCP store across machines (envStoreAddress), not a directory.
  if (rendezvous !== undefined && !rendezvous.startsWith('tcp://')) out.rendezvous = rendezvous;
  const token = raw(env, 'SMCUDA_TOKEN');
  if (token !== undefined) out.token = token;
  return out;
}

/** SMCUDA_NODE (this rank's node, for a job across nodes) and SMCUDA_INTERNODE (the engine between nodes). */
export function envMultiNode(env: Env = process.env): { node?: string; internode?: string } {
  const node = raw(env, 'SMCUDA_NODE');
  const internode = raw(env, 'SMCUDA_INTERNODE');
  return { ...(node !== undefined ? { node } : {}), ...(internode !== undefined ? { internode } : {}) };
}

/** SMCUDA_NCCL_LIBRARY, and the Python environments the NCCL search looks in first: VIRTUAL_ENV, CONDA_PREFIX. */
export function envNccl(env: Env = process.env): { library?: string; pythonPrefixes: string[] } {
  const library = raw(env, 'SMCUDA_NCCL_LIBRARY');
  const pythonPrefixes = [raw(env, 'VIRTUAL_ENV'), raw(env, 'CONDA_PREFIX')].filter((p): p is string => p !== undefined);
  return library === undefined ? { pythonPrefixes } : { library, pythonPrefixes };
}

/** Where the TCP store of a rendezvous across machines is served. */
export interface StoreAddress {
  host: string;
  port: number;
  /** Which variables said so, for messages. */
  from: string;
}

function port(v: string, name: string): number {
  const n = Number(v);
  if (!/^\s*\d+\s*$/.test(v) || n < 1 || n > 65535) throw new ConfigError(`${name} must be a port number 1–65535, got ${JSON.stringify(v)}: fix or unset it`);
  return n;
}

/**
 * SMCUDA_RENDEZVOUS=tcp://host:port (an IPv6 host in brackets), else
 * MASTER_ADDR and MASTER_PORT as torchrun sets them; undefined when neither
 * is set (SMCUDA_RENDEZVOUS naming a directory is the one-node rendezvous).
 * A malformed value, or one of MASTER_ADDR/MASTER_PORT without the other, is a ConfigError.
 */
export function envStoreAddress(env: Env = process.env): StoreAddress | undefined {
  const rdv = raw(env, 'SMCUDA_RENDEZVOUS');
  if (rdv?.startsWith('tcp://')) {
    const m = /^tcp:\/\/(\[[0-9a-fA-F:.]+\]|[^:/[\]]+):([^/]+)\/?$/.exec(rdv);
    if (!m) throw new ConfigError(`SMCUDA_RENDEZVOUS must be tcp://host:port, got ${JSON.stringify(rdv)}: fix or unset it`);
    return { host: m[1]!.replace(/^\[|\]$/g, ''), port: port(m[2]!, 'the port of SMCUDA_RENDEZVOUS'), from: 'SMCUDA_RENDEZVOUS' };
  }
  const host = raw(env, 'MASTER_ADDR');
  const p = raw(env, 'MASTER_PORT');
  if (host === undefined && p === undefined) return undefined;
  if (host === undefined || p === undefined)
    throw new ConfigError(
      `${host === undefined ? 'MASTER_PORT is set without MASTER_ADDR' : 'MASTER_ADDR is set without MASTER_PORT'}: set both (rank 0's host and a free port on it), or neither`,
    );
  return { host, port: port(p, 'MASTER_PORT'), from: 'MASTER_ADDR/MASTER_PORT' };
}
