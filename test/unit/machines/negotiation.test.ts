/**
 * Unit tests of each negotiation rule (machines/negotiation.ts) through the
 * Negotiator wrapper, two sides wired by hand-drained FIFO queues, time on an
 * XState SimulatedClock (one test uses vitest's fake timers on the default clock).
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { createActor, fromPromise } from 'xstate';
import {
  NEGOTIATION_STATES,
  createNegotiator,
  negotiationMachine,
  statePath,
  type NegotiationState,
  type CheckPeerAccessInput,
  type CheckReadyInput,
  type OpenProbeInput,
  type ReadyCheck,
} from '../../../machines/index.js';
import { SmcudaError } from '../../../src/errors.js';
import { FrameType, type NegotiationFrame } from '../../../src/wire/frames.js';
import { Pair, flush, probeOf } from '../../helpers/negotiation-harness.js';

const T = { requestTimeoutMs: 100, confirmTimeoutMs: 200, checkTimeoutMs: 50 };
const LONG = 1_000; // past every timeout above

/** Delivers every frame in flight, both ways, settling checks in between, until quiet. */
async function exchange(p: Pair): Promise<void> {
  await flush();
  while (p.deliver('a') || p.deliver('b')) await flush();
}

const req = (attempt: number, deviceUuid = 'GPU-peer'): NegotiationFrame => ({ type: FrameType.IPC_REQ, attempt, deviceUuid, probe: probeOf(deviceUuid) });
/** ACK(ok) carrying the answering side's probe. */
const ackOk = (attempt: number, deviceUuid = 'GPU-x'): NegotiationFrame => ({
  type: FrameType.IPC_ACK,
  attempt,
  ok: true,
  deviceUuid,
  probe: probeOf(deviceUuid),
});

/** The machine with its effects provided the XState way: frames into `sent`, ready on `uuid`, every check yes. */
function provided(sent: NegotiationFrame[], uuid: string) {
  return negotiationMachine.provide({
    actions: { send: (_, { frame }) => void sent.push(frame) },
    actors: {
      checkReady: fromPromise<ReadyCheck, CheckReadyInput>(async () => ({ ready: true, deviceUuid: uuid, probe: probeOf(uuid) })),
      checkPeerAccess: fromPromise<boolean, CheckPeerAccessInput>(async () => true),
      openProbe: fromPromise<void, OpenProbeInput>(async () => {}),
    },
  });
}

