/**
 * The per-endpoint CUDA IPC negotiation (the smcuda handshake of the design
 * document, seeds/001), as an XState v5 machine. One actor per endpoint; both
 * directions share it: whichever side sends a GPU buffer first starts it.
 *
 *   INIT    nothing has happened (sub-states: idle, checkingSend, checkingRequest)
 *   SENT    I sent IPC_REQ and wait for the answer
 *   ACKING  the peer asked; I am deciding what to answer (peer access check)
 *   ACKED   I answered IPC_ACK(ok) and wait for IPC_CONFIRM
 *   OK      IPC in use on this endpoint (may still go BAD on PEER_LOST/ABORT)
 *   BAD     no IPC on this endpoint, for good (it still answers IPC_REQ with no)
 *
 * The machine never touches bytes or the driver directly: it is given
 *  - `send(frame)`: the endpoint encodes and writes the frame;
 *  - `checkReady()` / `checkPeerAccess(uuid)`: driver questions, run as invoked
 *    promise actors (so they are visible, cancellable and time-bounded).
 * They come in through the actor's `input`. Tests (or a different driver
 * binding) may also replace the two invoked actors with
 * `negotiationMachine.provide({ actors: { checkReady, checkPeerAccess } })`.
 *
 * Who tells whom when going BAD (this is what makes both sides agree):
 *  - my own decision (timeout, tries exhausted, IPC off on GPU send): IPC_ABORT;
 *  - answering a request: IPC_ACK(ok=false);
 *  - the peer told me (ABORT, ACK(no)) or the peer is gone (PEER_LOST): nothing.
 *
 * Frames that make no sense in the current state (late, duplicated, from a
 * confused peer) are ignored and counted in `context.ignored`; the machine
 * never throws on peer input.
 *
 * Events: GPU_SEND, PEER_LOST, and one event per negotiation frame
 * (IPC_REQ, IPC_ACK, IPC_NOTREADY, IPC_CONFIRM, IPC_ABORT, each `{ type, frame }`,
 * built by `frameEvent(frame)`); `{ type: 'FRAME', frame }` is accepted too and
 * re-raised as the typed event. Typed events keep the diagram readable.
 */
import { and, assign, enqueueActions, fromPromise, setup, type SnapshotFrom } from 'xstate';
import { ProtocolError } from '../src/errors.js';
import {
  FrameType,
  type IpcAbortFrame,
  type IpcAckFrame,
  type IpcConfirmFrame,
  type IpcNotReadyFrame,
  type IpcReqFrame,
  type NegotiationFrame,
} from '../src/wire/frames.js';

/** The six states of the design document, in the order they are usually drawn. */
export const NEGOTIATION_STATES = ['INIT', 'SENT', 'ACKING', 'ACKED', 'OK', 'BAD'] as const;
export type NegotiationState = (typeof NEGOTIATION_STATES)[number];

/** The negotiation knobs; src/options.ts exposes this type to transport users as `NegotiationOptions`. */
export interface NegotiationConfig {
  /** Use CUDA IPC at all. */
  ipc: boolean;
  /** Use CUDA IPC between two processes on the same GPU (decided by the answering side). */
  sameGpuIpc: boolean;
  /** Requests this side may send before it gives up (the design's 5). */
  maxTries: number;
  /** SENT waiting for IPC_ACK / IPC_NOTREADY. */
  requestTimeoutMs: number;
  /** ACKED waiting for IPC_CONFIRM. */
  confirmTimeoutMs: number;
  /** Each driver check (readiness, peer access). */
  checkTimeoutMs: number;
}

export const DEFAULT_NEGOTIATION_CONFIG: Readonly<NegotiationConfig> = Object.freeze({
  ipc: true,
  sameGpuIpc: true,
  maxTries: 5,
  requestTimeoutMs: 5_000,
  confirmTimeoutMs: 5_000,
  checkTimeoutMs: 5_000,
});

/** What `checkReady` answers: is CUDA initialised in this process, and my device's UUID ('GPU-…'). */
export interface ReadyCheck {
  ready: boolean;
  deviceUuid: string;
}

/** What the endpoint gives the machine. */
export interface NegotiationIO {
  /** Send one negotiation frame to the peer (the endpoint encodes it). Must not throw; see NegotiationActor. */
  send(frame: NegotiationFrame): void;
  checkReady(): Promise<ReadyCheck>;
  /** Can my current device and the device `peerUuid` access each other? Never called for the same UUID. */
  checkPeerAccess(peerUuid: string): Promise<boolean>;
}

