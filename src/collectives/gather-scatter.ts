/**
 * gather and scatter, step by step on one rank: every rank's `count`
 * elements to the root's recv (block k at k × count), and the root's send
 * (block k at k × count) to every rank's recv. As broadcast and reduce
 * (algorithms.ts): the data goes through the sender's registered scratch
 * (A) and the receiver copies it out through its mapping between two steps
 * of every rank; staged, as endpoint messages straight into the receiver's
 * buffer.
 */
import type { DevicePtr } from '../cuda/driver.js';
import { DTYPE_BYTES, type DType } from '../kernels/dtypes.js';
import type { Algorithm, CallContext } from './algorithms.js';
import { copy, exchangeEach, othersOf, pieceOf } from './uneven.js';

const B = (n: number): bigint => BigInt(n);

export async function gather(c: CallContext, alg: Algorithm, send: DevicePtr, recv: DevicePtr, count: number, dtype: DType, root: number): Promise<void> {
  const es = DTYPE_BYTES[dtype];
  const isRoot = c.rank === root;
  const at = (k: number, a: number) => recv + B((k * count + a) * es);
  if (isRoot) copy(c, at(root, 0), send, count * es);
  if (alg === 'local') return;
  const s = c.scratch;
  const A = s.inputOf(c.rank)!;
  for (let a = 0, per = pieceOf(Math.floor(s.bytes / es)); a < count; a += per) {
    const len = Math.min(per, count - a);
    if (!isRoot) {
      copy(c, A, send + B(a * es), len * es);
      c.copied(len * es);
    }
    if (alg === 'staged') {
      await c.streamDone();
      if (isRoot)
        await exchangeEach(
          c,
          [],
          othersOf(c).map((k) => [k, at(k, a), len * es]),
        );
      else await exchangeEach(c, [[root, A, len * es]], []);
      continue;
    }
    if (c.steps.onHost) await c.steps.host();
    else c.steps.device();
    if (isRoot) for (const k of othersOf(c)) copy(c, at(k, a), s.inputOf(k)!, len * es);
    if (c.steps.onHost) await c.steps.host();
    else c.steps.device();
  }
}

export async function scatter(c: CallContext, alg: Algorithm, send: DevicePtr, recv: DevicePtr, count: number, dtype: DType, root: number): Promise<void> {
  const es = DTYPE_BYTES[dtype];
  const N = c.size;
  const isRoot = c.rank === root;
  if (isRoot) copy(c, recv, send + B(root * count * es), count * es);
  if (alg === 'local') return;
  const s = c.scratch;
  const A = s.inputOf(c.rank)!;
  for (let a = 0, per = pieceOf(Math.floor(s.bytes / (N * es))); a < count; a += per) {
    const len = Math.min(per, count - a);
    // The root's A holds block k's piece at k × len.
    if (isRoot) {
      for (const k of othersOf(c)) copy(c, A + B(k * len * es), send + B((k * count + a) * es), len * es);
      c.copied((N - 1) * len * es);
    }
    if (alg === 'staged') {
      await c.streamDone();
      if (isRoot)
        await exchangeEach(
          c,
          othersOf(c).map((k) => [k, A + B(k * len * es), len * es]),
          [],
        );
      else await exchangeEach(c, [], [[root, recv + B(a * es), len * es]]);
      continue;
    }
    if (c.steps.onHost) await c.steps.host();
    else c.steps.device();
    if (!isRoot) copy(c, recv + B(a * es), s.inputOf(root)! + B(c.rank * len * es), len * es);
    if (c.steps.onHost) await c.steps.host();
    else c.steps.device();
  }
}
