/**
 * The communicator's control messages and their schema: a message from a
 * peer is used only once it parses as one of these, field by field. The
 * bounds are what an honest peer sends at most; anything else is a
 * ProtocolError (control.ts aborts the communicator, naming the peer).
 */
import { isDeviceBuffer } from '../buffers.js';
import { ProtocolError } from '../errors.js';
import { isDType, type DType } from '../kernels/dtypes.js';

export type ControlMessage =
  | { t: 'sig'; seq: number; step: number }
  | { t: 'put'; key: string; value: unknown }
  | { t: 'fp'; s: number; w: number[] }
  | { t: 'abort'; rank: number; code: string; message: string; pid?: number; seq?: number; ranks?: number[]; fields?: string[] }
  | { t: 'bye'; last?: number }
  | { t: 'unmapped' }
  | { t: 'pp'; k: 'send' | 'recv'; n: number; c: number; d: DType };

/** Bytes of one control message at most (the largest honest one is a batch of call prints). */
export const MAX_CONTROL_BYTES = 1 << 20;
/** Call prints in one message at most (a turn of the event loop's calls). */
export const MAX_PRINTS_PER_MESSAGE = 16_384;

const decoder = new TextDecoder('utf-8', { fatal: true });
const CODE = /^[A-Z][A-Z0-9_]{0,63}$/;

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const isSeq = (v: unknown): v is number => Number.isSafeInteger(v) && (v as number) >= 0;
const isRank = (v: unknown, size: number): v is number => Number.isInteger(v) && (v as number) >= 0 && (v as number) < size;
const isText = (v: unknown, max: number): v is string => typeof v === 'string' && v.length <= max;

function bad(why: string): never {
  throw new ProtocolError(`invalid control message: ${why}`);
}

/** Parses the data of a control-tag message of a peer in a job of `size` ranks; throws ProtocolError. */
export function parseControl(data: unknown, size: number): ControlMessage {
  if (isDeviceBuffer(data) || !(data instanceof Uint8Array)) bad('device memory on the control tag');
  if (data.length > MAX_CONTROL_BYTES) bad(`${data.length} bytes (at most ${MAX_CONTROL_BYTES})`);
  let m: unknown;
  try {
    m = JSON.parse(decoder.decode(data));
  } catch {
    bad('not JSON text');
  }
  if (!isObject(m)) bad(`not an object (${m === null ? 'null' : typeof m})`);
  switch (m.t) {
    case 'sig':
      if (!isSeq(m.seq) || !Number.isInteger(m.step) || (m.step as number) < 0 || (m.step as number) > 1 << 20)
        bad('a step signal without a valid seq and step');
      return { t: 'sig', seq: m.seq, step: m.step as number };
    case 'put':
      if (!isText(m.key, 64)) bad('a set-up value without a valid key');
      return { t: 'put', key: m.key, value: m.value };
    case 'fp':
      if (!isSeq(m.s) || !Array.isArray(m.w) || m.w.length > 3 * MAX_PRINTS_PER_MESSAGE) bad('call prints without a valid seq and words');
      return { t: 'fp', s: m.s, w: m.w as number[] };
    case 'abort': {
      if (!isRank(m.rank, size)) bad(`an ABORT whose rank is not one of 0 to ${size - 1}`);
      if (!isText(m.code, 64) || !CODE.test(m.code)) bad('an ABORT without a valid code');
      if (!isText(m.message, 4096)) bad('an ABORT without a message (at most 4096 characters)');
      const a: ControlMessage = { t: 'abort', rank: m.rank, code: m.code, message: m.message };
      if (m.pid !== undefined) {
        if (!Number.isInteger(m.pid) || (m.pid as number) <= 0) bad('an ABORT with an invalid pid');
        a.pid = m.pid as number;
      }
      if (m.seq !== undefined) {
        if (!isSeq(m.seq)) bad('an ABORT with an invalid seq');
        a.seq = m.seq;
      }
      if (m.ranks !== undefined) {
        if (!Array.isArray(m.ranks) || m.ranks.length > 2 || !m.ranks.every((r) => isRank(r, size))) bad('an ABORT with invalid ranks');
        a.ranks = m.ranks as number[];
      }
      if (m.fields !== undefined) {
        if (!Array.isArray(m.fields) || m.fields.length > 8 || !m.fields.every((f) => isText(f, 32))) bad('an ABORT with invalid fields');
        a.fields = m.fields as string[];
      }
      return a;
    }
    case 'bye':
      if (m.last !== undefined && !isSeq(m.last)) bad('a BYE with an invalid last call');
      return m.last === undefined ? { t: 'bye' } : { t: 'bye', last: m.last };
    case 'unmapped':
      return { t: 'unmapped' };
    case 'pp':
      // A send's or receive's print (p2p-match.ts).
      if ((m.k !== 'send' && m.k !== 'recv') || !isSeq(m.n) || m.n < 1 || !isSeq(m.c) || !isDType(m.d))
        bad('a send or receive print without a valid kind, n, count and dtype');
      return { t: 'pp', k: m.k, n: m.n, c: m.c, d: m.d };
    default:
      bad(`unknown type ${JSON.stringify(String(m.t)).slice(0, 40)}`);
  }
}