export interface NegotiationInput extends NegotiationIO {
  /** This side's transport id (HELLO.peerId as I sent it). */
  localId: string;
  /** The peer's transport id. The LOWER id (string comparison) wins a simultaneous request. */
  peerId: string;
  options?: Partial<NegotiationConfig>;
}

/** Why an endpoint is BAD, for programs (the `reason` text is for people). */
export type BadReasonCode =
  | 'IPC_DISABLED'
  | 'SAME_GPU_DISABLED'
  | 'NO_PEER_ACCESS'
  | 'CHECK_TIMEOUT'
  | 'PEER_REFUSED'
  | 'PEER_ABORTED'
  | 'TRIES_EXHAUSTED'
  | 'REQUEST_TIMEOUT'
  | 'CONFIRM_TIMEOUT'
  | 'PEER_LOST'
  | 'PROTOCOL';

const REASON_TEXT: Record<BadReasonCode, string> = {
  IPC_DISABLED: 'CUDA IPC is disabled on this side (negotiation.ipc = false); GPU data goes through host staging',
  SAME_GPU_DISABLED: 'both processes use the same GPU and same-GPU IPC is disabled (negotiation.sameGpuIpc = false)',
  NO_PEER_ACCESS: 'the two devices cannot access each other (cuDeviceCanAccessPeer said no or failed)',
  CHECK_TIMEOUT: 'the peer-access check did not finish in time (negotiation.checkTimeoutMs)',
  PEER_REFUSED: 'the peer answered IPC_ACK(ok=false)',
  PEER_ABORTED: 'the peer aborted the negotiation',
  TRIES_EXHAUSTED: 'the peer was not ready after every allowed attempt (negotiation.maxTries)',
  REQUEST_TIMEOUT: 'no answer to IPC_REQ in time (negotiation.requestTimeoutMs): the peer is hung or gone',
  CONFIRM_TIMEOUT: 'no IPC_CONFIRM in time (negotiation.confirmTimeoutMs): the peer is hung or gone',
  PEER_LOST: 'the peer went away',
  PROTOCOL: 'IPC_REQ while OK: the peer lost its negotiation state (restarted?); IPC is dropped on this endpoint',
};

export interface NegotiationContext extends NegotiationIO {
  localId: string;
  peerId: string;
  options: NegotiationConfig;
  /** Requests sent so far (IPC_REQ.attempt of the last one). Never exceeds options.maxTries. */
  tries: number;
  /** My device's UUID, once checkReady said ready ('' before). */
  localUuid: string;
  /** The peer's device UUID, from its IPC_REQ or IPC_ACK ('' before). */
  peerUuid: string;
  /** Attempt number of the peer's request I am answering (echoed in ACK/NOTREADY, expected in CONFIRM). */
  answering: number;
  /** Set when BAD. */
  reasonCode: BadReasonCode | null;
  reason: string;
  /** Frames that arrived where they mean nothing (late, duplicate, tie-break loser's REQ). */
  ignored: number;
  /** Every top-level state entered, in order: ['INIT', 'SENT', 'OK']. */
  path: NegotiationState[];
}

export type FrameEvent =
  | { type: 'IPC_REQ'; frame: IpcReqFrame }
  | { type: 'IPC_ACK'; frame: IpcAckFrame }
  | { type: 'IPC_NOTREADY'; frame: IpcNotReadyFrame }
  | { type: 'IPC_CONFIRM'; frame: IpcConfirmFrame }
  | { type: 'IPC_ABORT'; frame: IpcAbortFrame };

export type NegotiationEvent =
  | { type: 'GPU_SEND' }
  | { type: 'PEER_LOST' }
  | { type: 'FRAME'; frame: NegotiationFrame }
  | FrameEvent;

const NEGOTIATION_FRAME_TYPES: ReadonlySet<number> = new Set([
  FrameType.IPC_REQ,
  FrameType.IPC_ACK,
  FrameType.IPC_NOTREADY,
  FrameType.IPC_CONFIRM,
  FrameType.IPC_ABORT,
]);

export function isNegotiationFrame(frame: { type: number }): frame is NegotiationFrame {
  return NEGOTIATION_FRAME_TYPES.has(frame.type);
}

