/**
 * Stream memory operations in the simulator (cuStreamWaitValue*_v2,
 * cuStreamWriteValue*_v2, cuStreamBatchMemOp_v2).
 *
 * A batch — and a single wait or write, which is a batch of one — is one
 * stream item that works through its operations in order: a write stores
 * its word, a wait holds the stream (and the rest of the batch) until the
 * word meets its condition. The words live in the simulated device memory,
 * which is shared memory another process may have mapped by IPC handle and
 * may write at any time, so a waiting batch is a remote wait: the scheduler
 * polls it (sim/streams.ts), the event loop stays free.
 *
 * Conditions, as the driver evaluates them: 'geq' compares with
 * wrap-around, (int32)(*addr - value) >= 0 (int64 for 64-bit words); 'eq';
 * 'and': (*addr & value) != 0; 'nor': ~(*addr | value) != 0.
 *
 * A word whose memory is freed while a batch waits on it or is about to
 * write it ends the batch with CUDA_ERROR_ILLEGAL_ADDRESS on the stream, as
 * a GPU faults on a freed address.
 */
import type { WaitCondition } from '../driver.js';
import { cudaError } from './result-codes.js';
import type { StreamItem, WaitItem } from './streams.js';

/** One operation with its word resolved to the bytes of the simulated memory (4 or 8 bytes, aligned). */
export type ResolvedMemOp =
  | { op: 'wait32' | 'wait64'; word: Uint8Array; value: bigint; condition: WaitCondition }
  | { op: 'write32' | 'write64'; word: Uint8Array; value: bigint }
  | { op: 'barrier' };

const MASK32 = 0xffff_ffffn;

/** Reads a word: undefined once its memory is unmapped (the view of a detached buffer is empty). */
export function loadWord(word: Uint8Array, bits: 32 | 64): bigint | undefined {
  if (word.byteLength === 0) return undefined;
  if (bits === 32) return BigInt(Atomics.load(new Uint32Array(word.buffer, word.byteOffset, 1), 0));
  return Atomics.load(new BigUint64Array(word.buffer, word.byteOffset, 1), 0);
}

/** Stores a word; false once its memory is unmapped. */
export function storeWord(word: Uint8Array, bits: 32 | 64, value: bigint): boolean {
  if (word.byteLength === 0) return false;
  if (bits === 32) Atomics.store(new Uint32Array(word.buffer, word.byteOffset, 1), 0, Number(value & MASK32));
  else Atomics.store(new BigUint64Array(word.buffer, word.byteOffset, 1), 0, BigInt.asUintN(64, value));
  return true;
}

/** Whether `current` meets `condition` against `value` for a word of `bits` bits. */
export function conditionMet(condition: WaitCondition, current: bigint, value: bigint, bits: 32 | 64): boolean {
  switch (condition) {
    case 'geq':
      return BigInt.asIntN(bits, current - value) >= 0n;
    case 'eq':
      return BigInt.asUintN(bits, current) === BigInt.asUintN(bits, value);
    case 'and':
      return (current & value) !== 0n;
    case 'nor':
      return BigInt.asUintN(bits, ~(current | value)) !== 0n;
  }
}

/**
 * The stream item of a batch. `advance` is what a synchronous drain does while
 * the batch waits (run the due work of the other streams of this process, one
 * of which may be the writer).
 */
export function memOpBatch(call: string, ops: readonly ResolvedMemOp[], advance: () => void): WaitItem {
  let next = 0;
  const item: WaitItem & { sideEffects: true } = {
    kind: 'wait',
    remote: true,
    sideEffects: true,
    advance,
    ready(): boolean {
      if (item.error) return true;
      while (next < ops.length) {
        const op = ops[next]!;
        if (op.op === 'barrier') {
          next++;
          continue;
        }
        const bits = op.op === 'wait32' || op.op === 'write32' ? 32 : 64;
        if (op.op === 'wait32' || op.op === 'wait64') {
          const cur = loadWord(op.word, bits);
          if (cur === undefined) return fail(next);
          if (!conditionMet(op.condition, cur, op.value, bits)) return false;
        } else if (!storeWord(op.word, bits, op.value)) {
          return fail(next);
        }
        next++;
      }
      return true;
    },
    fresh: (): StreamItem => memOpBatch(call, ops, advance),
  };
  const fail = (k: number): true => {
    item.error = cudaError(
      call,
      'CUDA_ERROR_ILLEGAL_ADDRESS',
      `operation ${k} of the batch (${ops[k]!.op}) touches memory that was freed or unmapped while queued`,
    );
    return true;
  };
  return item;
}
