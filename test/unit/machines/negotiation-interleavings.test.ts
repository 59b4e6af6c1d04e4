/**
 * Two live negotiations whose every asynchronous step is ordered by
 * fast-check's scheduler: each frame delivery (FIFO per direction, as on a
 * real channel), each driver-check answer (readiness, peer access), each GPU
 * send and each "time passes beyond every timeout". Whatever the order:
 *  - once everything in flight has landed, neither side waits in SENT,
 *    ACKING or ACKED (nothing deadlocks even without timeouts);
 *  - with at least one side eventually ready, both end OK or both BAD;
 *  - tries stay within the limit and every frame is sent by a transition
 *    that allows it.
 */
import { describe, expect } from 'vitest';
import { fc, test } from '@fast-check/vitest';
import type { NegotiationConfig } from '../../../machines/index.js';
import { SimulatedClock } from 'xstate';
import { FrameType, type NegotiationFrame } from '../../../src/wire/frames.js';
import { Side, allowedSend, probeOf } from '../../helpers/negotiation-harness.js';

const TIMEOUTS = { requestTimeoutMs: 100, confirmTimeoutMs: 150, checkTimeoutMs: 50 };
const PAST_ALL_TIMEOUTS = 1_000;

/** A driver check's answer: yes, no, or a failure (rejected promise). */
type Answer = boolean | 'throw';
const answer: fc.Arbitrary<Answer> = fc.oneof(
  { arbitrary: fc.constant<Answer>(true), weight: 4 },
  { arbitrary: fc.constantFrom<Answer>(false, 'throw'), weight: 2 },
);

const options: fc.Arbitrary<Partial<NegotiationConfig>> = fc.record({
  ipc: fc.oneof({ arbitrary: fc.constant(true), weight: 8 }, { arbitrary: fc.constant(false), weight: 1 }),
  sameGpuIpc: fc.boolean(),
  maxTries: fc.oneof({ arbitrary: fc.constant(5), weight: 3 }, { arbitrary: fc.integer({ min: 1, max: 4 }), weight: 2 }),
});

const sideScenario = fc.record({
  options,
  /** Successive answers of checkReady; after them, `finallyReady`. */
  ready: fc.array(answer, { maxLength: 4 }),
  finallyReady: fc.boolean(),
  access: answer,
  /** Opening the other side's IPC probe: true reads it back, false reads another value, 'throw' the open fails. */
  probe: answer,
  /** GPU sends scheduled at the start. */
  sends: fc.integer({ min: 0, max: 3 }),
});

const scenario = fc.record({
  a: sideScenario,
  b: sideScenario,
  sameGpu: fc.boolean(),
  aLower: fc.boolean(),
  /**
   * "Time passes beyond every timeout": one such task is scheduled when the
   * k-th frame (counting both directions from 0) is sent, for each k here, so
   * that timeouts race with every stage of the handshake.
   */
  ticksAtFrame: fc.uniqueArray(fc.nat(6), { maxLength: 2 }),
});

type Scenario = typeof scenario extends fc.Arbitrary<infer T> ? T : never;