/** The machine event for a received negotiation frame. Throws ProtocolError for any other frame (a caller's bug). */
export function frameEvent(frame: NegotiationFrame): FrameEvent {
  if (!isNegotiationFrame(frame)) {
    throw new ProtocolError(`frame type ${(frame as { type: number }).type} is not a negotiation frame; route it elsewhere`);
  }
  switch (frame.type) {
    case FrameType.IPC_REQ:
      return { type: 'IPC_REQ', frame };
    case FrameType.IPC_ACK:
      return { type: 'IPC_ACK', frame };
    case FrameType.IPC_NOTREADY:
      return { type: 'IPC_NOTREADY', frame };
    case FrameType.IPC_CONFIRM:
      return { type: 'IPC_CONFIRM', frame };
    case FrameType.IPC_ABORT:
      return { type: 'IPC_ABORT', frame };
  }
}

/** Fills defaults; validation of user values belongs to the caller (NegotiationActor, src/options.ts). */
export function resolveNegotiationConfig(options: Partial<NegotiationConfig> | undefined): NegotiationConfig {
  return { ...DEFAULT_NEGOTIATION_CONFIG, ...(options ?? {}) };
}

/** The attempt number a frame event carries, or undefined. */
function attemptOf(event: NegotiationEvent): number | undefined {
  return 'frame' in event && 'attempt' in event.frame ? event.frame.attempt : undefined;
}

/**
 * The output of an invoked actor's done event. Named guards are typed with the
 * machine's own events, so the done event is read through this one cast.
 */
function outputOf<T>(event: unknown): T | undefined {
  return (event as { output?: T }).output;
}

/** A check result counts as ready only with a device UUID to send. */
function normaliseReady(r: ReadyCheck | undefined): ReadyCheck {
  const ready = !!r && r.ready === true && typeof r.deviceUuid === 'string' && r.deviceUuid.length > 0;
  return { ready, deviceUuid: ready ? r!.deviceUuid : '' };
}

/** Inputs of the two invoked check actors (for replacements given to `negotiationMachine.provide`). */
export interface CheckReadyInput {
  checkReady: () => Promise<ReadyCheck>;
}
export interface CheckPeerAccessInput {
  checkPeerAccess: (uuid: string) => Promise<boolean>;
  peerUuid: string;
}

const BAD = '#negotiation.BAD';
const INIT = '#negotiation.INIT';
const SENT = '#negotiation.SENT';
const ACKING = '#negotiation.ACKING';
const ACKED = '#negotiation.ACKED';
const OK = '#negotiation.OK';

