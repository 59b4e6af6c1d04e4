/**
 * Test harness for the negotiation: one side is a Negotiator with driver
 * checks we control and a log of every frame it sent together with the
 * top-level state it was in before and after; a pair is two sides wired by
 * two FIFO queues that the test drains by hand (or schedules).
 */
import { SimulatedClock } from 'xstate';
import { createNegotiator, topState, type NegotiationConfig, type NegotiationSnapshot, type NegotiationState, type Negotiator } from '../../machines/index.js';
import { FrameType, IPC_PROBE_BYTES, type NegotiationFrame } from '../../src/wire/frames.js';

/** How a driver check behaves: answer yes/no, never answer, or fail. */
export type CheckMode = 'yes' | 'no' | 'hang' | 'throw';

export interface SideEnv {
  ready: CheckMode;
  access: CheckMode;
  /** Opening the peer's probe: 'yes' reads the value back; 'no' reads another value; 'throw' the open fails. Default 'yes'. */
  probe?: CheckMode;
  uuid: string;
}

/** A side's probe (IPC_PROBE_BYTES), told apart by its device UUID. */
export function probeOf(uuid: string): Uint8Array {
  const out = new Uint8Array(IPC_PROBE_BYTES);
  for (let i = 0; i < uuid.length && i < out.length; i++) out[i] = uuid.charCodeAt(i);
  return out;
}

export interface SendRecord {
  frame: NegotiationFrame;
  before: NegotiationState;
  /** Filled in when the transition that sent it completes. */
  after?: NegotiationState;
}

/** Fine-grained state: 'INIT' (idle), 'INIT.checkingSend', 'INIT.checkingRequest', or a top-level state. */
export function detailedState(snapshot: NegotiationSnapshot): string {
  const v = snapshot.value as string | Record<string, string>;
  if (typeof v === 'string') return v;
  const [top, sub] = Object.entries(v)[0]!;
  return top === 'INIT' && sub !== 'idle' ? `INIT.${sub}` : top;
}

/**
 * Settles every promise callback queued so far, and those they queue in turn
 * (the invoked checks resolve in microtasks; a macrotask runs after all of them).
 */
export async function flush(): Promise<void> {
  await new Promise<void>((r) => setImmediate(r));
}

function answer(mode: CheckMode, yes: () => unknown, no: () => unknown): Promise<never> {
  switch (mode) {
    case 'yes':
      return Promise.resolve(yes()) as Promise<never>;
    case 'no':
      return Promise.resolve(no()) as Promise<never>;
    case 'hang':
      return new Promise<never>(() => {});
    case 'throw':
      return Promise.reject(new Error('simulated driver failure'));
  }
}

export interface SideParams {
  id: string;
  peerId: string;
  options: Partial<NegotiationConfig>;
  env: SideEnv;
  clock: SimulatedClock;
  /** Called after each frame is logged (the pair queues it; a scheduler may schedule its delivery). */
  onSend?: (frame: NegotiationFrame) => void;
  /** Replace the check implementations (e.g. with fast-check scheduled functions). */
  checkReady?: () => Promise<{ ready: boolean; deviceUuid: string }>;
  checkPeerAccess?: (uuid: string) => Promise<boolean>;
  openProbe?: (uuid: string, probe: Uint8Array) => Promise<void>;
}

export class Side {
  readonly n: Negotiator;
  readonly env: SideEnv;
  readonly sent: SendRecord[] = [];
  readonly accessAsked: string[] = [];
  /** Probes this side was asked to open, with the device named: 'GPU-…'. */
  readonly probesOpened: Array<{ uuid: string; probe: Uint8Array }> = [];
  readyChecks = 0;
  #pending: SendRecord[] = [];
  #last: NegotiationState = 'INIT';