describe('negotiation: the happy path', () => {
  it('A asks, B checks peer access and answers yes, A confirms: both OK', async () => {
    const p = new Pair({ aOptions: T, bOptions: T });
    const bStates: NegotiationState[] = [];
    p.b.n.onStateChange((s) => bStates.push(s));
    p.a.n.gpuSend();
    await flush();
    expect(p.a.state).toBe('SENT');
    expect(p.ab).toEqual([{ type: FrameType.IPC_REQ, attempt: 1, deviceUuid: 'GPU-aaaa', probe: probeOf('GPU-aaaa') }]);
    await exchange(p);
    expect([p.a.state, p.b.state]).toEqual(['OK', 'OK']);
    expect(p.a.n.ok && p.b.n.ok).toBe(true);
    expect(p.a.n.path).toBe('INIT→SENT→OK');
    expect(p.b.n.path).toBe('INIT→ACKING→ACKED→OK');
    // Every state entered is reported, even ACKING which passes by inside one step.
    expect(bStates).toEqual(['ACKING', 'ACKED', 'OK']);
    expect(p.b.accessAsked).toEqual(['GPU-aaaa']);
    expect(p.a.sentTypes).toEqual(['IPC_REQ', 'IPC_CONFIRM']);
    expect(p.b.sent.map((r) => r.frame)).toEqual([{ type: FrameType.IPC_ACK, attempt: 1, ok: true, deviceUuid: 'GPU-bbbb', probe: probeOf('GPU-bbbb') }]);
    expect(p.a.n.context.peerUuid).toBe('GPU-bbbb');
    expect(p.b.n.context.peerUuid).toBe('GPU-aaaa');
    expect(p.a.n.tries).toBe(1);
    expect(p.b.n.tries).toBe(0);
  });

  it('same GPU (same UUID): yes without asking the driver about peer access', async () => {
    const p = new Pair({ aEnv: { uuid: 'GPU-same' }, bEnv: { uuid: 'GPU-same', access: 'no' } });
    p.a.n.gpuSend();
    await exchange(p);
    expect([p.a.state, p.b.state]).toEqual(['OK', 'OK']);
    expect(p.b.accessAsked).toEqual([]);
  });

  it('inFlight from the GPU send (or the request) until settled; whenIdle runs then, or at once', async () => {
    const p = new Pair();
    const idle: string[] = [];
    p.a.n.whenIdle(() => idle.push('before'));
    expect(idle).toEqual(['before']);
    p.a.n.gpuSend();
    expect(p.a.n.inFlight).toBe(true);
    p.a.n.whenIdle(() => idle.push(`a ${p.a.state}`));
    await flush();
    p.deliver('a');
    await flush();
    expect(p.b.n.inFlight).toBe(true);
    p.b.n.whenIdle(() => idle.push(`b ${p.b.state}`));
    await exchange(p);
    expect([p.a.n.inFlight, p.b.n.inFlight]).toEqual([false, false]);
    expect(idle.sort()).toEqual(['a OK', 'b OK', 'before']);
  });

  it('settled() resolves with the outcome, at once when already settled', async () => {
    const p = new Pair();
    const settled = p.a.n.settled();
    p.a.n.gpuSend();
    await exchange(p);
    await expect(settled).resolves.toBe('OK');
    await expect(p.b.n.settled()).resolves.toBe('OK');
  });
});

describe('negotiation: answering no', () => {
  it('same GPU with sameGpuIpc off on the answering side: ACK(no), both BAD', async () => {
    const p = new Pair({ aEnv: { uuid: 'GPU-same' }, bEnv: { uuid: 'GPU-same' }, bOptions: { sameGpuIpc: false } });
    p.a.n.gpuSend();
    await exchange(p);
    expect([p.a.state, p.b.state]).toEqual(['BAD', 'BAD']);
    expect(p.b.n.context.reasonCode).toBe('SAME_GPU_DISABLED');
    expect(p.a.n.context.reasonCode).toBe('PEER_REFUSED');
    expect(p.b.sent[0]!.frame).toMatchObject({ type: FrameType.IPC_ACK, ok: false, attempt: 1 });
  });

  it.each([
    ['no', 'NO_PEER_ACCESS'],
    ['throw', 'NO_PEER_ACCESS'],
  ] as const)('peer access %s: ACK(no), both BAD', async (access, code) => {
    const p = new Pair({ bEnv: { access } });
    p.a.n.gpuSend();
    await exchange(p);
    expect([p.a.state, p.b.state]).toEqual(['BAD', 'BAD']);
    expect(p.b.n.context.reasonCode).toBe(code);
    expect(p.b.n.path).toBe('INIT→ACKING→BAD');
  });

  it('a peer-access check that never answers times out into ACK(no)', async () => {
    const p = new Pair({ bEnv: { access: 'hang' }, aOptions: T, bOptions: T });
    p.a.n.gpuSend();
    await exchange(p);
    expect(p.b.state).toBe('ACKING');
    p.clock.increment(T.checkTimeoutMs);
    await exchange(p);
    expect([p.a.state, p.b.state]).toEqual(['BAD', 'BAD']);
    expect(p.b.n.context.reasonCode).toBe('CHECK_TIMEOUT');
  });

  it('a request naming no device is refused', async () => {
    const p = new Pair();
    p.b.n.receive(req(1, ''));
    await flush();
    expect(p.b.state).toBe('BAD');
    expect(p.ba).toEqual([{ type: FrameType.IPC_ACK, attempt: 1, ok: false, deviceUuid: 'GPU-bbbb' }]);
  });
});