export const negotiationMachine = setup({
  types: {} as {
    context: NegotiationContext;
    events: NegotiationEvent;
    input: NegotiationInput;
    tags: 'stable';
  },
  actors: {
    /** Is CUDA initialised here, and which device am I on? Rejections and hangs count as "not ready". */
    checkReady: fromPromise<ReadyCheck, CheckReadyInput>(async ({ input }) =>
      normaliseReady(await input.checkReady()),
    ),
    /** Peer access between my device and the peer's (different UUIDs only). Rejections and hangs count as "no". */
    checkPeerAccess: fromPromise<boolean, CheckPeerAccessInput>(
      async ({ input }) => (await input.checkPeerAccess(input.peerUuid)) === true,
    ),
  },
  guards: {
    ipcDisabled: ({ context }) => !context.options.ipc,
    triesExhausted: ({ context }) => context.tries >= context.options.maxTries,
    /** The answer is to my current request (a stale or foreign attempt number is ignored). */
    answersMyRequest: ({ context, event }) => attemptOf(event) === context.tries,
    ackSaysOk: ({ event }) => event.type === 'IPC_ACK' && event.frame.ok,
    /** The CONFIRM is for the request I acknowledged. */
    confirmsMyAnswer: ({ context, event }) => attemptOf(event) === context.answering,
    /** Simultaneous requests: the lower transport id's request wins. */
    localWinsTie: ({ context }) => context.localId < context.peerId,
    peerHasNoDevice: ({ context }) => context.peerUuid === '',
    sameDevice: ({ context }) => context.peerUuid === context.localUuid,
    sameGpuIpcAllowed: ({ context }) => context.options.sameGpuIpc,
    /** On checkReady's done event. */
    isReady: ({ event }) => outputOf<ReadyCheck>(event)?.ready === true,
    /** On checkPeerAccess's done event. */
    hasPeerAccess: ({ event }) => outputOf<boolean>(event) === true,
  },
  delays: {
    requestTimeout: ({ context }) => context.options.requestTimeoutMs,
    confirmTimeout: ({ context }) => context.options.confirmTimeoutMs,
    checkTimeout: ({ context }) => context.options.checkTimeoutMs,
  },
  actions: {
    recordState: assign({
      path: ({ context }, params: { state: NegotiationState }) => [...context.path, params.state],
    }),
    countIgnored: assign({ ignored: ({ context }) => context.ignored + 1 }),
    /** Remember the peer's request (its attempt and device) so that ACKING can answer it. */
    acceptRequest: assign(({ event }) =>
      event.type === 'IPC_REQ' ? { answering: event.frame.attempt, peerUuid: event.frame.deviceUuid } : {},
    ),
    storeLocalUuid: assign({ localUuid: (_, params: { uuid: string }) => params.uuid }),
    storePeerUuidFromAck: assign(({ event }) => (event.type === 'IPC_ACK' ? { peerUuid: event.frame.deviceUuid } : {})),
    countTry: assign({ tries: ({ context }) => context.tries + 1 }),
    sendRequest: ({ context }) => context.send({ type: FrameType.IPC_REQ, attempt: context.tries, deviceUuid: context.localUuid }),
    sendNotReady: ({ context }) => context.send({ type: FrameType.IPC_NOTREADY, attempt: context.answering }),
    answerYes: ({ context }) =>
      context.send({ type: FrameType.IPC_ACK, attempt: context.answering, ok: true, deviceUuid: context.localUuid }),
    /** Answer a request with no. `attempt` from the request being answered (BAD answers any request). */
    answerNo: ({ context, event }) =>
      context.send({
        type: FrameType.IPC_ACK,
        attempt: event.type === 'IPC_REQ' ? event.frame.attempt : context.answering,
        ok: false,
        deviceUuid: context.localUuid,
      }),
    sendConfirm: ({ context }) => context.send({ type: FrameType.IPC_CONFIRM, attempt: context.tries }),
    sendAbort: ({ context }) => context.send({ type: FrameType.IPC_ABORT, reason: `${context.reasonCode}: ${context.reason}` }),
    setReason: assign((_, params: { code: BadReasonCode; detail?: string }) => ({
      reasonCode: params.code,
      reason: params.detail ? `${REASON_TEXT[params.code]}: ${params.detail}` : REASON_TEXT[params.code],
    })),
    peerAborted: assign(({ event }) => ({
      reasonCode: 'PEER_ABORTED' as const,
      reason: `${REASON_TEXT.PEER_ABORTED}: ${event.type === 'IPC_ABORT' ? event.frame.reason : ''}`,
    })),
    /** `{ type: 'FRAME' }` → the frame's own event; anything that is not a negotiation frame is counted and dropped. */
    reraiseFrame: enqueueActions(({ event, enqueue }) => {
      if (event.type === 'FRAME' && event.frame && isNegotiationFrame(event.frame)) enqueue.raise(frameEvent(event.frame));
      else enqueue.assign({ ignored: ({ context }) => context.ignored + 1 });
    }),
  },
}).createMachine({
  id: 'negotiation',
  description: 'Per-endpoint CUDA IPC negotiation (smcuda handshake): lazy, tie-broken by transport id, time-bounded.',
  initial: 'INIT',
  context: ({ input }) => ({
    localId: input.localId,
    peerId: input.peerId,
    options: resolveNegotiationConfig(input.options),
    send: input.send,
    checkReady: input.checkReady,
    checkPeerAccess: input.checkPeerAccess,
    tries: 0,
    localUuid: '',
    peerUuid: '',
    answering: 0,
    reasonCode: null,
    reason: '',
    ignored: 0,
    path: [],
  }),
  // Handlers every state inherits unless it overrides them.
  on: {
    FRAME: { actions: 'reraiseFrame', description: 'A raw frame: re-raised as its typed event.' },
    PEER_LOST: {
      target: '.BAD',
      actions: { type: 'setReason', params: { code: 'PEER_LOST' } },
      description: 'The channel closed or the peer died: give up, tell no one.',
    },
    IPC_ABORT: { target: '.BAD', actions: 'peerAborted', description: 'The peer gave up: so do I, silently.' },
    IPC_REQ: { actions: 'countIgnored', description: 'A request that makes no sense here: ignored, counted.' },
    IPC_ACK: { actions: 'countIgnored', description: 'Late or foreign answer: ignored, counted.' },
    IPC_NOTREADY: { actions: 'countIgnored', description: 'Late or foreign answer: ignored, counted.' },
    IPC_CONFIRM: { actions: 'countIgnored', description: 'Late or foreign confirmation: ignored, counted.' },
  },
  states: {
    INIT: {
      description: 'Nothing negotiated yet; waits for the first GPU send on either side.',
      entry: { type: 'recordState', params: { state: 'INIT' } },
      initial: 'idle',
      states: {
        idle: {
          on: {
            GPU_SEND: [
              {
                guard: 'ipcDisabled',
                target: BAD,
                actions: [{ type: 'setReason', params: { code: 'IPC_DISABLED' } }, 'sendAbort'],
                description: 'IPC is off here: go BAD and tell the peer.',
              },
              {
                guard: 'triesExhausted',
                target: BAD,
                actions: [{ type: 'setReason', params: { code: 'TRIES_EXHAUSTED' } }, 'sendAbort'],
              },
              { target: 'checkingSend', description: 'Am I ready to offer IPC?' },
            ],
            IPC_REQ: [
              {
                guard: 'ipcDisabled',
                target: ACKING,
                actions: 'acceptRequest',
                description: 'IPC is off here: no need to check readiness, ACKING answers no.',
              },
              { target: 'checkingRequest', actions: 'acceptRequest' },
            ],
          },
        },
        checkingSend: {
          description: 'checkReady before sending my request; not ready (or no answer) is a no-op.',
          invoke: {
            id: 'readyToSend',
            src: 'checkReady',
            input: ({ context }) => ({ checkReady: context.checkReady }),
            onDone: [
              {
                guard: 'isReady',
                target: SENT,
                actions: [
                  { type: 'storeLocalUuid', params: ({ event }) => ({ uuid: event.output.deviceUuid }) },
                  'countTry',
                  'sendRequest',
                ],
                description: 'Ready: send IPC_REQ{attempt = ++tries}.',
              },
              { target: 'idle', description: 'Not ready: try again on the next GPU send.' },
            ],
            onError: { target: 'idle' },
          },
          after: { checkTimeout: { target: 'idle' } },
          on: {
            IPC_REQ: {
              target: 'checkingRequest',
              actions: 'acceptRequest',
              description: 'The peer asked first: answer it instead of asking.',
            },
          },
        },
        checkingRequest: {
          description: 'The peer asked: checkReady before answering; not ready → IPC_NOTREADY.',
          invoke: {
            id: 'readyToAnswer',
            src: 'checkReady',
            input: ({ context }) => ({ checkReady: context.checkReady }),
            onDone: [
              {
                guard: 'isReady',
                target: ACKING,
                actions: { type: 'storeLocalUuid', params: ({ event }) => ({ uuid: event.output.deviceUuid }) },
              },
              { target: 'idle', actions: 'sendNotReady', description: 'Not ready: the peer retries later.' },
            ],
            onError: { target: 'idle', actions: 'sendNotReady' },
          },
          after: { checkTimeout: { target: 'idle', actions: 'sendNotReady' } },
        },
      },
    },

    SENT: {
      description: 'IPC_REQ sent; waiting for IPC_ACK or IPC_NOTREADY (bounded by requestTimeoutMs).',
      entry: { type: 'recordState', params: { state: 'SENT' } },
      after: {
        requestTimeout: {
          target: BAD,
          actions: [{ type: 'setReason', params: { code: 'REQUEST_TIMEOUT' } }, 'sendAbort'],
        },
      },
      on: {
        IPC_ACK: [
          {
            guard: and(['answersMyRequest', 'ackSaysOk']),
            target: OK,
            actions: ['storePeerUuidFromAck', 'sendConfirm'],
            description: 'ACK(ok): confirm, IPC in use.',
          },
          {
            guard: 'answersMyRequest',
            target: BAD,
            actions: ['storePeerUuidFromAck', { type: 'setReason', params: { code: 'PEER_REFUSED' } }],
            description: 'ACK(no): the peer is BAD already.',
          },
        ],
        IPC_NOTREADY: [
          {
            guard: and(['answersMyRequest', 'triesExhausted']),
            target: BAD,
            actions: [{ type: 'setReason', params: { code: 'TRIES_EXHAUSTED' } }, 'sendAbort'],
          },
          {
            guard: 'answersMyRequest',
            target: INIT,
            description: 'The peer has no CUDA yet: retry on my next GPU send.',
          },
        ],
        IPC_REQ: [
          {
            guard: 'localWinsTie',
            actions: 'countIgnored',
            description: 'Both asked at once and my id is lower: my request stands; the peer will answer it.',
          },
          {
            target: ACKING,
            actions: 'acceptRequest',
            description: "Both asked at once and the peer's id is lower: drop mine, answer theirs.",
          },
        ],
      },
    },

    ACKING: {
      description: "Deciding the answer to the peer's request (peer access, bounded by checkTimeoutMs).",
      entry: { type: 'recordState', params: { state: 'ACKING' } },
      initial: 'deciding',
      states: {
        deciding: {
          always: [
            {
              guard: 'ipcDisabled',
              target: BAD,
              actions: [{ type: 'setReason', params: { code: 'IPC_DISABLED' } }, 'answerNo'],
            },
            {
              guard: 'peerHasNoDevice',
              target: BAD,
              actions: [{ type: 'setReason', params: { code: 'NO_PEER_ACCESS', detail: 'the request names no device' } }, 'answerNo'],
            },
            {
              guard: and(['sameDevice', 'sameGpuIpcAllowed']),
              target: ACKED,
              actions: 'answerYes',
              description: 'Same GPU (same UUID): yes.',
            },
            {
              guard: 'sameDevice',
              target: BAD,
              actions: [{ type: 'setReason', params: { code: 'SAME_GPU_DISABLED' } }, 'answerNo'],
            },
            { target: 'checkingPeerAccess' },
          ],
        },
        checkingPeerAccess: {
          invoke: {
            id: 'peerAccess',
            src: 'checkPeerAccess',
            input: ({ context }) => ({ checkPeerAccess: context.checkPeerAccess, peerUuid: context.peerUuid }),
            onDone: [
              { guard: 'hasPeerAccess', target: ACKED, actions: 'answerYes' },
              {
                target: BAD,
                actions: [{ type: 'setReason', params: { code: 'NO_PEER_ACCESS' } }, 'answerNo'],
              },
            ],
            onError: {
              target: BAD,
              actions: [
                { type: 'setReason', params: ({ event }) => ({ code: 'NO_PEER_ACCESS' as const, detail: String(event.error) }) },
                'answerNo',
              ],
            },
          },
          after: {
            checkTimeout: {
              target: BAD,
              actions: [{ type: 'setReason', params: { code: 'CHECK_TIMEOUT' } }, 'answerNo'],
            },
          },
        },
      },
    },

    ACKED: {
      description: 'IPC_ACK(ok) sent; waiting for IPC_CONFIRM (bounded by confirmTimeoutMs).',
      entry: { type: 'recordState', params: { state: 'ACKED' } },
      after: {
        confirmTimeout: {
          target: BAD,
          actions: [{ type: 'setReason', params: { code: 'CONFIRM_TIMEOUT' } }, 'sendAbort'],
        },
      },
      on: {
        IPC_CONFIRM: { guard: 'confirmsMyAnswer', target: OK },
      },
    },

    OK: {
      description: 'IPC in use: GPU messages move by RGET.',
      entry: { type: 'recordState', params: { state: 'OK' } },
      tags: ['stable'],
      on: {
        // On an ordered, reliable channel a peer in OK or ACKED never asks again; a
        // request here means it lost its state. Its device may have changed, and our
        // mappings of its memory may be stale: drop IPC on both sides (answer no).
        IPC_REQ: {
          target: BAD,
          actions: [{ type: 'setReason', params: { code: 'PROTOCOL' } }, 'answerNo'],
          description: 'Impossible on an ordered channel unless the peer restarted: refuse, go BAD.',
        },
      },
    },

    BAD: {
      description: 'No IPC on this endpoint, for good: GPU data goes through host staging.',
      entry: { type: 'recordState', params: { state: 'BAD' } },
      tags: ['stable'],
      // Not an XState final state: BAD still answers requests.
      on: {
        IPC_REQ: { actions: 'answerNo', description: 'Any request: ACK(no).' },
        IPC_ABORT: { actions: 'countIgnored' },
        PEER_LOST: {},
      },
    },
  },
});

export type NegotiationMachine = typeof negotiationMachine;
export type NegotiationSnapshot = SnapshotFrom<NegotiationMachine>;

/** The top-level state of a snapshot ('INIT' while in any of its sub-states). */
export function topState(snapshot: NegotiationSnapshot): NegotiationState {
  const v = snapshot.value;
  return (typeof v === 'string' ? v : Object.keys(v)[0]) as NegotiationState;
}

/** 'INIT→SENT→OK': the top-level states an actor (or snapshot) went through. */
export function statePath(source: NegotiationSnapshot | { getSnapshot(): NegotiationSnapshot }): string {
  const snapshot = 'getSnapshot' in source ? source.getSnapshot() : source;
  return snapshot.context.path.join('→');
}
