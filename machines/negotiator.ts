/**
 * Negotiator: the small typed wrapper an endpoint holds around one negotiation
 * actor. It starts the actor, turns frames into machine events, and mirrors
 * the top-level state into plain fields, so that the per-message hot path
 * reads `negotiator.ok` and never touches XState.
 *
 *   const n = createNegotiator({ localId, peerId, options, send, checkReady, checkPeerAccess, openProbe,
 *                                onStateChange: (state, previous, info) => … });
 *
 * The effects (send, checkReady, checkPeerAccess, openProbe) become the
 * machine's named action and actors through `machine.provide(...)`; the
 * actor's input and context hold plain data only.
 *   n.gpuSend();            // before the first GPU send (only acts in INIT)
 *   n.receive(frame);       // a negotiation frame arrived
 *   n.peerLost(); n.stop(); // channel closed
 */
import { createActor, fromPromise, type Actor, type ActorOptions, type InspectionEvent, type Observer } from 'xstate';
import { ConfigError } from '../src/errors.js';
import type { NegotiationFrame } from '../src/wire/frames.js';
import {
  frameEvent,
  negotiationMachine,
  resolveNegotiationConfig,
  topState,
  type BadReasonCode,
  type NegotiationConfig,
  type NegotiationContext,
  type NegotiationIO,
  type NegotiationInput,
  type NegotiationMachine,
  type CheckPeerAccessInput,
  type CheckReadyInput,
  type OpenProbeInput,
  type ReadyCheck,
  type NegotiationSnapshot,
  type NegotiationState,
} from './negotiation.js';

/** XState's timer source (setTimeout/clearTimeout); tests pass a SimulatedClock. */
export type Clock = NonNullable<ActorOptions<NegotiationMachine>['clock']>;

/** Passed with every state change. */
export interface StateChangeInfo {
  tries: number;
  /** Why BAD (present only when `state` is 'BAD'). */
  reason?: string;
  reasonCode?: BadReasonCode;
}

export type StateChangeListener = (state: NegotiationState, previous: NegotiationState, info: StateChangeInfo) => void;

export interface NegotiatorParams extends NegotiationInput, Partial<Omit<NegotiationIO, 'send'>> {
  /** Send one negotiation frame (the endpoint encodes it). A throw is taken as the channel gone (PEER_LOST). */
  send: NegotiationIO['send'];
  /** Called for every top-level state entered, in order, including pass-through ones (SENT→ACKING→ACKED). */
  onStateChange?: StateChangeListener;
  /** XState clock (tests pass a SimulatedClock); default: real timers. */
  clock?: Clock;
  /** XState inspection (tracing, Stately inspector). */
  inspect?: Observer<InspectionEvent> | ((event: InspectionEvent) => void);
  /**
   * The machine to run, e.g. `negotiationMachine.provide({ actors: … })`;
   * default negotiationMachine. The effects given here are provided on top of
   * it; checkReady, checkPeerAccess and openProbe may be left out when this
   * machine already provides them.
   */
  machine?: NegotiationMachine;
}

function validate(params: NegotiatorParams): NegotiationConfig {
  const { localId, peerId } = params;
  if (typeof localId !== 'string' || localId === '' || typeof peerId !== 'string' || peerId === '') {
    throw new ConfigError(`negotiation needs two non-empty transport ids, got localId=${String(localId)} peerId=${String(peerId)}`);
  }
  if (localId === peerId) {
    throw new ConfigError(`local and peer transport ids are both '${localId}': ids must be unique in the job (they break negotiation ties)`);
  }
  if (typeof params.send !== 'function') throw new ConfigError('negotiation needs a send function');
  for (const fn of ['checkReady', 'checkPeerAccess', 'openProbe'] as const) {
    const given = (params as unknown as Record<string, unknown>)[fn];
    if (given === undefined && params.machine) continue; // the given machine provides it
    if (typeof given !== 'function') throw new ConfigError(`negotiation needs a ${fn} function`);
  }
  const o = resolveNegotiationConfig(params.options);
  if (!Number.isInteger(o.maxTries) || o.maxTries < 0) {
    throw new ConfigError(`negotiation.maxTries must be an integer ≥ 0, got ${o.maxTries}`);
  }
  for (const k of ['requestTimeoutMs', 'confirmTimeoutMs', 'checkTimeoutMs'] as const) {
    if (typeof o[k] !== 'number' || !(o[k] > 0)) {
      throw new ConfigError(`negotiation.${k} must be a positive number of milliseconds, got ${o[k]}`);
    }
  }
  return o;
}

export class Negotiator {
  readonly actor: Actor<NegotiationMachine>;
  #state: NegotiationState = 'INIT';
  #seen = 1; // entries of context.path already reported (the initial INIT is not a change)
  readonly #listeners = new Set<StateChangeListener>();
  readonly #settled = new Set<(state: 'OK' | 'BAD') => void>();
  /** whenIdle() callbacks: run once no negotiation is in flight. */
  readonly #idle = new Set<() => void>();
  #inFlight = false;
  /** Set when `send` threw: the endpoint's channel is gone, so the negotiation is too. */
  sendError: unknown = undefined;