describe('negotiation: IPC off', () => {
  it('off on the sender: the first GPU send goes BAD and aborts; the peer follows', async () => {
    const p = new Pair({ aOptions: { ipc: false } });
    p.a.n.gpuSend();
    await flush();
    expect(p.a.state).toBe('BAD');
    expect(p.a.n.context.reasonCode).toBe('IPC_DISABLED');
    expect(p.a.readyChecks).toBe(0);
    expect(p.ab.map((f) => f.type)).toEqual([FrameType.IPC_ABORT]);
    await exchange(p);
    expect(p.b.state).toBe('BAD');
    expect(p.b.n.context.reasonCode).toBe('PEER_ABORTED');
    expect(p.b.n.context.reason).toContain('IPC_DISABLED');
    expect(p.b.sent).toEqual([]);
  });

  it('off on the receiver: a request is answered ACK(no) without any driver check', async () => {
    const p = new Pair({ bOptions: { ipc: false } });
    p.a.n.gpuSend();
    await exchange(p);
    expect([p.a.state, p.b.state]).toEqual(['BAD', 'BAD']);
    expect(p.b.readyChecks).toBe(0);
    expect(p.b.accessAsked).toEqual([]);
    expect(p.b.sent[0]!.frame).toMatchObject({ type: FrameType.IPC_ACK, ok: false });
  });
});

describe('negotiation: NOT_READY and tries', () => {
  it('a peer without CUDA answers NOTREADY; the requester retries on its next GPU send', async () => {
    const p = new Pair({ bEnv: { ready: 'no' } });
    p.a.n.gpuSend();
    await exchange(p);
    expect([p.a.state, p.b.state]).toEqual(['INIT', 'INIT']);
    expect(p.b.sent.map((r) => r.frame)).toEqual([{ type: FrameType.IPC_NOTREADY, attempt: 1 }]);
    expect(p.a.n.path).toBe('INIT→SENT→INIT');
    expect(p.a.n.inFlight).toBe(false); // sends held for it go (by staging)
    p.b.env.ready = 'yes';
    p.a.n.gpuSend();
    await flush();
    expect(p.ab).toEqual([{ type: FrameType.IPC_REQ, attempt: 2, deviceUuid: 'GPU-aaaa', probe: probeOf('GPU-aaaa') }]);
    await exchange(p);
    expect([p.a.state, p.b.state]).toEqual(['OK', 'OK']);
    expect(p.a.n.tries).toBe(2);
  });

  it('gives up after maxTries NOTREADYs: BAD, ABORT, the peer follows', async () => {
    const p = new Pair({ aOptions: { maxTries: 3 }, bEnv: { ready: 'no' } });
    for (let i = 0; i < 3; i++) {
      p.a.n.gpuSend();
      await exchange(p);
    }
    expect([p.a.state, p.b.state]).toEqual(['BAD', 'BAD']);
    expect(p.a.n.context.reasonCode).toBe('TRIES_EXHAUSTED');
    expect(p.a.sentTypes).toEqual(['IPC_REQ', 'IPC_REQ', 'IPC_REQ', 'IPC_ABORT']);
    expect(p.a.n.tries).toBe(3);
    p.a.n.gpuSend();
    await flush();
    expect(p.a.sent).toHaveLength(4);
  });

  it('maxTries 0: the first GPU send goes BAD', async () => {
    const p = new Pair({ aOptions: { maxTries: 0 } });
    p.a.n.gpuSend();
    await flush();
    expect(p.a.state).toBe('BAD');
    expect(p.a.sentTypes).toEqual(['IPC_ABORT']);
    expect(p.a.n.tries).toBe(0);
  });

  it.each(['no', 'throw'] as const)('a sender whose own readiness check says %s stays INIT and sends nothing', async (ready) => {
    const p = new Pair({ aEnv: { ready } });
    p.a.n.gpuSend();
    await flush();
    expect(p.a.state).toBe('INIT');
    expect(p.a.sent).toEqual([]);
    expect(p.a.n.tries).toBe(0);
  });

  it('a readiness check that hangs is bounded: back to idle after checkTimeoutMs; GPU sends meanwhile do nothing', async () => {
    const p = new Pair({ aEnv: { ready: 'hang' }, aOptions: T });
    p.a.n.gpuSend();
    p.a.n.gpuSend();
    await flush();
    expect(p.a.detailed).toBe('INIT.checkingSend');
    expect(p.a.readyChecks).toBe(1);
    expect(p.a.n.inFlight).toBe(true);
    p.clock.increment(T.checkTimeoutMs);
    expect(p.a.detailed).toBe('INIT');
    expect(p.a.n.inFlight).toBe(false);
    expect(p.a.sent).toEqual([]);
  });

  it('a receiver whose readiness check hangs answers NOTREADY after checkTimeoutMs', async () => {
    const p = new Pair({ bEnv: { ready: 'hang' }, bOptions: T, aOptions: T });
    p.a.n.gpuSend();
    await exchange(p);
    expect(p.b.detailed).toBe('INIT.checkingRequest');
    p.clock.increment(T.checkTimeoutMs);
    await exchange(p);
    expect(p.b.sent.map((r) => r.frame)).toEqual([{ type: FrameType.IPC_NOTREADY, attempt: 1 }]);
    expect([p.a.state, p.b.state]).toEqual(['INIT', 'INIT']);
  });
});

