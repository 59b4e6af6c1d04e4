/**
 * One rank of `smcuda demo --collectives` (demo-collectives.ts): joins the
 * communicator through the demo's rendezvous directory, then answers `case`
 * commands: runs one collective on device buffers and checks its own output
 * against the host reference (collective-cases.ts).
 *
 *   ready (rank, driver, reason, device)
 *   case CollectiveCase → { algorithm, verified, mismatch? }
 *   exit
 */
import { Communicator, type ForcedAlgorithm } from '../collectives/communicator.js';
import type { MultiNodeCommunicator } from '../collectives/multinode-communicator.js';
import type { DriverKind } from '../cuda/driver.js';
import { DTYPE_BYTES } from '../kernels/dtypes.js';
import { alltoallvCount, caseInput, expectedOutput, inputCount, outputCount, vCounts, type CollectiveCase } from './collective-cases.js';
import { expectedHierarchical } from './hierarchical-cases.js';
import { serveRequests, workerConfig } from './worker-protocol.js';

export interface CollectivesWorkerConfig {
  rank: number;
  ranks: number;
  dir: string;
  token: string;
  driver: 'auto' | 'native' | 'sim';
  timeoutMs: number;
  algorithm?: ForcedAlgorithm;
  /** Virtual nodes (--nodes): the ranks join across nodes through the TCP store at this port, rank r on node ⌊r / (ranks / nodes)⌋. */
  nodes?: { count: number; port: number };
}

export interface CollectivesWorkerReady {
  rank: number;
  driver: DriverKind;
  reason: string;
  device: { index: number; name: string; uuid: string };
  /** Across nodes: the engine between them (the cases it cannot reduce are left out, and avg is checked in its order). */
  engine?: 'nccl' | 'sockets';
}

export interface CaseResult {
  algorithm: string;
  verified: boolean;
  mismatch?: string;
}

const cfg = workerConfig<CollectivesWorkerConfig>('SMCUDA_DEMO_COLLECTIVES', 'smcuda demo --collectives');
let comm: Communicator | MultiNodeCommunicator | undefined;
/** One stream for every case: the communicator synchronises the streams it used when it closes. */
let stream: bigint | undefined;

async function runCase(c: CollectiveCase): Promise<CaseResult> {
  const d = comm!.driver;
  const { rank, size } = comm!;
  const es = DTYPE_BYTES[c.dtype];
  const inBytes = inputCount(c, size, rank) * es;
  const outBytes = outputCount(c, size, rank) * es;
  const send = d.memAlloc(Math.max(inBytes, 1));
  const recv = d.memAlloc(Math.max(outBytes, 1));
  stream ??= d.streamCreate();
  try {
    if (inBytes > 0) d.memcpyHtoDAsync(send, caseInput(c, rank, size), stream);
    // premul's factor rides with the call (a field beside op, as users pass it).
    const a = { send, recv, count: c.count, dtype: c.dtype, stream, ...(c.factor !== undefined ? { factor: c.factor } : {}) };
    let res;
    switch (c.op) {
      case 'allreduce':
        res = await comm!.allreduce({ ...a, op: c.reduce! });
        break;
      case 'reduce':
        res = await comm!.reduce({ ...a, op: c.reduce!, root: c.root! });
        break;
      case 'reduce-scatter':
        res = await comm!.reduceScatter({ ...a, op: c.reduce! });
        break;
      case 'broadcast':
        res = await comm!.broadcast({ ...a, root: c.root! });
        break;
      case 'allgather':
        res = await comm!.allgather(a);
        break;
      case 'alltoall':
        res = await comm!.alltoall(a);
        break;
      case 'gather':
        res = await comm!.gather({ ...a, root: c.root! });
        break;
      case 'scatter':
        res = await comm!.scatter({ ...a, root: c.root! });
        break;
      case 'allgatherv':
        res = await comm!.allgatherv({ send, recv, counts: vCounts(c, size), dtype: c.dtype, stream });
        break;
      case 'reduce-scatterv':
        res = await comm!.reduceScatterv({ ...a, counts: vCounts(c, size), op: c.reduce! });
        break;
      case 'alltoallv': {
        const ranks = [...Array(size).keys()];
        res = await comm!.alltoallv({
          send,
          recv,
          sendCounts: ranks.map((j) => alltoallvCount(c, size, rank, j)),
          recvCounts: ranks.map((i) => alltoallvCount(c, size, i, rank)),
          dtype: c.dtype,
          stream,
        });
        break;
      }
    }
    // Across nodes a reduction runs in the hierarchy's order: its own reference (hierarchical-cases.ts).
    const want = cfg.nodes && 'engine' in comm! ? expectedHierarchical(c, rank, size, cfg.nodes.count, comm.engine.kind) : expectedOutput(c, rank, size);
    if (!want || outBytes === 0) return { algorithm: res.algorithm, verified: true };
    const got = new Uint8Array(outBytes);
    d.memcpyDtoH(got, recv);
    for (let i = 0; i < outBytes; i++) {
      if (got[i] !== want[i])
        return {
          algorithm: res.algorithm,
          verified: false,
          mismatch: `rank ${rank}: ${c.op}${c.reduce ? ` ${c.reduce}` : ''} ${c.dtype} ×${c.count}: byte ${i} is ${got[i]}, expected ${want[i]}`,
        };
    }
    return { algorithm: res.algorithm, verified: true };
  } finally {
    d.memFree(send);
    d.memFree(recv);
  }
}

const link = serveRequests({ case: (c: CollectiveCase) => runCase(c) }, { sequential: true, onExit: () => comm?.close() });

const common = { driver: cfg.driver, timeoutMs: cfg.timeoutMs, ...(cfg.algorithm ? { algorithm: cfg.algorithm } : {}) };
const nodes = cfg.nodes;
(nodes
  ? // As `smcuda run --nodes` starts them: the environment of a job across nodes (docs/multinode.md). The device
    // by rank in the job: the virtual nodes of one machine each get GPUs of their own (as `--devices` gives them).
    Communicator.fromEnv(
      { ...common, localRank: cfg.rank },
      {
        RANK: String(cfg.rank),
        WORLD_SIZE: String(cfg.ranks),
        SMCUDA_NODE: String(Math.floor(cfg.rank / (cfg.ranks / nodes.count))),
        MASTER_ADDR: '127.0.0.1',
        MASTER_PORT: String(nodes.port),
        SMCUDA_TOKEN: cfg.token,
        SMCUDA_RENDEZVOUS: cfg.dir,
      },
    )
  : Communicator.create({ ...common, rank: cfg.rank, size: cfg.ranks, dir: cfg.dir, token: cfg.token })
).then(
  (c) => {
    comm = c;
    const index = c.driver.currentDevice();
    const info = c.driver.deviceInfo(index);
    const ready: CollectivesWorkerReady = {
      rank: c.rank,
      driver: c.driver.kind,
      reason: c.transport.driverReason,
      device: { index, name: info.name, uuid: info.uuid },
      ...('engine' in c ? { engine: c.engine.kind } : {}),
    };
    link.ready(ready);
  },
  (err: unknown) => link.startFailed(err),
);
