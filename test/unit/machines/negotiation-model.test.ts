/**
 * Model-based test of the negotiation alone: two live Negotiators (A, B)
 * wired by two FIFO queues, driven by fast-check commands (GPU sends,
 * deliveries, readiness and peer-access answers that change, hanging and
 * failing driver checks, lost channels, time passing) and compared after
 * every step with the reference model in helpers/negotiation-reference.ts:
 * same state, same tries, same frames in flight, same count of ignored frames.
 *
 * After the commands, the system is drained (deliver everything, let time
 * pass, send on both sides, with at least one side eventually ready) and must
 * end with both sides OK or both BAD, tries within the limit, and every frame
 * sent by a transition that allows it.
 */
import { describe, expect } from 'vitest';
import { fc, test } from '@fast-check/vitest';
import type { NegotiationConfig } from '../../../machines/index.js';
import { FrameType, type NegotiationFrame } from '../../../src/wire/frames.js';
import { Pair, type Side, allowedSend, flush, type CheckMode, type SideEnv } from '../../helpers/negotiation-harness.js';
import { RefPair, RefSide } from '../../helpers/negotiation-reference.js';

const TIMEOUTS = { requestTimeoutMs: 100, confirmTimeoutMs: 150, checkTimeoutMs: 50 };
const PAST_ALL_TIMEOUTS = 1_000;

type Which = 'a' | 'b';

/** ABORT reasons are prose; the model compares frames without them. */
function normalise(frames: readonly NegotiationFrame[]): NegotiationFrame[] {
  return frames.map((f) => (f.type === FrameType.IPC_ABORT ? { ...f, reason: '' } : f));
}

function checkSide(which: Which, model: RefSide, real: Side, inFlight: NegotiationFrame[]): void {
  const ctx = real.n.context;
  expect(real.detailed, `${which}: state`).toBe(model.state);
  expect(ctx.tries, `${which}: tries`).toBe(model.tries);
  expect(ctx.ignored, `${which}: ignored frames`).toBe(model.ignored);
  expect(normalise(inFlight), `${which}: frames in flight`).toEqual(model.outbox);
  expect(ctx.tries).toBeLessThanOrEqual(ctx.options.maxTries);
  for (const rec of real.sent) {
    expect(allowedSend(rec.before, rec.after, rec.frame), `${which} sent ${FrameType[rec.frame.type]} on ${rec.before}→${rec.after}`).toBe(true);
  }
  // The hot-path field agrees with the machine.
  expect(real.n.ok).toBe(real.state === 'OK');
  // The endpoint holds sends while a negotiation is in flight: anything but settled or INIT's idle.
  expect(real.n.inFlight, `${which}: in flight in ${real.detailed}`).toBe(!['OK', 'BAD', 'INIT', 'INIT.idle'].includes(real.detailed));
}

function checkAll(m: RefPair, r: Pair): void {
  checkSide('a', m.a, r.a, r.ab);
  checkSide('b', m.b, r.b, r.ba);
}

/** Every command: apply to the model, act on the real pair, let checks settle, compare. */
abstract class Step implements fc.AsyncCommand<RefPair, Pair> {
  check(_m: Readonly<RefPair>): boolean {
    return true;
  }
  abstract model(m: RefPair): void;
  abstract real(r: Pair): void;
  async run(m: RefPair, r: Pair): Promise<void> {
    this.model(m);
    this.real(r);
    await flush();
    checkAll(m, r);
  }
  abstract toString(): string;
}

class GpuSend extends Step {
  constructor(readonly s: Which) {
    super();
  }
  model(m: RefPair) {
    m.side(this.s).gpuSend();
  }
  real(r: Pair) {
    r.side(this.s).n.gpuSend();
  }
  toString() {
    return `${this.s}.gpuSend`;
  }
}