describe('negotiation: both sides at once', () => {
  it('both request: the lower id wins, the other abandons its request and answers', async () => {
    const p = new Pair(); // 'a' < 'b'
    p.a.n.gpuSend();
    p.b.n.gpuSend();
    await flush();
    expect([p.a.state, p.b.state]).toEqual(['SENT', 'SENT']);
    await exchange(p);
    expect([p.a.state, p.b.state]).toEqual(['OK', 'OK']);
    expect(p.a.n.path).toBe('INIT→SENT→OK');
    expect(p.b.n.path).toBe('INIT→SENT→ACKING→ACKED→OK');
    expect(p.a.n.context.ignored).toBe(1); // B's request
    expect(p.b.sent.map((r) => r.frame.type)).toEqual([FrameType.IPC_REQ, FrameType.IPC_ACK]);
    expect(p.b.sent[1]!.frame).toMatchObject({ attempt: 1, ok: true });
  });

  it('with the ids the other way round, B wins', async () => {
    const p = new Pair({ aId: 'z-host', bId: 'b-host' });
    p.a.n.gpuSend();
    p.b.n.gpuSend();
    await exchange(p);
    expect([p.a.state, p.b.state]).toEqual(['OK', 'OK']);
    expect(p.a.n.path).toBe('INIT→SENT→ACKING→ACKED→OK');
    expect(p.b.n.path).toBe('INIT→SENT→OK');
  });

  it('a request arriving while my readiness check runs: I answer it instead of asking', async () => {
    const p = new Pair({ aEnv: { ready: 'hang' } });
    p.a.n.gpuSend();
    p.b.n.gpuSend();
    await flush();
    expect(p.a.detailed).toBe('INIT.checkingSend');
    p.a.env.ready = 'yes';
    await exchange(p);
    expect([p.a.state, p.b.state]).toEqual(['OK', 'OK']);
    expect(p.a.sentTypes).toEqual(['IPC_ACK']);
  });
});

