/**
 * The life of one persistent transfer (src/persistent/transfers.ts), one
 * actor per transfer and side, as an XState v5 machine: what `smcuda
 * diagram persistent` draws and the trace records.
 *
 *   registered  this side's half is made (PT_OFFER sent); waiting for the peer's half
 *   armed       both halves match; no start is in progress
 *   replaying   a start is queued or running (an eager start, or a graph replay the watchdog saw)
 *   stuck       the watchdog saw a start not finish within timeoutMs: its waits are released
 *   closed      failed (stuck, peer failed, mismatch) or closed (by the user, deregistration,
 *               the endpoint): final; `failure` says which
 *
 * The machine only follows: the transfer's host code decides and sends the
 * events (MATCHED, START, BUSY, IDLE, STUCK, FAIL, CLOSE). It touches no bytes and
 * no driver; its context is plain data.
 */
import { assign, setup, type SnapshotFrom } from 'xstate';

export type PersistentMachineState = 'registered' | 'armed' | 'replaying' | 'stuck' | 'closed';

export const PERSISTENT_STATES: readonly PersistentMachineState[] = ['registered', 'armed', 'replaying', 'stuck', 'closed'];

export interface PersistentMachineContext {
  id: number;
  role: 'send' | 'recv';
  peerId: string;
  /** Starts queued by the host (a graph's replays are not counted: no host work). */
  starts: number;
  /** The error code that closed it (SMCUDA_PERSISTENT_*), if it failed. */
  failure: string | undefined;
}

export type PersistentMachineEvent =
  | { type: 'MATCHED' }
  | { type: 'START' }
  /** The watchdog saw a start in progress that the host did not queue (a graph replay). */
  | { type: 'BUSY' }
  | { type: 'IDLE' }
  | { type: 'STUCK' }
  | { type: 'FAIL'; code: string }
  | { type: 'CLOSE' };

export interface PersistentMachineInput {
  id: number;
  role: 'send' | 'recv';
  peerId: string;
}

export const persistentMachine = setup({
  types: {
    context: {} as PersistentMachineContext,
    events: {} as PersistentMachineEvent,
    input: {} as PersistentMachineInput,
  },
  actions: {
    countStart: assign({ starts: ({ context }) => context.starts + 1 }),
    recordFailure: assign({ failure: ({ event }) => (event.type === 'FAIL' ? event.code : undefined) }),
  },
}).createMachine({
  id: 'persistent',
  initial: 'registered',
  context: ({ input }) => ({ id: input.id, role: input.role, peerId: input.peerId, starts: 0, failure: undefined }),
  states: {
    registered: {
      on: {
        MATCHED: 'armed',
        FAIL: { target: 'closed', actions: 'recordFailure' },
        CLOSE: 'closed',
      },
    },
    armed: {
      on: {
        START: { target: 'replaying', actions: 'countStart' },
        BUSY: 'replaying',
        STUCK: 'stuck',
        FAIL: { target: 'closed', actions: 'recordFailure' },
        CLOSE: 'closed',
      },
    },
    replaying: {
      on: {
        START: { target: 'replaying', actions: 'countStart' },
        IDLE: 'armed',
        STUCK: 'stuck',
        FAIL: { target: 'closed', actions: 'recordFailure' },
        CLOSE: 'closed',
      },
    },
    stuck: {
      on: {
        FAIL: { target: 'closed', actions: 'recordFailure' },
        CLOSE: 'closed',
      },
    },
    closed: { type: 'final' },
  },
});

export type PersistentMachine = typeof persistentMachine;
export type PersistentSnapshot = SnapshotFrom<PersistentMachine>;
