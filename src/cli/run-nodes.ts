/**
 * `smcuda run --nodes K`: where each rank of a job across nodes runs, and
 * what it is told (docs/multinode.md). Two ways:
 *
 *  - virtual nodes (no --node-rank): the -n ranks of this launch split into
 *    K nodes of n/K ranks on this machine, rank r on node ⌊r / (n/K)⌋; the
 *    TCP store on 127.0.0.1 at a port free now (or --master-port);
 *  - one node of a real job (--node-rank I, on each machine): -n ranks per
 *    node, rank I·n + i; every launcher names the same --master-addr and
 *    --master-port (or MASTER_ADDR/MASTER_PORT), and the same SMCUDA_TOKEN.
 *
 * Each rank gets RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE of its
 * node, SMCUDA_NODE (the node's index), NODE_RANK (as torchrun's GROUP_RANK),
 * MASTER_ADDR and MASTER_PORT; rank 0 serves the store at that port.
 */
import { createServer } from 'node:net';
import { UsageError } from './usage.js';

export interface NodePlan {
  /** Nodes in the job, and the ranks on each. */
  nodes: number;
  perNode: number;
  /** This launch's node, or undefined: every node here (virtual). */
  nodeRank: number | undefined;
  masterAddr: string;
  masterPort: number;
}

/** Ranks this launch starts under `plan`. */
export function launchedRanks(plan: NodePlan): number {
  return plan.nodeRank === undefined ? plan.nodes * plan.perNode : plan.perNode;
}

/** The environment of the i-th rank this launch starts. */
export function nodeEnv(plan: NodePlan, i: number): Record<string, string> {
  const node = plan.nodeRank ?? Math.floor(i / plan.perNode);
  const local = plan.nodeRank === undefined ? i % plan.perNode : i;
  return {
    RANK: String(node * plan.perNode + local),
    WORLD_SIZE: String(plan.nodes * plan.perNode),
    LOCAL_RANK: String(local),
    LOCAL_WORLD_SIZE: String(plan.perNode),
    SMCUDA_NODE: String(node),
    NODE_RANK: String(node),
    MASTER_ADDR: plan.masterAddr,
    MASTER_PORT: String(plan.masterPort),
  };
}

/** A port free now on loopback, for the store of virtual nodes. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

/**
 * The plan from the command line: `ranks` is -n (all ranks for virtual nodes,
 * the ranks per node with --node-rank); `env` supplies MASTER_ADDR,
 * MASTER_PORT and SMCUDA_TOKEN where the options do not.
 */
export async function planNodes(
  o: { ranks: number; nodes: number; nodeRank?: number; masterAddr?: string; masterPort?: number },
  env: Record<string, string | undefined>,
): Promise<NodePlan> {
  if (o.nodeRank === undefined) {
    if (o.ranks % o.nodes !== 0) throw new UsageError(`--nodes ${o.nodes} must divide -n ${o.ranks}: every node holds as many ranks`);
    return {
      nodes: o.nodes,
      perNode: o.ranks / o.nodes,
      nodeRank: undefined,
      masterAddr: '127.0.0.1',
      masterPort: o.masterPort ?? (await freePort()),
    };
  }
  if (o.nodeRank >= o.nodes) throw new UsageError(`--node-rank must be below --nodes ${o.nodes}, got ${o.nodeRank}`);
  const masterAddr = o.masterAddr ?? env.MASTER_ADDR;
  const port = o.masterPort ?? (env.MASTER_PORT ? Number(env.MASTER_PORT) : undefined);
  if (!masterAddr || port === undefined || !Number.isInteger(port) || port < 1 || port > 65535)
    throw new UsageError("--node-rank needs node 0's address and a free port there: --master-addr HOST --master-port PORT (or MASTER_ADDR and MASTER_PORT)");
  if (!env.SMCUDA_TOKEN)
    throw new UsageError('a job across machines needs the same job token on every node: set SMCUDA_TOKEN (e.g. to `openssl rand -hex 24`) for every launcher');
  return { nodes: o.nodes, perNode: o.ranks, nodeRank: o.nodeRank, masterAddr, masterPort: port };
}