describe('negotiation: timeouts and lost peers', () => {
  it('SENT with no answer times out: BAD, ABORT; a peer in ACKED follows on ABORT', async () => {
    const p = new Pair({ aOptions: T, bOptions: { ...T, confirmTimeoutMs: 10 * LONG } });
    p.a.n.gpuSend();
    await flush();
    p.deliver('a'); // B answers, but the answer is "lost in a hung peer"
    await flush();
    expect(p.b.state).toBe('ACKED');
    p.clock.increment(T.requestTimeoutMs);
    expect(p.a.state).toBe('BAD');
    expect(p.a.n.context.reasonCode).toBe('REQUEST_TIMEOUT');
    expect(p.ab.map((f) => f.type)).toEqual([FrameType.IPC_ABORT]);
    await exchange(p); // the late ACK reaches A in BAD: ignored
    expect([p.a.state, p.b.state]).toEqual(['BAD', 'BAD']);
    expect(p.a.n.context.ignored).toBe(1);
  });

  it('ACKED with no CONFIRM times out: BAD, ABORT', async () => {
    const p = new Pair({ aOptions: T, bOptions: T });
    p.a.n.gpuSend();
    await flush();
    p.deliver('a');
    await flush();
    p.clock.increment(T.confirmTimeoutMs);
    expect(p.b.state).toBe('BAD');
    expect(p.b.n.context.reasonCode).toBe('CONFIRM_TIMEOUT');
    expect(p.ba.map((f) => f.type)).toEqual([FrameType.IPC_ACK, FrameType.IPC_ABORT]);
  });

  it('works on the default clock too (vitest fake timers)', async () => {
    vi.useFakeTimers();
    try {
      const sent: NegotiationFrame[] = [];
      const n = createNegotiator({
        localId: 'a',
        peerId: 'b',
        options: T,
        send: (f) => sent.push(f),
        checkReady: async () => ({ ready: true, deviceUuid: 'GPU-x' }),
        checkPeerAccess: async () => true,
        openProbe: async () => {},
      });
      n.gpuSend();
      await vi.advanceTimersByTimeAsync(1);
      expect(n.state).toBe('SENT');
      await vi.advanceTimersByTimeAsync(T.requestTimeoutMs);
      expect(n.state).toBe('BAD');
      expect(sent.map((f) => f.type)).toEqual([FrameType.IPC_REQ, FrameType.IPC_ABORT]);
    } finally {
      vi.useRealTimers();
    }
  });

  it.each(['INIT', 'SENT', 'ACKED', 'OK'] as const)('PEER_LOST in %s: BAD, nothing sent, timers cancelled', async (where) => {
    const p = new Pair({ aOptions: T, bOptions: T });
    if (where !== 'INIT') {
      p.a.n.gpuSend();
      await flush();
      if (where !== 'SENT') {
        p.deliver('a');
        await flush();
        if (where === 'OK') await exchange(p);
      }
    }
    const side = where === 'ACKED' ? p.b : p.a;
    expect(side.state).toBe(where);
    const before = side.sent.length;
    side.n.peerLost();
    expect(side.state).toBe('BAD');
    expect(side.n.context.reasonCode).toBe('PEER_LOST');
    p.clock.increment(LONG);
    await flush();
    expect(side.sent.length).toBe(before);
  });

  it('IPC_ABORT takes any state to BAD silently; an ABORT in BAD is only counted', async () => {
    const p = new Pair({ aOptions: T });
    p.a.n.gpuSend();
    await flush();
    p.deliver('a');
    await exchange(p);
    expect(p.a.state).toBe('OK');
    const abort: NegotiationFrame = { type: FrameType.IPC_ABORT, reason: 'test' };
    p.a.n.receive(abort);
    expect(p.a.state).toBe('BAD');
    expect(p.a.n.context.reasonCode).toBe('PEER_ABORTED');
    p.a.n.receive(abort);
    expect(p.a.n.context.ignored).toBe(1);
    expect(p.a.sentTypes).toEqual(['IPC_REQ', 'IPC_CONFIRM']);
  });

  it('stop() cancels timers: nothing is sent afterwards', async () => {
    const p = new Pair({ aOptions: T });
    p.a.n.gpuSend();
    await flush();
    p.a.n.stop();
    p.clock.increment(LONG);
    expect(p.a.sentTypes).toEqual(['IPC_REQ']);
  });
});

