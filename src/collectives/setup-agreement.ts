/**
 * What the ranks of a communicator must agree on before the first call, and
 * the check every rank runs over every rank's 'hello' (so every rank fails
 * set-up with the same error, naming the field and the ranks): the job's
 * size, the scratch size and the options that choose algorithms (a rank with
 * another one-shot limit would run another algorithm for the same call),
 * and the versions of the package and of the wire.
 */
import { ConfigError } from '../errors.js';

export interface RankHello {
  rank: number;
  size: number;
  /** The rank's GPU (UUID) and its multiprocessors: kernel grids are sized by them. */
  gpu: string;
  sms: number;
  pid: number;
  scratchBytes: number;
  oneShotMax: number;
  twoShotMax: number;
  algorithm: string;
  version: string;
  wire: number;
  /** Whether this rank can share memory by descriptor with every peer (the call table, print-table.ts). */
  table: boolean;
}

/** The fields every rank must have the same value of, with the option a user sets to change each. */
const AGREED: ReadonlyArray<[keyof RankHello, string]> = [
  ['size', 'WORLD_SIZE (size)'],
  ['scratchBytes', 'scratchBytes'],
  ['oneShotMax', 'oneShotMaxBytes'],
  ['twoShotMax', 'twoShotMaxBytes'],
  ['algorithm', 'algorithm'],
  ['version', 'the smcuda package version'],
  ['wire', 'the wire protocol version'],
];

const isInt = (v: unknown, min: number): v is number => Number.isSafeInteger(v) && (v as number) >= min;
const isText = (v: unknown, max: number): v is string => typeof v === 'string' && v.length <= max;

/** A peer's hello as it arrived (any JSON): the hello, or a ConfigError saying what is wrong with it. */
export function parseHello(k: number, v: unknown): RankHello {
  const h = v as Partial<RankHello> | null;
  const ok =
    typeof h === 'object' &&
    h !== null &&
    isInt(h.rank, 0) &&
    isInt(h.size, 1) &&
    isText(h.gpu, 128) &&
    isInt(h.sms, 0) &&
    isInt(h.pid, 0) &&
    isInt(h.scratchBytes, 0) &&
    isInt(h.oneShotMax, 0) &&
    isInt(h.twoShotMax, 0) &&
    isText(h.algorithm, 32) &&
    isText(h.version, 64) &&
    isInt(h.wire, 0) &&
    typeof h.table === 'boolean';
  if (!ok)
    throw new ConfigError(
      `the endpoint given for rank ${k} sent a set-up message this version does not understand: every rank must run the same smcuda version`,
    );
  return h as RankHello;
}

/** Throws ConfigError unless every rank's hello agrees with `me` (and each came from the rank it is filed under). */
export function checkAgreement(me: RankHello, hellos: ReadonlyMap<number, RankHello>): void {
  for (const [k, h] of hellos) {
    if (h.rank !== k)
      throw new ConfigError(
        `the endpoint given for rank ${k} leads to rank ${h.rank} of a job of ${h.size} (this is rank ${me.rank} of ${me.size}): check the endpoints and ranks`,
      );
  }
  const all = [me, ...hellos.values()].sort((a, b) => a.rank - b.rank);
  const problems: string[] = [];
  for (const [field, option] of AGREED) {
    const values = new Map<string, number[]>();
    for (const h of all) {
      const v = String(h[field]);
      const ranks = values.get(v);
      if (ranks) ranks.push(h.rank);
      else values.set(v, [h.rank]);
    }
    if (values.size <= 1) continue;
    problems.push(
      `${option}: ${[...values].map(([v, ranks]) => `${ranks.length === 1 ? 'rank' : 'ranks'} ${ranks.join(', ')} ${v === '' ? '(none)' : v}`).join('; ')}`,
    );
  }
  if (problems.length > 0) throw new ConfigError(`the ranks disagree on ${problems.join(' | ')}: every rank must be started with the same values`);
}