  constructor(readonly params: SideParams) {
    this.env = params.env;
    this.n = createNegotiator({
      localId: params.id,
      peerId: params.peerId,
      options: params.options,
      clock: params.clock,
      send: (frame) => {
        const rec: SendRecord = { frame, before: this.#last };
        this.sent.push(rec);
        this.#pending.push(rec);
        params.onSend?.(frame);
      },
      checkReady:
        params.checkReady ??
        (() => {
          this.readyChecks++;
          return answer(
            this.env.ready,
            () => ({ ready: true, deviceUuid: this.env.uuid, probe: probeOf(this.env.uuid) }),
            () => ({ ready: false, deviceUuid: '' }),
          );
        }),
      checkPeerAccess:
        params.checkPeerAccess ??
        ((uuid) => {
          this.accessAsked.push(uuid);
          return answer(
            this.env.access,
            () => true,
            () => false,
          );
        }),
      openProbe:
        params.openProbe ??
        ((uuid, probe) => {
          this.probesOpened.push({ uuid, probe });
          const mode = this.env.probe ?? 'yes';
          if (mode === 'no') return Promise.reject(new Error("the peer's probe allocation opened, but read back another value"));
          return answer(
            mode,
            () => undefined,
            () => undefined,
          );
        }),
    });
    this.n.actor.subscribe((snapshot) => {
      this.#last = topState(snapshot);
      for (const rec of this.#pending) rec.after = this.#last;
      this.#pending = [];
    });
  }

  get state(): NegotiationState {
    return this.n.state;
  }

  get detailed(): string {
    return detailedState(this.n.actor.getSnapshot());
  }

  /** Frames sent so far, types only (for terse assertions). */
  get sentTypes(): string[] {
    return this.sent.map((r) => FrameType[r.frame.type]);
  }
}

/**
 * May this frame be sent by a transition from `before` to `after`? The
 * protocol's answer, written independently of the machine:
 *  REQ only leaving INIT for SENT; ACK(ok) only into ACKED; ACK(no) only into
 *  (or staying in) BAD; NOTREADY only staying in INIT; CONFIRM only on
 *  SENT→OK; ABORT only into BAD from INIT, SENT or ACKED (own decisions).
 */
export function allowedSend(before: NegotiationState, after: NegotiationState | undefined, frame: NegotiationFrame): boolean {
  switch (frame.type) {
    case FrameType.IPC_REQ:
      return before === 'INIT' && after === 'SENT';
    case FrameType.IPC_ACK:
      return frame.ok
        ? after === 'ACKED' && ['INIT', 'SENT', 'ACKING'].includes(before)
        : after === 'BAD' && ['INIT', 'SENT', 'ACKING', 'OK', 'BAD'].includes(before);
    case FrameType.IPC_NOTREADY:
      return before === 'INIT' && after === 'INIT';
    case FrameType.IPC_CONFIRM:
      return before === 'SENT' && after === 'OK';
    case FrameType.IPC_ABORT:
      return after === 'BAD' && ['INIT', 'SENT', 'ACKED'].includes(before);
  }
}

export interface PairParams {
  aOptions?: Partial<NegotiationConfig>;
  bOptions?: Partial<NegotiationConfig>;
  aEnv?: Partial<SideEnv>;
  bEnv?: Partial<SideEnv>;
  /** Transport ids; 'a' < 'b', so A wins ties by default. */
  aId?: string;
  bId?: string;
}

/** Two sides joined by two FIFO queues (ordered, reliable channels) that the test drains. */
export class Pair {
  readonly clock = new SimulatedClock();
  readonly a: Side;
  readonly b: Side;
  /** Frames in flight from A to B, and from B to A. */
  readonly ab: NegotiationFrame[] = [];
  readonly ba: NegotiationFrame[] = [];

  constructor(p: PairParams = {}) {
    const aId = p.aId ?? 'a';
    const bId = p.bId ?? 'b';
    this.a = new Side({
      id: aId,
      peerId: bId,
      options: p.aOptions ?? {},
      env: { ready: 'yes', access: 'yes', uuid: 'GPU-aaaa', ...p.aEnv },
      clock: this.clock,
      onSend: (f) => this.ab.push(f),
    });
    this.b = new Side({
      id: bId,
      peerId: aId,
      options: p.bOptions ?? {},
      env: { ready: 'yes', access: 'yes', uuid: 'GPU-bbbb', ...p.bEnv },
      clock: this.clock,
      onSend: (f) => this.ba.push(f),
    });
  }

  side(which: 'a' | 'b'): Side {
    return which === 'a' ? this.a : this.b;
  }

  queueFrom(which: 'a' | 'b'): NegotiationFrame[] {
    return which === 'a' ? this.ab : this.ba;
  }

  /** Delivers the oldest frame in flight from `from` to the other side; false if none. */
  deliver(from: 'a' | 'b'): boolean {
    const frame = this.queueFrom(from).shift();
    if (!frame) return false;
    (from === 'a' ? this.b : this.a).n.receive(frame);
    return true;
  }

  /** The channel closed: both sides see PEER_LOST, frames in flight are gone. */
  loseChannel(): void {
    this.ab.length = 0;
    this.ba.length = 0;
    this.a.n.peerLost();
    this.b.n.peerLost();
  }

  stop(): void {
    this.a.n.stop();
    this.b.n.stop();
  }
}
