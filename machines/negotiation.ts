/**
 * One file over 500 lines, as one concept: the machine definition is one
 * declarative object (states, guards, named effects) that the diagrams and
 * the model tests read whole; splitting it would split the picture.
 *
 * The per-endpoint CUDA IPC negotiation (the smcuda handshake of the design
 * document, seeds/001), as an XState v5 machine. One actor per endpoint; both
 * directions share it: whichever side sends a GPU buffer first starts it.
 *
 *   INIT    nothing has happened (sub-states: idle, checkingSend, checkingRequest)
 *   SENT    I sent IPC_REQ and wait for the answer
 *   ACKING  the peer asked; I am deciding what to answer (peer access check)
 *   ACKED   I answered IPC_ACK(ok) and wait for IPC_CONFIRM
 *   OK      IPC in use on this endpoint (may still go BAD on PEER_LOST/ABORT)
 *
 * OK means IPC works between these two processes, not only that
 * cuDeviceCanAccessPeer said yes: each side's IPC_REQ / IPC_ACK(ok) carries a
 * probe (src/ipc-probe.ts: a small allocation holding a random value), and
 * the other side opens it and reads the value back before it answers yes
 * (ACKING) or confirms (SENT). A probe that does not open is BAD on both
 * sides (ACK(no), or ABORT instead of CONFIRM), still in 1.5 round trips.
 *   BAD     no IPC on this endpoint, for good (it still answers IPC_REQ with no)
 *
 * The machine never touches bytes or the driver directly. Its effects are
 * named in `setup()` and supplied with `negotiationMachine.provide(...)`
 * (negotiator.ts does it for an endpoint; tests provide their own):
 *  - action `send` (params `{ frame }`): the endpoint encodes and writes the frame;
 *  - actors `checkReady`, `checkPeerAccess`, `openProbe`: driver questions,
 *    run as invoked promise actors (visible, cancellable, time-bounded).
 * Unprovided, `send` throws and the actors reject (no IPC). The context is
 * plain, serialisable data (ids, options, counters, hex probes), so an actor's
 * persisted snapshot can be stored and restored.
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
  /**
   * Use CUDA IPC between two processes on the same GPU (decided by the
   * answering side). Default true; false: such pairs move device messages by
   * staging (the negotiation ends BAD with SAME_GPU_DISABLED).
   */
  sameGpuIpc: boolean;
  /**
   * IPC requests this side may send while the peer answers "not ready"
   * before it gives up (BAD, TRIES_EXHAUSTED). Default 5 (the design's);
   * 0: the first GPU send gives up at once.
   */
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

/**
 * What `checkReady` answers: is CUDA initialised in this process, my device's
 * UUID ('GPU-…'), and my exported probe (IPC_PROBE_BYTES, src/ipc-probe.ts;
 * absent when it could not be made: the peer then refuses IPC).
 */
export interface ReadyCheck {
  ready: boolean;
  deviceUuid: string;
  probe?: Uint8Array;
}

/** The effects an endpoint supplies (negotiator.ts turns them into `provide`d actions and actors). */
export interface NegotiationIO {
  /** Send one negotiation frame to the peer (the endpoint encodes it). Must not throw; see Negotiator. */
  send(frame: NegotiationFrame): void;
  checkReady(): Promise<ReadyCheck>;
  /** Can my current device and the device `peerUuid` access each other? Never called for the same UUID. */
  checkPeerAccess(peerUuid: string): Promise<boolean>;
  /** Open the peer's probe (on device `peerUuid`) and read its value; reject with the reason when that fails. */
  openProbe(peerUuid: string, probe: Uint8Array): Promise<void>;
}

/** The actor's input: plain data. */
export interface NegotiationInput {
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
  | 'PROBE_FAILED'
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
  PROBE_FAILED: "peer access said yes, but the peer's probe allocation could not be opened and read (IPC does not work between these processes)",
  PROTOCOL: 'IPC_REQ while OK: the peer lost its negotiation state (restarted?); IPC is dropped on this endpoint',
};

