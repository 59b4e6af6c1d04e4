/**
 * Joining a job across nodes (multinode-communicator.ts), from the
 * environment: RANK, WORLD_SIZE, SMCUDA_TOKEN, the TCP store's address
 * (MASTER_ADDR/MASTER_PORT or SMCUDA_RENDEZVOUS=tcp://…), SMCUDA_NODE, and
 * optionally SMCUDA_RENDEZVOUS as a directory (the node's rendezvous is its
 * `node-<name>` folder; else a folder of the temporary directory named
 * from the job). The ranks meet at the store (rank 0 serves it), learn
 * the layout (node-layout.ts), make their node's Communicator and the
 * engine between nodes, and leave the store together: it serves the set-up
 * only. A failed set-up is the same typed error on every rank.
 */
import { createHash } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { StreamHandle } from '../cuda/driver.js';
import { envCommunicator, envMultiNode, envStoreAddress, type Env } from '../env.js';
import { ConfigError } from '../errors.js';
import type { StreamMarks } from '../gpu/stream-marks.js';
import { loadNccl } from '../nccl/nccl.js';
import { Communicator, type CommunicatorOptions } from './communicator.js';
import { engineKindOf, type EngineKind, type InterNodeEngine } from './internode-engine.js';
import { NcclEngine } from './nccl-engine.js';
import { checkNodeName, discoverNodes, type NodeLayout } from './node-layout.js';
import { checkRankSize, type RendezvousOptions } from './rendezvous.js';
import { engineHost, SocketEngine } from './socket-engine.js';
import { TcpStore } from './tcp-store.js';

export interface MultiNodeOptions extends Partial<RendezvousOptions>, CommunicatorOptions {
  /** This rank's node name (default SMCUDA_NODE). */
  node?: string;
  /** The engine between nodes (default SMCUDA_INTERNODE, else NCCL on a GPU and the socket twin on the simulated driver). */
  internode?: EngineKind;
}

/** What a rank of a job across nodes joined with. */
export interface Joined {
  local: Communicator;
  engine: InterNodeEngine;
  layout: NodeLayout;
  marks: StreamMarks;
  /** The node's rendezvous folder. */
  dir: string;
  /** Where the node's communicator aborted during the set-up (a rank that finished first failed its first call). */
  aborted: () => Error | undefined;
}

const DEFAULT_TIMEOUT_MS = 60_000;
const OWN_KEYS = ['node', 'internode'] as const;

