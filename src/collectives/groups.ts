/**
 * Which ranks of a communicator form which group: split's colors and keys
 * (MPI_Comm_split, ncclCommSplit) and newGroup's rank lists
 * (torch.distributed.new_group), checked on the caller's rank before
 * anything is sent, and what each rank made of the values every rank sent
 * in the split's exchange. Every rank computes the same groups from the same
 * values, so they need no further round trip.
 */
import { ArgumentRangeError, ArgumentTypeError, ProtocolError } from '../errors.js';
import { MAX_GROUP_ID } from './group-tags.js';

/** split's arguments: ranks of one color form a group, ordered by key, then by parent rank. */
export interface SplitArgs {
  /** A non-negative integer; undefined or negative (NCCL_SPLIT_NOCOLOR, MPI_UNDEFINED): this rank joins no group. */
  color?: number | undefined;
  /** Orders the ranks of a group (default 0: then by parent rank). */
  key?: number;
}

/** What each rank sends in a split's exchange: its color (null: none) and key, or its rank list; and its group-id proposal. */
export type SplitValue = { c: number | null; k: number; g: number } | { r: number[]; g: number };

/** The largest color or key (they travel as JSON numbers; MPI's are C ints). */
const MAX_COLOR = 2 ** 31 - 1;

const isInt = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v);

/** This rank's split value from its arguments: throws ArgumentTypeError / ArgumentRangeError. */
export function splitValue(args: unknown, proposal: number): SplitValue {
  if (typeof args !== 'object' || args === null) throw new ArgumentTypeError(`split takes { color, key }, got ${String(args)}`);
  const { color, key = 0 } = args as { color?: unknown; key?: unknown };
  for (const k of Object.keys(args)) {
    if (k !== 'color' && k !== 'key')
      throw new ArgumentTypeError(`split takes { color, key }: unknown key '${k}' (communicator options go in the second argument)`);
  }
  if (color !== undefined && !isInt(color)) throw new ArgumentTypeError(`color must be an integer (negative or undefined: no group), got ${String(color)}`);
  if (!isInt(key)) throw new ArgumentTypeError(`key must be an integer, got ${String(key)}`);
  if (color !== undefined && color > MAX_COLOR) throw new ArgumentRangeError(`color must be at most ${MAX_COLOR}, got ${color}`);
  if (Math.abs(key) > MAX_COLOR) throw new ArgumentRangeError(`key must be from ${-MAX_COLOR} to ${MAX_COLOR}, got ${key}`);
  return { c: color === undefined || color < 0 ? null : color, k: key, g: proposal };
}

/** newGroup's ranks, checked (an array of distinct ranks of a communicator of `size`), in ascending order as torch's new_group orders them. */
export function groupRanks(ranks: unknown, size: number): number[] {
  if (!Array.isArray(ranks)) throw new ArgumentTypeError(`newGroup takes an array of ranks, got ${ranks === null ? 'null' : typeof ranks}`);
  if (ranks.length === 0) throw new ArgumentRangeError('newGroup needs at least one rank');
  const seen = new Set<number>();
  for (const r of ranks) {
    if (!isInt(r)) throw new ArgumentTypeError(`ranks must be integers, got ${String(r)}`);
    if (r < 0 || r >= size) throw new ArgumentRangeError(`rank ${r} is not a rank of this communicator (0 to ${size - 1})`);
    if (seen.has(r)) throw new ArgumentRangeError(`rank ${r} is listed twice: newGroup's ranks must be distinct`);
    seen.add(r);
  }
  return [...seen].sort((a, b) => a - b);
}

/** A peer's split value as it arrived (any JSON): throws ProtocolError for anything no honest peer sends. */
export function parseSplitValue(peer: number, v: unknown, size: number): SplitValue {
  const o = v as Record<string, unknown> | null;
  const ok =
    typeof o === 'object' &&
    o !== null &&
    isInt(o.g) &&
    o.g >= 1 &&
    o.g <= MAX_GROUP_ID &&
    (('c' in o && (o.c === null || (isInt(o.c) && o.c >= 0 && o.c <= MAX_COLOR)) && isInt(o.k) && Math.abs(o.k) <= MAX_COLOR) ||
      ('r' in o && Array.isArray(o.r) && o.r.length <= size && o.r.every((r) => isInt(r) && r >= 0 && r < size)));
  if (!ok) throw new ProtocolError(`rank ${peer} sent an invalid split value`);
  return v as SplitValue;
}

/** The group of rank `me`, from every rank's value (by rank, this one included): its members by parent rank, in group order, and the proposals of its members; undefined: no group. */
export function groupOf(me: number, values: ReadonlyMap<number, SplitValue>): { members: number[]; proposals: number[] } | undefined {
  const mine = values.get(me)!;
  let members: number[];
  if ('r' in mine) {
    if (!mine.r.includes(me)) return undefined;
    members = mine.r;
  } else {
    if (mine.c === null) return undefined;
    const same: Array<[number, number]> = [];
    for (const [rank, v] of values) if ('c' in v && v.c === mine.c) same.push([v.k, rank]);
    same.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
    members = same.map(([, rank]) => rank);
  }
  return { members, proposals: members.map((r) => values.get(r)!.g) };
}

/**
 * Where ranks made different kinds of group call, or newGroup with
 * different lists: the first rank whose value differs from rank `me`'s and
 * what differs; undefined where they agree.
 */
export function disagreement(me: number, values: ReadonlyMap<number, SplitValue>): { rank: number; field: string } | undefined {
  const mine = values.get(me)!;
  for (const [rank, v] of [...values].sort((a, b) => a[0] - b[0])) {
    if ('r' in mine !== 'r' in v) return { rank, field: 'collective' };
    if ('r' in mine && 'r' in v && (mine.r.length !== v.r.length || mine.r.some((x, i) => x !== v.r[i]))) return { rank, field: 'ranks' };
  }
  return undefined;
}