class Deliver extends Step {
  constructor(readonly from: Which) {
    super();
  }
  override check(m: Readonly<RefPair>) {
    return m.side(this.from).outbox.length > 0;
  }
  model(m: RefPair) {
    m.deliver(this.from);
  }
  real(r: Pair) {
    r.deliver(this.from);
  }
  toString() {
    return `deliver ${this.from}→${this.from === 'a' ? 'b' : 'a'}`;
  }
}

/** Changes what a side's driver answers from now on (the env object is shared by model and real). */
class SetEnv extends Step {
  constructor(
    readonly s: Which,
    readonly key: 'ready' | 'access' | 'probe',
    readonly mode: CheckMode,
  ) {
    super();
  }
  model(m: RefPair) {
    m.side(this.s).env[this.key] = this.mode;
  }
  real() {}
  toString() {
    return `${this.s}.${this.key}=${this.mode}`;
  }
}

class AdvanceTime extends Step {
  model(m: RefPair) {
    m.a.timeout();
    m.b.timeout();
  }
  real(r: Pair) {
    r.clock.increment(PAST_ALL_TIMEOUTS);
  }
  toString() {
    return 'advanceTime';
  }
}

class LoseChannel extends Step {
  model(m: RefPair) {
    m.loseChannel();
  }
  real(r: Pair) {
    r.loseChannel();
  }
  toString() {
    return 'loseChannel';
  }
}

const which = fc.constantFrom<Which>('a', 'b');
/** Driver answers: mostly yes, so that runs reach OK as often as BAD. */
const mode: fc.Arbitrary<CheckMode> = fc.oneof(
  { arbitrary: fc.constant<CheckMode>('yes'), weight: 6 },
  { arbitrary: fc.constantFrom<CheckMode>('no', 'hang', 'throw'), weight: 3 },
);

// Weights: deliveries and sends dominate; a lost channel ends the interesting
// part of a run, so it comes up in roughly one run in six.
const command = fc.oneof(
  { arbitrary: which.map((s) => new GpuSend(s)), weight: 30 },
  { arbitrary: which.map((s) => new Deliver(s)), weight: 60 },
  { arbitrary: fc.tuple(which, mode).map(([s, m]) => new SetEnv(s, 'ready', m)), weight: 15 },
  { arbitrary: fc.tuple(which, mode).map(([s, m]) => new SetEnv(s, 'access', m)), weight: 8 },
  { arbitrary: fc.tuple(which, mode).map(([s, m]) => new SetEnv(s, 'probe', m)), weight: 8 },
  { arbitrary: fc.constant(new AdvanceTime()), weight: 6 },
  { arbitrary: fc.constant(new LoseChannel()), weight: 1 },
);

const options: fc.Arbitrary<Partial<NegotiationConfig>> = fc.record({
  ipc: fc.oneof({ arbitrary: fc.constant(true), weight: 8 }, { arbitrary: fc.constant(false), weight: 1 }),
  sameGpuIpc: fc.boolean(),
  maxTries: fc.oneof(
    { arbitrary: fc.constant(5), weight: 6 },
    { arbitrary: fc.integer({ min: 1, max: 4 }), weight: 3 },
    { arbitrary: fc.constant(0), weight: 1 },
  ),
});

const setup = fc.record({
  aOptions: options,
  bOptions: options,
  sameGpu: fc.boolean(),
  /** Whether A has the lower transport id (wins ties). */
  aLower: fc.boolean(),
  aReady: mode,
  bReady: mode,
  aAccess: mode,
  bAccess: mode,
  /** Opening the other side's IPC probe. */
  aProbe: mode,
  bProbe: mode,
  /** Whether each side initialises CUDA eventually (drain); if neither does, A does. */
  aEventuallyReady: fc.boolean(),
  bEventuallyReady: fc.boolean(),
});

type Setup = typeof setup extends fc.Arbitrary<infer T> ? T : never;