/** The set-up; the node's plain Communicator where every rank is on one node. */
export async function joinAcrossNodes(options: MultiNodeOptions = {}, env?: Env): Promise<Joined | Communicator> {
  const { node: givenNode, internode, ...rest } = options;
  const e = envCommunicator(env);
  const m = envMultiNode(env);
  const rank = options.rank ?? e.rank;
  const size = options.size ?? e.size;
  if (rank === undefined || size === undefined) throw new ConfigError('RANK and WORLD_SIZE must be set (as torchrun sets them), or rank and size given');
  checkRankSize(rank, size);
  const name = checkNodeName(givenNode ?? m.node);
  const token = options.token ?? e.token;
  if (!token) throw new ConfigError('a job across nodes needs the job token: set SMCUDA_TOKEN to the same secret on every node');
  const address = envStoreAddress(env);
  if (!address)
    throw new ConfigError(
      'SMCUDA_NODE is set, so the ranks span nodes and meet at the TCP store: set MASTER_ADDR and MASTER_PORT (or SMCUDA_RENDEZVOUS=tcp://host:port) on every rank',
    );
  const given = internode ?? m.internode;
  if (given !== undefined) engineKindOf(given, 'native'); // a bad value fails before anything starts
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const setupMs = options.joinTimeoutMs ?? timeoutMs;
  const store = await TcpStore.create({ rank, address, token, timeoutMs: setupMs, env });
  let local: Communicator | undefined;
  let engine: InterNodeEngine | undefined;
  let marks: StreamMarks | undefined;
  try {
    const layout = await discoverNodes(store, rank, size, name, setupMs);
    if (e.localRank !== undefined && options.localRank === undefined && e.localRank !== layout.localRank)
      throw new ConfigError(`LOCAL_RANK is ${e.localRank}, and rank ${rank} is local rank ${layout.localRank} of node ${name}: fix LOCAL_RANK or unset it`);
    // NCCL named outright is loaded before the node meets: without it every rank fails alike, at once
    // (NcclUnavailableError, what to install), and a job on one node never needs it.
    if (layout.nodes > 1 && given !== undefined && engineKindOf(given, 'native') === 'nccl') loadNccl();
    const dirRoot = options.dir ?? e.rendezvous;
    const dir = dirRoot
      ? join(dirRoot, `node-${name}`)
      : join(tmpdir(), `smcuda-node-${createHash('sha256').update(`${token}\0${address.host}:${address.port}\0${name}`).digest('hex').slice(0, 16)}`);
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    const commOptions = Object.fromEntries(Object.entries(rest).filter(([k]) => !(OWN_KEYS as readonly string[]).includes(k)));
    local = await Communicator.create({
      ...commOptions,
      rank: layout.localRank,
      size: layout.localSize,
      dir,
      token,
      localRank: options.localRank ?? layout.localRank,
    });
    // A rank of the node that finished its set-up first may fail its first call (and abort the node) before
    // this rank's hierarchy listens: kept for it.
    let localAbort: Error | undefined;
    local.on('abort', (err) => {
      localAbort ??= err;
    });
    if (layout.nodes === 1) {
      await leaveStore(store, rank, size, setupMs);
      return local;
    }
    const kind = engineKindOf(given, local.driver.kind === 'sim' ? 'sim' : 'native');
    const made = local.transport.gpu.streamMarks();
    marks = made;
    const o = {
      store,
      group: layout.localRank,
      rank: layout.node,
      size: layout.nodes,
      driver: local.driver,
      reached: (s: StreamHandle) => made.mark(s),
      globalRank: (n: number) => n * layout.localSize + layout.localRank,
      setupMs,
      timeoutMs,
    };
    engine = kind === 'nccl' ? await NcclEngine.open(o) : await SocketEngine.open({ ...o, host: engineHost(address.host) });
    await leaveStore(store, rank, size, setupMs);
    return { local, engine, layout, marks: made, dir, aborted: () => localAbort };
  } catch (err) {
    const why = err instanceof Error ? err : new Error(String(err));
    engine?.abort(why);
    marks?.destroy();
    if (local) {
      local.abort(why);
      await local.close().catch(() => {});
    }
    await leaveStoreFailed(store, rank, size);
    throw err;
  }
}

/** How long rank 0 keeps the store for the others after its set-up failed (they fail alike, and read their last replies). */
const FAILED_LINGER_MS = 3000;

/**
 * After a failed set-up: each rank counts itself out, and rank 0 closes the
 * store once all have (or after FAILED_LINGER_MS), so that the others fail
 * for their own reason, not for a store closed under their last request.
 */
async function leaveStoreFailed(store: TcpStore, rank: number, size: number): Promise<void> {
  try {
    await store.add('setup/failed', 1);
    const until = Date.now() + FAILED_LINGER_MS;
    while (rank === 0 && Date.now() < until && (await store.add('setup/failed', 0)) < size) await new Promise((r) => setTimeout(r, 20));
  } catch {
    // the store is gone already
  }
  await store.close().catch(() => {});
}

/**
 * The end of the store's part: every rank says it is done, and rank 0 (which
 * serves the store) closes only once every rank has read that all are.
 */
async function leaveStore(store: TcpStore, rank: number, size: number, timeoutMs: number): Promise<void> {
  if ((await store.add('setup/done', 1)) === size) await store.set('setup/all', '1');
  await store.get('setup/all', { timeoutMs });
  if ((await store.add('setup/left', 1)) === size) await store.set('setup/gone', '1');
  if (rank === 0) await store.get('setup/gone', { timeoutMs });
  await store.close();
}