  constructor(params: NegotiatorParams) {
    const options = validate(params);
    if (params.onStateChange) this.#listeners.add(params.onStateChange);
    const input: NegotiationInput = { localId: params.localId, peerId: params.peerId, options };
    const { checkReady, checkPeerAccess, openProbe } = params;
    const machine = (params.machine ?? negotiationMachine).provide({
      actions: {
        // A send that throws must not crash the actor mid-transition: record it and
        // treat the peer as lost once this transition is done.
        send: (_, { frame }) => {
          try {
            params.send(frame);
          } catch (err) {
            this.sendError ??= err;
            queueMicrotask(() => this.peerLost());
          }
        },
      },
      actors: {
        ...(checkReady ? { checkReady: fromPromise<ReadyCheck, CheckReadyInput>(() => checkReady()) } : {}),
        ...(checkPeerAccess
          ? { checkPeerAccess: fromPromise<boolean, CheckPeerAccessInput>(async ({ input }) => (await checkPeerAccess(input.peerUuid)) === true) }
          : {}),
        ...(openProbe ? { openProbe: fromPromise<void, OpenProbeInput>(({ input }) => openProbe(input.peerUuid, input.probe)) } : {}),
      },
    });
    this.actor = createActor(machine, {
      input,
      ...(params.clock ? { clock: params.clock } : {}),
      ...(params.inspect ? { inspect: params.inspect } : {}),
    });
    this.actor.subscribe({
      next: (snapshot) => this.#update(snapshot),
      // A bug in the machine must not take the process down: the endpoint falls back to staging.
      error: () => this.#fail(),
    });
    this.actor.start();
  }

  /** Current top-level state (a plain field: cheap). */
  get state(): NegotiationState {
    return this.#state;
  }

  /**
   * True while a negotiation runs: from the GPU send (or the peer's request)
   * that started it until it settles (OK, BAD) or goes back to INIT's idle
   * (not ready: tried again on the next GPU send).
   */
  get inFlight(): boolean {
    return this.#inFlight;
  }

  /** Runs `cb` once no negotiation is in flight (at once if none is). */
  whenIdle(cb: () => void): void {
    if (this.#inFlight) this.#idle.add(cb);
    else cb();
  }

  /** True while IPC is in use: the hot path's only question. */
  get ok(): boolean {
    return this.#state === 'OK';
  }

  get context(): Readonly<NegotiationContext> {
    return this.actor.getSnapshot().context;
  }

  get tries(): number {
    return this.context.tries;
  }

  /** Top-level states entered so far, e.g. 'INIT→SENT→OK'. */
  get path(): string {
    return this.context.path.join('→');
  }

  /** The endpoint is about to send a GPU buffer. Acts only in INIT (idle); cheap no-op otherwise. */
  gpuSend(): void {
    if (this.#state === 'INIT') this.actor.send({ type: 'GPU_SEND' });
  }

  /** A negotiation frame arrived from the peer. */
  receive(frame: NegotiationFrame): void {
    this.actor.send(frameEvent(frame));
  }

  /** The peer or the channel is gone: BAD, nothing sent. */
  peerLost(): void {
    this.actor.send({ type: 'PEER_LOST' });
  }

  /** Stops the actor (cancels its timers and checks); events after this are dropped. */
  stop(): void {
    this.actor.stop();
  }

  /** Adds a listener; returns the function that removes it. */
  onStateChange(listener: StateChangeListener): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** Resolves with 'OK' or 'BAD' the first time the negotiation reaches either (at once if it has). */
  settled(): Promise<'OK' | 'BAD'> {
    if (this.#state === 'OK' || this.#state === 'BAD') return Promise.resolve(this.#state);
    return new Promise((resolve) => this.#settled.add(resolve));
  }

  #update(snapshot: NegotiationSnapshot): void {
    const { path, tries, reason, reasonCode } = snapshot.context;
    // One macrostep may pass through several top-level states (SENT→ACKING→ACKED):
    // report each, in order, from the machine's own record.
    for (; this.#seen < path.length; this.#seen++) {
      const previous = path[this.#seen - 1]!;
      const state = path[this.#seen]!;
      this.#state = state;
      const info: StateChangeInfo = state === 'BAD' && reasonCode ? { tries, reason, reasonCode } : { tries };
      for (const l of this.#listeners) l(state, previous, info);
    }
    this.#state = topState(snapshot);
    if (this.#state === 'OK' || this.#state === 'BAD') {
      const state = this.#state;
      for (const resolve of this.#settled) resolve(state);
      this.#settled.clear();
    }
    this.#inFlight = this.#state !== 'OK' && this.#state !== 'BAD' && !snapshot.matches({ INIT: 'idle' });
    if (!this.#inFlight) this.#runIdle();
  }

  #runIdle(): void {
    if (this.#idle.size === 0) return;
    const waiting = [...this.#idle];
    this.#idle.clear();
    for (const cb of waiting) cb();
  }

  #fail(): void {
    const previous = this.#state;
    this.#state = 'BAD';
    if (previous !== 'BAD') {
      const info: StateChangeInfo = { tries: this.context.tries, reason: 'internal error in the negotiation machine', reasonCode: 'PROTOCOL' };
      for (const l of this.#listeners) l('BAD', previous, info);
    }
    for (const resolve of this.#settled) resolve('BAD');
    this.#settled.clear();
    this.#inFlight = false;
    this.#runIdle();
  }
}

export function createNegotiator(params: NegotiatorParams): Negotiator {
  return new Negotiator(params);
}
