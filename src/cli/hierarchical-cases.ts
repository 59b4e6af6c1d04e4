/**
 * The result every rank expects from a collective of a job across nodes
 * (collectives/multinode-communicator.ts), to the byte: a reduction there
 * runs in a different order from one node's, first over each node's ranks
 * (the kernels, rank order), then over the nodes (node order), each step
 * rounded to the dtype; avg sums at both levels and divides once by the
 * world. This is the reference of that order, with the kernels' own host
 * twin (reduceInto), so that `smcuda demo --collectives --nodes` checks
 * every element exactly rather than within a tolerance that could hide a
 * lost contribution. Calls that do not reduce expect what one node gives.
 */
import { DTYPE_BYTES, FLOAT_DTYPES, reduceArg, type ReduceOp } from '../kernels/dtypes.js';
import { divideInPlace, reduceInto } from '../kernels/sim/reduce.js';
import type { MultiNodeOp } from '../collectives/multinode-communicator.js';
import { caseInput, expectedOutput, vCounts, type CaseOp, type CollectiveCase } from './collective-cases.js';

/** Every call the demo runs has its counterpart across nodes (MultiNodeOp): this does not compile otherwise. */
const everyCaseAcrossNodes: [CaseOp] extends [MultiNodeOp] ? true : false = true;
void everyCaseAcrossNodes;

/**
 * Whether the engine between nodes reduces case `c`: NCCL has no bitwise
 * reductions and no integer average (the communicator refuses them, and the
 * demo leaves them out); the socket twin reduces everything.
 */
export function engineReduces(engine: 'nccl' | 'sockets' | undefined, c: CollectiveCase): boolean {
  if (engine !== 'nccl' || c.reduce === undefined) return true;
  if (c.reduce === 'band' || c.reduce === 'bor' || c.reduce === 'bxor') return false;
  return c.reduce !== 'avg' || FLOAT_DTYPES.includes(c.dtype);
}

/**
 * `rank`'s expected output of case `c` in a job of `ranks` ranks on `nodes`
 * nodes (as many on each), or undefined where nothing is written. Over
 * NCCL, avg averages at both levels (its own avg divides by the nodes), and
 * the nodes' partial results are reduced in node order: exact for two nodes
 * (one addition per element, whatever NCCL's algorithm), the GPU run's layout.
 */
export function expectedHierarchical(
  c: CollectiveCase,
  rank: number,
  ranks: number,
  nodes: number,
  engine: 'nccl' | 'sockets' = 'sockets',
): Uint8Array | undefined {
  if (c.op !== 'allreduce' && c.op !== 'reduce' && c.op !== 'reduce-scatter' && c.op !== 'reduce-scatterv') return expectedOutput(c, rank, ranks);
  if (c.op === 'reduce' && rank !== c.root) return undefined;
  const es = DTYPE_BYTES[c.dtype];
  const L = ranks / nodes;
  // This rank's block of every input: reduce-scatter's block `rank`, reduce-scatterv's packed one of vCounts.
  const counts = vCounts(c, ranks);
  const count = c.op === 'reduce-scatterv' ? counts[rank]! : c.count;
  const at = c.op === 'reduce-scatter' ? rank * c.count : c.op === 'reduce-scatterv' ? counts.slice(0, rank).reduce((x, y) => x + y, 0) : 0;
  const input = (k: number) => caseInput(c, k, ranks).subarray(at * es, (at + count) * es);
  const op = c.reduce!;
  // Inside a node: premul scales, avg sums (NCCL: averages); between nodes: premul sums, avg sums (NCCL: averages).
  const ncclAvg = op === 'avg' && engine === 'nccl';
  const intra = reduceArg(op === 'avg' && !ncclAvg ? 'sum' : op, c.factor);
  const inter: ReduceOp = op === 'premul' || (op === 'avg' && !ncclAvg) ? 'sum' : op;
  const perNode: Uint8Array[] = [];
  for (let n = 0; n < nodes; n++) {
    const out = new Uint8Array(count * es);
    reduceInto(
      intra,
      c.dtype,
      out,
      [...Array(L).keys()].map((l) => input(n * L + l)),
      count,
    );
    perNode.push(out);
  }
  const out = new Uint8Array(count * es);
  reduceInto(inter, c.dtype, out, perNode, count);
  if (op === 'avg' && !ncclAvg) divideInPlace(c.dtype, out, count, ranks);
  return out;
}
