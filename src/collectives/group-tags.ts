/**
 * The tags a communicator reserves on its endpoints, so that several
 * communicators (a world and the groups split from it) share one set of
 * endpoints without reading each other's messages.
 *
 * Group 0 is a world (create, fromEnv, fromEndpoints): CONTROL_TAG and
 * DATA_TAG, as always. Group g ≥ 1 (split, newGroup) takes the pair below
 * them at CONTROL_TAG - 2g, and point to point's staged messages take
 * GROUP_TAG_FLOOR + g (p2p.ts): every tag from GROUP_TAG_FLOOR (0xf0000000)
 * up is reserved for communicators.
 *
 * How the ranks of a new group agree on g with no extra round trip: each
 * rank of the parent proposes its transport's next id in the split's own
 * exchange, and the group takes the largest proposal of its members; every
 * member then moves its next id past it. Ids only grow on a transport, so
 * two communicators over one endpoint (both contain its two ranks) never
 * have the same id, and a closed group's id, whose last messages may still
 * wait unread on the endpoint, is never taken again. A transport runs one
 * agreement at a time (propose waits for the previous one to settle): two
 * in flight could each pick a value the other also picks. Splits of
 * different communicators made without awaiting each other must therefore
 * be made in the same order on every rank, as blocking ncclCommSplit calls
 * are.
 */
import type { Endpoint } from '../endpoint.js';
import { SmcudaError } from '../errors.js';
import type { Transport } from '../transport.js';
import { CONTROL_TAG, DATA_TAG } from './control.js';

/** The lowest tag a communicator may reserve. */
export const GROUP_TAG_FLOOR = 0xf0000000;
/**
 * The largest group id: groups' control and data tags count down from the
 * top of the range, point to point's staged tags (p2p.ts: GROUP_TAG_FLOOR
 * + g) count up from its floor, and the two must never meet.
 */
export const MAX_GROUP_ID = Math.ceil((CONTROL_TAG - GROUP_TAG_FLOOR) / 3) - 1;

export interface CommTags {
  /** 0: a world; ≥ 1: a group. */
  group: number;
  control: number;
  data: number;
}

export function tagsOf(group: number): CommTags {
  if (group === 0) return { group, control: CONTROL_TAG, data: DATA_TAG };
  const control = CONTROL_TAG - 2 * group;
  return { group, control, data: control + 1 };
}

/** Whether `tag` is one communicators reserve (the application must not use it on their endpoints). */
export function isReservedTag(tag: number): boolean {
  return tag >= GROUP_TAG_FLOOR && tag <= DATA_TAG;
}

/**
 * Group ids in use on each endpoint by communicators of this process: a
 * live one (undefined), or a closed one whose control plane still reads its
 * peers' last messages on the tags (its drain, control.ts).
 */
const inUse = new WeakMap<Endpoint, Map<number, Promise<void> | undefined>>();

/** Gives the tags back: now, or once `drain` settles (the closed communicator's last reads on them). */
export type ReleaseTags = (drain?: Promise<void>) => void;

/**
 * Waits, up to `ms`, for closed communicators of this process that still
 * read their last messages on `group`'s tags of `endpoints` (a new world
 * made with fromEndpoints right after the old one closed); a live one is
 * claimTags's to refuse. SMCUDA_ENDPOINTS_IN_USE past `ms`.
 */
export async function tagsFree(endpoints: Iterable<Endpoint>, group: number, ms: number): Promise<void> {
  const eps = [...endpoints];
  const drains = eps.map((ep) => inUse.get(ep)?.get(group)).filter((d): d is Promise<void> => d !== undefined);
  if (drains.length === 0) return;
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<'late'>((resolve) => {
    timer = setTimeout(() => resolve('late'), ms);
  });
  const r = await Promise.race([Promise.all(drains), late]).finally(() => clearTimeout(timer));
  if (r === 'late') {
    const waiting = eps.filter((ep) => inUse.get(ep)?.get(group) !== undefined).map((ep) => ep.peerId);
    throw new SmcudaError(
      'SMCUDA_ENDPOINTS_IN_USE',
      `the communicator this process closed over these endpoints still waits for the last control messages of ${waiting.join(', ')} after ${ms} ms: close the communicator there first (every rank closes the old one before making the new one)`,
    );
  }
}

/**
 * Marks `group`'s tags as used on `endpoints` until the returned release is
 * called (and its drain, if given, settles); refuses
 * (SMCUDA_ENDPOINTS_IN_USE) where another communicator of this process
 * already uses them on one of the endpoints (tagsFree waits for a closed
 * one's drain first): the two would take each other's control messages and
 * both fail their set-up.
 */
export function claimTags(endpoints: Iterable<Endpoint>, group: number): ReleaseTags {
  const eps = [...endpoints];
  for (const ep of eps) {
    if (inUse.get(ep)?.has(group))
      throw new SmcudaError(
        'SMCUDA_ENDPOINTS_IN_USE',
        `another communicator of this process already uses ${group === 0 ? 'the world tags' : `group ${group}'s tags`} on the endpoint to peer ${ep.peerId}: make a second communicator over the same ranks with comm.split() or comm.newGroup(), or close the first one`,
      );
  }
  for (const ep of eps) {
    let m = inUse.get(ep);
    if (!m) inUse.set(ep, (m = new Map()));
    m.set(group, undefined);
    // Each communicator listens for the endpoint's close: groups must not trip the leak warning.
    if (ep.getMaxListeners() !== 0) ep.setMaxListeners(ep.getMaxListeners() + 1);
  }
  let released = false;
  return (drain) => {
    if (released) return;
    released = true;
    for (const ep of eps) if (ep.getMaxListeners() > 1) ep.setMaxListeners(ep.getMaxListeners() - 1);
    const free = () => {
      for (const ep of eps) inUse.get(ep)?.delete(group);
    };
    if (drain === undefined) return free();
    const draining = drain.then(free, free);
    for (const ep of eps) inUse.get(ep)?.set(group, draining);
  };
}

interface Ids {
  next: number;
  /** Settles when the agreement in flight on this transport settles. */
  turn: Promise<void>;
}

const ids = new WeakMap<Transport, Ids>();

/** One rank's proposal for a new group's id: `settle` with the id agreed (undefined: this rank is in no new group). */
export interface Proposal {
  value: number;
  settle(agreed: number | undefined): void;
}

/** This transport's next group id, once the agreement before it settled (see above). */
export async function proposeGroupId(transport: Transport): Promise<Proposal> {
  let s = ids.get(transport);
  if (!s) ids.set(transport, (s = { next: 1, turn: Promise.resolve() }));
  const state = s;
  const before = state.turn;
  let done!: () => void;
  state.turn = new Promise<void>((resolve) => (done = resolve));
  await before;
  let settled = false;
  return {
    value: state.next,
    settle(agreed) {
      if (settled) return;
      settled = true;
      if (agreed !== undefined) state.next = Math.max(state.next, agreed + 1);
      done();
    },
  };
}

/** The id a group takes: the largest of its members' proposals; refused past MAX_GROUP_ID. */
export function agreeGroupId(proposals: readonly number[]): number {
  const id = Math.max(...proposals);
  if (id > MAX_GROUP_ID)
    throw new SmcudaError(
      'SMCUDA_NO_GROUP_TAGS',
      `no group tags left: a transport's groups take ids 1 to ${MAX_GROUP_ID} once each, and group ${id} is past them: make fewer groups (reuse them), or start a new transport`,
    );
  return id;
}