function build(cfg: Setup): { model: RefPair; real: Pair } {
  const aEnv: SideEnv = { ready: cfg.aReady, access: cfg.aAccess, probe: cfg.aProbe, uuid: cfg.sameGpu ? 'GPU-same' : 'GPU-aaaa' };
  const bEnv: SideEnv = { ready: cfg.bReady, access: cfg.bAccess, probe: cfg.bProbe, uuid: cfg.sameGpu ? 'GPU-same' : 'GPU-bbbb' };
  const [aId, bId] = cfg.aLower ? ['host-1', 'host-2'] : ['host-2', 'host-1'];
  const aOptions = { ...cfg.aOptions, ...TIMEOUTS };
  const bOptions = { ...cfg.bOptions, ...TIMEOUTS };
  const real = new Pair({ aId, bId, aOptions, bOptions, aEnv, bEnv });
  // The model reads the very env objects the real sides' checks read.
  const model = new RefPair(new RefSide(aId, bId, aOptions, real.a.env), new RefSide(bId, aId, bOptions, real.b.env));
  return { model, real };
}

/**
 * Deliver everything, let every timeout pass, send a GPU buffer on both sides;
 * repeat until both sides are OK or BAD with nothing in flight. Fairness: hung
 * checks end, and at least one side is eventually ready.
 */
async function drain(m: RefPair, r: Pair, cfg: Setup): Promise<void> {
  for (const [env, eventually] of [
    [r.a.env, cfg.aEventuallyReady],
    [r.b.env, cfg.bEventuallyReady],
  ] as const) {
    if (env.ready === 'hang' || eventually) env.ready = 'yes';
    if (env.access === 'hang') env.access = 'yes';
    if (env.probe === 'hang') env.probe = 'yes';
  }
  if (r.a.env.ready !== 'yes' && r.b.env.ready !== 'yes') r.a.env.ready = 'yes';
  const settled = () => ['OK', 'BAD'].includes(r.a.state) && ['OK', 'BAD'].includes(r.b.state);
  const deliverAll = async () => {
    while (m.a.outbox.length > 0 || m.b.outbox.length > 0) {
      for (const from of ['a', 'b'] as const) {
        const d = new Deliver(from);
        if (d.check(m)) await d.run(m, r);
      }
    }
  };
  for (let round = 0; round < 40; round++) {
    await deliverAll();
    if (settled()) return;
    await new AdvanceTime().run(m, r);
    await deliverAll();
    await new GpuSend('a').run(m, r);
    await new GpuSend('b').run(m, r);
  }
}

describe('negotiation against the reference model', () => {
  test.prop([setup, fc.commands([command], { maxCommands: 40, size: 'medium' })], { numRuns: 200 })(
    'matches the model step by step; drained, both sides agree on OK or BAD',
    async (cfg, cmds) => {
      const { model, real } = build(cfg);
      try {
        await fc.asyncModelRun(() => ({ model, real }), cmds);
        await drain(model, real, cfg);
        const [a, b] = [real.a, real.b];
        expect(
          [a.state, b.state].every((s) => s === 'OK' || s === 'BAD'),
          `${a.n.path} / ${b.n.path}`,
        ).toBe(true);
        expect(a.state, `A ${a.n.path}, B ${b.n.path}`).toBe(b.state);
        expect(real.ab).toEqual([]);
        expect(real.ba).toEqual([]);
        if (a.state === 'OK') {
          // IPC only where both allow it, and each side knows the other's device.
          expect(a.n.context.options.ipc && b.n.context.options.ipc).toBe(true);
          expect(a.n.context.peerUuid).toBe(b.n.context.localUuid);
          expect(b.n.context.peerUuid).toBe(a.n.context.localUuid);
          if (cfg.sameGpu) expect(a.n.context.options.sameGpuIpc || b.n.context.options.sameGpuIpc).toBe(true);
        }
        // Nothing hangs: no timer or check can move either side any more.
        const before = [a.sent.length, b.sent.length];
        real.clock.increment(PAST_ALL_TIMEOUTS);
        await flush();
        expect([a.sent.length, b.sent.length]).toEqual(before);
      } finally {
        real.stop();
      }
    },
  );
});