describe('negotiation: requests in stable states, unexpected frames', () => {
  it('BAD answers any request with ACK(no), echoing its attempt, and stays BAD', async () => {
    const p = new Pair({ bOptions: { maxTries: 0 } });
    p.b.n.gpuSend();
    await flush();
    p.ba.length = 0;
    p.b.n.receive(req(4));
    expect(p.b.state).toBe('BAD');
    expect(p.ba).toEqual([{ type: FrameType.IPC_ACK, attempt: 4, ok: false, deviceUuid: '' }]);
  });

  it('OK + IPC_REQ (the peer lost its state): answer no and drop IPC', async () => {
    const p = new Pair();
    p.a.n.gpuSend();
    await exchange(p);
    p.a.n.receive(req(1, 'GPU-bbbb'));
    expect(p.a.state).toBe('BAD');
    expect(p.a.n.context.reasonCode).toBe('PROTOCOL');
    expect(p.ab).toEqual([{ type: FrameType.IPC_ACK, attempt: 1, ok: false, deviceUuid: 'GPU-aaaa' }]);
  });

  it('late and foreign frames are ignored and counted, never thrown', async () => {
    const p = new Pair();
    const n = p.a.n;
    n.receive(ackOk(1)); // INIT
    n.receive({ type: FrameType.IPC_NOTREADY, attempt: 1 }); // INIT
    n.receive({ type: FrameType.IPC_CONFIRM, attempt: 1 }); // INIT
    expect(n.state).toBe('INIT');
    n.gpuSend();
    await flush();
    n.receive(ackOk(7)); // wrong attempt
    n.receive({ type: FrameType.IPC_NOTREADY, attempt: 7 });
    expect(n.state).toBe('SENT');
    n.receive(ackOk(1));
    await flush(); // the peer's probe opens
    expect(n.state).toBe('OK');
    n.receive({ type: FrameType.IPC_CONFIRM, attempt: 1 }); // OK
    n.receive({ type: FrameType.IPC_ACK, attempt: 1, ok: false, deviceUuid: 'GPU-x' });
    expect(n.state).toBe('OK');
    expect(n.context.ignored).toBe(7);
  });

  it('ACKED ignores a CONFIRM for another attempt', async () => {
    const p = new Pair();
    p.b.n.receive(req(2, 'GPU-aaaa'));
    await flush();
    expect(p.b.state).toBe('ACKED');
    p.b.n.receive({ type: FrameType.IPC_CONFIRM, attempt: 1 });
    expect(p.b.state).toBe('ACKED');
    p.b.n.receive({ type: FrameType.IPC_CONFIRM, attempt: 2 });
    expect(p.b.state).toBe('OK');
  });
});

