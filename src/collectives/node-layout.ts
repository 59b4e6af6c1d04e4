/**
 * Where each rank of a job across nodes runs: every rank writes its node's
 * name (SMCUDA_NODE, or what `smcuda run --nodes` gives it) into the job's
 * TCP store and reads every other rank's. Nodes are numbered by their
 * lowest rank. The hierarchy (multinode-communicator.ts) needs every node
 * to hold the same number of ranks, numbered consecutively (as torchrun,
 * Slurm's block distribution and `smcuda run` number them), so that rank
 * r is local rank r % L of node ⌊r / L⌋: anything else is a ConfigError on
 * every rank, which each computes from the same table.
 */
import { ConfigError } from '../errors.js';
import type { EngineStore } from './internode-engine.js';

export interface NodeLayout {
  /** This rank's node index, the number of nodes, and its node's name. */
  node: number;
  nodes: number;
  name: string;
  /** This rank's index on its node, and how many ranks each node has. */
  localRank: number;
  localSize: number;
}

/** A node's name as SMCUDA_NODE may give it: what a file name can hold. */
export function checkNodeName(name: unknown): string {
  if (typeof name !== 'string' || !/^[A-Za-z0-9._-]{1,64}$/.test(name))
    throw new ConfigError(`SMCUDA_NODE (or the node option) must be 1-64 letters, digits, '.', '_' or '-', got ${JSON.stringify(name)}: fix it`);
  return name;
}

/** The layout of the job from every rank's node name, by rank (pure: every rank computes the same). */
export function layoutOf(names: readonly string[], rank: number): NodeLayout {
  const order: string[] = [];
  for (const n of names) if (!order.includes(n)) order.push(n);
  const perNode = order.map((n) => names.filter((x) => x === n).length);
  const localSize = perNode[0]!;
  if (perNode.some((k) => k !== localSize))
    throw new ConfigError(
      `the nodes hold different numbers of ranks (${order.map((n, i) => `${n}: ${perNode[i]}`).join(', ')}): a job across nodes needs the same number of ranks on every node`,
    );
  for (let r = 0; r < names.length; r++) {
    if (names[r] !== order[Math.floor(r / localSize)])
      throw new ConfigError(
        `rank ${r} runs on node ${names[r]}, and ranks ${Math.floor(r / localSize) * localSize}-${Math.floor(r / localSize) * localSize + localSize - 1} must be on one node: number the ranks of each node consecutively (as torchrun and smcuda run do; under Slurm, --distribution=block)`,
      );
  }
  const name = names[rank]!;
  return { node: order.indexOf(name), nodes: order.length, name, localRank: rank % localSize, localSize };
}

/** Writes this rank's node name into the store and reads every rank's (each waits up to `timeoutMs`). */
export async function discoverNodes(store: EngineStore, rank: number, size: number, name: string, timeoutMs: number): Promise<NodeLayout> {
  await store.set(`node/${rank}`, name);
  const names: string[] = [];
  for (let r = 0; r < size; r++) names.push(Buffer.from(await store.get(`node/${r}`, { timeoutMs })).toString('utf8'));
  // Every rank has read the table before any may act on it: one that fails next (a bad layout, NCCL absent)
  // closes the store if it is rank 0, and the others must fail for the same reason, not for the lost store.
  if ((await store.add('node/read', 1)) === size) await store.set('node/all-read', '1');
  await store.get('node/all-read', { timeoutMs });
  return layoutOf(names, rank);
}