function wire(s: fc.Scheduler, sc: Scenario) {
  const clock = new SimulatedClock();
  const queues: Record<'a' | 'b', NegotiationFrame[]> = { a: [], b: [] };
  const sides = {} as Record<'a' | 'b', Side>;
  let framesSent = 0;
  const [aId, bId] = sc.aLower ? ['node-1', 'node-2'] : ['node-2', 'node-1'];
  // Somebody initialises CUDA eventually, or nothing could ever settle.
  const finallyReady = { a: sc.a.finallyReady || !sc.b.finallyReady, b: sc.b.finallyReady };

  for (const which of ['a', 'b'] as const) {
    const other = which === 'a' ? 'b' : 'a';
    const cfg = sc[which];
    const uuid = sc.sameGpu ? 'GPU-same' : `GPU-${which}`;
    const readyAnswers = [...cfg.ready];
    sides[which] = new Side({
      id: which === 'a' ? aId : bId,
      peerId: which === 'a' ? bId : aId,
      options: { ...cfg.options, ...TIMEOUTS },
      env: { ready: 'yes', access: 'yes', uuid },
      clock,
      onSend: (frame) => {
        if (sc.ticksAtFrame.includes(framesSent++)) {
          void s.schedule(Promise.resolve(), 'time passes').then(() => clock.increment(PAST_ALL_TIMEOUTS));
        }
        queues[which].push(frame);
        // Any scheduled delivery takes the head of the queue: the channel stays FIFO
        // whichever delivery task the scheduler releases first.
        void s.schedule(Promise.resolve(), `${which}→${other} ${FrameType[frame.type]}`).then(() => {
          const f = queues[which].shift();
          if (f) sides[other].n.receive(f);
        });
      },
      checkReady: s.scheduleFunction(async function checkReady() {
        const r = readyAnswers.length > 0 ? readyAnswers.shift()! : finallyReady[which];
        if (r === 'throw') throw new Error('simulated cuInit failure');
        return r ? { ready: r, deviceUuid: uuid, probe: probeOf(uuid) } : { ready: r, deviceUuid: '' };
      }),
      openProbe: s.scheduleFunction(async function openProbe(_peerUuid: string, _probe: Uint8Array) {
        if (cfg.probe === 'throw') throw new Error('simulated cuIpcOpenMemHandle failure');
        if (!cfg.probe) throw new Error("the peer's probe read back another value");
      }),
      checkPeerAccess: s.scheduleFunction(async function checkPeerAccess(_peerUuid: string) {
        if (cfg.access === 'throw') throw new Error('simulated cuDeviceCanAccessPeer failure');
        return cfg.access;
      }),
    });
  }
  return { clock, queues, sides };
}

describe('negotiation under scheduled interleavings', () => {
  test.prop([fc.scheduler(), scenario], { numRuns: 200 })('two live endpoints always agree: both OK or both BAD', async (s, sc) => {
    const { queues, sides } = wire(s, sc);
    const { a, b } = sides;
    try {
      for (const which of ['a', 'b'] as const) {
        for (let i = 0; i < sc[which].sends; i++) {
          void s.schedule(Promise.resolve(), `${which}.gpuSend`).then(() => sides[which].n.gpuSend());
        }
      }
      await s.waitIdle();

      const settled = () => [a.state, b.state].every((st) => st === 'OK' || st === 'BAD');
      for (let round = 0; round < 30 && !settled(); round++) {
        // Everything has landed: nobody may be left waiting for an answer.
        expect(['SENT', 'ACKING', 'ACKED']).not.toContain(a.state);
        expect(['SENT', 'ACKING', 'ACKED']).not.toContain(b.state);
        a.n.gpuSend();
        b.n.gpuSend();
        await s.waitIdle();
      }

      expect(settled(), `A ${a.n.path} / B ${b.n.path}`).toBe(true);
      expect(a.state, `A ${a.n.path} / B ${b.n.path}`).toBe(b.state);
      expect(queues.a).toEqual([]);
      expect(queues.b).toEqual([]);
      for (const side of [a, b]) {
        expect(side.n.tries).toBeLessThanOrEqual(side.n.context.options.maxTries);
        for (const rec of side.sent) {
          expect(allowedSend(rec.before, rec.after, rec.frame), `${FrameType[rec.frame.type]} on ${rec.before}→${rec.after}`).toBe(true);
        }
      }
      if (a.state === 'OK') {
        expect(a.n.context.options.ipc && b.n.context.options.ipc).toBe(true);
        expect(a.n.context.peerUuid).toBe(b.n.context.localUuid);
        expect(b.n.context.peerUuid).toBe(a.n.context.localUuid);
      }
    } finally {
      a.n.stop();
      b.n.stop();
    }
  });
});