/** Plain data only (JSON-serialisable): the actor's snapshot can be persisted and restored. */
export interface NegotiationContext {
  localId: string;
  peerId: string;
  options: NegotiationConfig;
  /** Requests sent so far (IPC_REQ.attempt of the last one). Never exceeds options.maxTries. */
  tries: number;
  /** My device's UUID, once checkReady said ready ('' before). */
  localUuid: string;
  /** The peer's device UUID, from its IPC_REQ or IPC_ACK ('' before). */
  peerUuid: string;
  /** My probe, hex ('' none), from checkReady; sent in IPC_REQ and IPC_ACK(ok). */
  localProbe: string;
  /** The peer's probe, hex ('' none), from its IPC_REQ or IPC_ACK(ok). */
  peerProbe: string;
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

export type NegotiationEvent = { type: 'GPU_SEND' } | { type: 'PEER_LOST' } | { type: 'FRAME'; frame: NegotiationFrame } | FrameEvent;

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
function normaliseReady(r: ReadyCheck | undefined): { ready: boolean; deviceUuid: string; probe: string } {
  const ready = !!r && r.ready === true && typeof r.deviceUuid === 'string' && r.deviceUuid.length > 0;
  const probe = ready && r!.probe instanceof Uint8Array ? toHex(r!.probe) : '';
  return { ready, deviceUuid: ready ? r!.deviceUuid : '', probe };
}

/** Probes live in the context as hex (plain data); frames carry bytes. */
export function toHex(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('hex');
}
export function fromHex(hex: string): Uint8Array {
  return new Uint8Array(Buffer.from(hex, 'hex'));
}
const probeField = (hex: string): { probe?: Uint8Array } => (hex ? { probe: fromHex(hex) } : {});

/** Inputs of the invoked actors (what a `provide`d replacement receives). */
export type CheckReadyInput = undefined;
export interface CheckPeerAccessInput {
  peerUuid: string;
}
export interface OpenProbeInput {
  peerUuid: string;
  /** The peer's probe (IPC_PROBE_BYTES). */
  probe: Uint8Array;
}

/** An invoked actor's rejection, as text for the BAD reason. */
function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** What an effect that was not provided does: refuse loudly (send) or answer no (actors). */
function notProvided(what: string): Error {
  return new Error(`negotiationMachine: no ${what} was provided; use negotiationMachine.provide(...) (negotiator.ts does)`);
}

const BAD = '#negotiation.BAD';
const INIT = '#negotiation.INIT';
const SENT = '#negotiation.SENT';
const ACKING = '#negotiation.ACKING';
const ACKED = '#negotiation.ACKED';
const OK = '#negotiation.OK';

const base = setup({
  types: {} as {
    context: NegotiationContext;
    events: NegotiationEvent;
    input: NegotiationInput;
    tags: 'stable';
  },
  actors: {
    /** Is CUDA initialised here, which device am I on, and my probe. Rejections and hangs count as "not ready". */
    checkReady: fromPromise<ReadyCheck, CheckReadyInput>(async () => {
      throw notProvided('checkReady actor');
    }),
    /** Peer access between my device and the peer's (different UUIDs only). Rejections and hangs count as "no". */
    checkPeerAccess: fromPromise<boolean, CheckPeerAccessInput>(async () => {
      throw notProvided('checkPeerAccess actor');
    }),
    /** Open the peer's probe and read its value. Resolves: IPC works; rejections and hangs: it does not. */
    openProbe: fromPromise<void, OpenProbeInput>(async () => {
      throw notProvided('openProbe actor');
    }),
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
    peerHasNoProbe: ({ context }) => context.peerProbe === '',
    sameDevice: ({ context }) => context.peerUuid === context.localUuid,
    sameGpuIpcAllowed: ({ context }) => context.options.sameGpuIpc,
    /** On checkReady's done event. */
    isReady: ({ event }) => normaliseReady(outputOf<ReadyCheck>(event)).ready,
    /** On checkPeerAccess's done event. */
    hasPeerAccess: ({ event }) => outputOf<boolean>(event) === true,
  },
  delays: {
    requestTimeout: ({ context }) => context.options.requestTimeoutMs,
    confirmTimeout: ({ context }) => context.options.confirmTimeoutMs,
    checkTimeout: ({ context }) => context.options.checkTimeoutMs,
  },
  actions: {
    /** The one outward effect: hand a frame to the endpoint. Provided by whoever runs the machine. */
    send: (_, _params: { frame: NegotiationFrame }) => {
      throw notProvided('send action');
    },
    recordState: assign({
      path: ({ context }, params: { state: NegotiationState }) => [...context.path, params.state],
    }),
    countIgnored: assign({ ignored: ({ context }) => context.ignored + 1 }),
    /** Remember the peer's request (its attempt and device) so that ACKING can answer it. */
    acceptRequest: assign(({ event }) =>
      event.type === 'IPC_REQ'
        ? { answering: event.frame.attempt, peerUuid: event.frame.deviceUuid, peerProbe: event.frame.probe ? toHex(event.frame.probe) : '' }
        : {},
    ),
    /** checkReady said ready: my device and my probe. */
    storeReady: assign((_, params: { output: ReadyCheck | undefined }) => {
      const r = normaliseReady(params.output);
      return { localUuid: r.deviceUuid, localProbe: r.probe };
    }),
    storePeerFromAck: assign(({ event }) =>
      event.type === 'IPC_ACK' ? { peerUuid: event.frame.deviceUuid, peerProbe: event.frame.probe ? toHex(event.frame.probe) : '' } : {},
    ),
    countTry: assign({ tries: ({ context }) => context.tries + 1 }),
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
});

/** The named `send` action with a frame built from the context (and the event). */
const sendWith = (build: (context: NegotiationContext, event: NegotiationEvent) => NegotiationFrame) =>
  base.createAction(enqueueActions(({ context, event, enqueue }) => enqueue({ type: 'send', params: { frame: build(context, event) } })));

export const negotiationMachine = base
  .extend({
    actions: {
      sendRequest: sendWith((c) => ({ type: FrameType.IPC_REQ, attempt: c.tries, deviceUuid: c.localUuid, ...probeField(c.localProbe) })),
      sendNotReady: sendWith((c) => ({ type: FrameType.IPC_NOTREADY, attempt: c.answering })),
      answerYes: sendWith((c) => ({ type: FrameType.IPC_ACK, attempt: c.answering, ok: true, deviceUuid: c.localUuid, ...probeField(c.localProbe) })),
      /** Answer a request with no. `attempt` from the request being answered (BAD answers any request). */
      answerNo: sendWith((c, event) => ({
        type: FrameType.IPC_ACK,
        attempt: event.type === 'IPC_REQ' ? event.frame.attempt : c.answering,
        ok: false,
        deviceUuid: c.localUuid,
      })),
      sendConfirm: sendWith((c) => ({ type: FrameType.IPC_CONFIRM, attempt: c.tries })),
      sendAbort: sendWith((c) => ({ type: FrameType.IPC_ABORT, reason: `${c.reasonCode}: ${c.reason}` })),
    },
  })
  .createMachine({
    id: 'negotiation',
    description: 'Per-endpoint CUDA IPC negotiation (smcuda handshake): lazy, tie-broken by transport id, time-bounded.',
    initial: 'INIT',
    context: ({ input }) => ({
      localId: input.localId,
      peerId: input.peerId,
      options: resolveNegotiationConfig(input.options),
      tries: 0,
      localUuid: '',
      peerUuid: '',
      localProbe: '',
      peerProbe: '',
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
              onDone: [
                {
                  guard: 'isReady',
                  target: SENT,
                  actions: [{ type: 'storeReady', params: ({ event }) => ({ output: event.output }) }, 'countTry', 'sendRequest'],
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
              onDone: [
                {
                  guard: 'isReady',
                  target: ACKING,
                  actions: { type: 'storeReady', params: ({ event }) => ({ output: event.output }) },
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
        description: "IPC_REQ sent; waiting for IPC_ACK or IPC_NOTREADY, then opening the peer's probe (bounded by requestTimeoutMs).",
        entry: { type: 'recordState', params: { state: 'SENT' } },
        after: {
          requestTimeout: {
            target: BAD,
            actions: [{ type: 'setReason', params: { code: 'REQUEST_TIMEOUT' } }, 'sendAbort'],
          },
        },
        initial: 'waiting',
        states: {
          waiting: {
            on: {
              IPC_ACK: [
                {
                  guard: and(['answersMyRequest', 'ackSaysOk']),
                  target: 'openingProbe',
                  actions: 'storePeerFromAck',
                  description: "ACK(ok): open the peer's probe before confirming.",
                },
                {
                  guard: 'answersMyRequest',
                  target: BAD,
                  actions: ['storePeerFromAck', { type: 'setReason', params: { code: 'PEER_REFUSED' } }],
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
          openingProbe: {
            description: 'The peer said yes: open its probe and read the value (bounded by checkTimeoutMs); only then confirm.',
            always: {
              guard: 'peerHasNoProbe',
              target: BAD,
              actions: [{ type: 'setReason', params: { code: 'PROBE_FAILED', detail: 'the answer carries no probe' } }, 'sendAbort'],
            },
            invoke: {
              id: 'peerProbeOfAck',
              src: 'openProbe',
              input: ({ context }) => ({ peerUuid: context.peerUuid, probe: fromHex(context.peerProbe) }),
              onDone: { target: OK, actions: 'sendConfirm', description: 'Read back: confirm, IPC in use.' },
              onError: {
                target: BAD,
                actions: [{ type: 'setReason', params: ({ event }) => ({ code: 'PROBE_FAILED' as const, detail: errorText(event.error) }) }, 'sendAbort'],
                description: 'The probe does not open: abort (the peer, in ACKED, goes BAD too).',
              },
            },
            after: {
              checkTimeout: {
                target: BAD,
                actions: [{ type: 'setReason', params: { code: 'PROBE_FAILED', detail: 'opening it did not finish in time' } }, 'sendAbort'],
              },
            },
          },
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
                target: 'openingProbe',
                description: 'Same GPU (same UUID): yes, once its probe opens.',
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
              input: ({ context }) => ({ peerUuid: context.peerUuid }),
              onDone: [
                { guard: 'hasPeerAccess', target: 'openingProbe' },
                {
                  target: BAD,
                  actions: [{ type: 'setReason', params: { code: 'NO_PEER_ACCESS' } }, 'answerNo'],
                },
              ],
              onError: {
                target: BAD,
                actions: [{ type: 'setReason', params: ({ event }) => ({ code: 'NO_PEER_ACCESS' as const, detail: String(event.error) }) }, 'answerNo'],
              },
            },
            after: {
              checkTimeout: {
                target: BAD,
                actions: [{ type: 'setReason', params: { code: 'CHECK_TIMEOUT' } }, 'answerNo'],
              },
            },
          },
          openingProbe: {
            description: "Open the requester's probe and read the value (bounded by checkTimeoutMs); only then answer yes.",
            always: {
              guard: 'peerHasNoProbe',
              target: BAD,
              actions: [{ type: 'setReason', params: { code: 'PROBE_FAILED', detail: 'the request carries no probe' } }, 'answerNo'],
            },
            invoke: {
              id: 'peerProbeOfRequest',
              src: 'openProbe',
              input: ({ context }) => ({ peerUuid: context.peerUuid, probe: fromHex(context.peerProbe) }),
              onDone: { target: ACKED, actions: 'answerYes' },
              onError: {
                target: BAD,
                actions: [{ type: 'setReason', params: ({ event }) => ({ code: 'PROBE_FAILED' as const, detail: errorText(event.error) }) }, 'answerNo'],
              },
            },
            after: {
              checkTimeout: {
                target: BAD,
                actions: [{ type: 'setReason', params: { code: 'PROBE_FAILED', detail: 'opening it did not finish in time' } }, 'answerNo'],
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