describe('negotiation: the machine and its wrapper', () => {
  it('has exactly the six states of the design at the top level', () => {
    expect(Object.keys(negotiationMachine.root.states)).toEqual([...NEGOTIATION_STATES]);
  });

  it('accepts raw { type: FRAME } events on a bare actor; statePath reads its path', async () => {
    const sent: NegotiationFrame[] = [];
    const actor = createActor(provided(sent, 'GPU-b'), { input: { localId: 'b', peerId: 'a' } }).start();
    actor.send({ type: 'FRAME', frame: req(1, 'GPU-a') });
    await flush();
    actor.send({ type: 'FRAME', frame: { type: FrameType.IPC_CONFIRM, attempt: 1 } });
    expect(statePath(actor)).toBe('INIT→ACKING→ACKED→OK');
    expect(sent).toEqual([{ type: FrameType.IPC_ACK, attempt: 1, ok: true, deviceUuid: 'GPU-b', probe: probeOf('GPU-b') }]);
    actor.stop();
  });

  it('a FRAME that is not a negotiation frame is counted and dropped; receive() refuses it with a ProtocolError', async () => {
    const sent: NegotiationFrame[] = [];
    const input = {
      localId: 'b',
      peerId: 'a',
      send: (f: NegotiationFrame) => sent.push(f),
      checkReady: async () => ({ ready: true, deviceUuid: 'GPU-b' }),
      checkPeerAccess: async () => true,
      openProbe: async () => {},
    };
    const actor = createActor(provided(sent, 'GPU-b'), { input: { localId: 'b', peerId: 'a' } }).start();
    const fin = { type: FrameType.FIN, seq: 1, status: 0, message: '' } as unknown as NegotiationFrame;
    actor.send({ type: 'FRAME', frame: fin });
    expect(actor.getSnapshot().context.ignored).toBe(1);
    expect(actor.getSnapshot().status).toBe('active');
    actor.stop();
    const n = createNegotiator(input);
    expect(() => n.receive(fin)).toThrow(/not a negotiation frame/);
    expect(n.state).toBe('INIT');
    n.stop();
  });

  it('the driver checks can be replaced with machine.provide({ actors })', async () => {
    const machine = negotiationMachine.provide({
      actors: {
        checkReady: fromPromise<ReadyCheck, CheckReadyInput>(async () => ({ ready: true, deviceUuid: 'GPU-provided' })),
      },
    });
    const sent: NegotiationFrame[] = [];
    // checkReady is left out: the machine provides it (the effects given to the negotiator go on top).
    const n = createNegotiator({ machine, localId: 'a', peerId: 'b', send: (f) => sent.push(f) });
    n.gpuSend();
    await flush();
    expect(sent).toEqual([{ type: FrameType.IPC_REQ, attempt: 1, deviceUuid: 'GPU-provided' }]);
    n.stop();
  });

  it('a send that throws (channel gone) makes the negotiation BAD as a lost peer', async () => {
    const err = new Error('channel closed');
    const n = createNegotiator({
      localId: 'a',
      peerId: 'b',
      send: () => {
        throw err;
      },
      checkReady: async () => ({ ready: true, deviceUuid: 'GPU-x' }),
      checkPeerAccess: async () => true,
      openProbe: async () => {},
    });
    n.gpuSend();
    await flush();
    expect(n.state).toBe('BAD');
    expect(n.context.reasonCode).toBe('PEER_LOST');
    expect(n.sendError).toBe(err);
    n.stop();
  });

  it('driver checks that throw synchronously count as "not ready"', async () => {
    const sent: NegotiationFrame[] = [];
    const n = createNegotiator({
      localId: 'b',
      peerId: 'a',
      send: (f) => sent.push(f),
      checkReady: () => {
        throw new Error('no CUDA');
      },
      checkPeerAccess: () => {
        throw new Error('no peer');
      },
      openProbe: () => {
        throw new Error('no probe');
      },
    });
    n.gpuSend();
    n.receive(req(1, 'GPU-a'));
    await flush();
    expect(n.state).toBe('INIT');
    expect(sent).toEqual([{ type: FrameType.IPC_NOTREADY, attempt: 1 }]);
    n.stop();
  });

  it.each([
    [{ localId: 'x', peerId: 'x' }, /unique/],
    [{ localId: '', peerId: 'x' }, /non-empty/],
    [{ localId: 'a', peerId: 'b', options: { maxTries: -1 } }, /maxTries/],
    [{ localId: 'a', peerId: 'b', options: { requestTimeoutMs: 0 } }, /requestTimeoutMs/],
  ])('refuses bad parameters with a ConfigError: %j', (params, message) => {
    const make = () =>
      createNegotiator({
        send: () => {},
        checkReady: async () => ({ ready: true, deviceUuid: 'GPU-x' }),
        checkPeerAccess: async () => true,
        openProbe: async () => {},
        ...params,
      });
    expect(make).toThrow(SmcudaError);
    expect(make).toThrow(message);
    try {
      make();
    } catch (e) {
      expect((e as SmcudaError).code).toBe('SMCUDA_CONFIG');
    }
  });
});

afterEach(() => {
  vi.useRealTimers();
});
