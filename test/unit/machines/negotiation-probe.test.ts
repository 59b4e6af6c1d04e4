/**
 * Issue 16 item 13: OK means IPC works between the two processes. Each side's
 * IPC_REQ / IPC_ACK(ok) carries a probe that the other opens and reads back
 * before it answers yes (ACKING) or confirms (SENT); if that fails both sides
 * end BAD, still within the same 1.5 round trips.
 * Issue 17 item 5: the machine's effects are provided with `.provide()`, its
 * context is plain data, and a persisted snapshot restores and continues.
 */
import { describe, expect, it } from 'vitest';
import { createActor, fromPromise } from 'xstate';
import {
  negotiationMachine,
  topState,
  type CheckPeerAccessInput,
  type CheckReadyInput,
  type OpenProbeInput,
  type ReadyCheck,
} from '../../../machines/index.js';
import { FrameType, type NegotiationFrame } from '../../../src/wire/frames.js';
import { Pair, flush, probeOf } from '../../helpers/negotiation-harness.js';

const T = { requestTimeoutMs: 100, confirmTimeoutMs: 200, checkTimeoutMs: 50 };

async function exchange(p: Pair): Promise<void> {
  await flush();
  while (p.deliver('a') || p.deliver('b')) await flush();
}

describe('the IPC probe in the negotiation', () => {
  it("each side opens the other's probe (the device it names, the bytes it sent) before OK; 1.5 round trips", async () => {
    const p = new Pair({ aOptions: T, bOptions: T });
    p.a.n.gpuSend();
    await exchange(p);
    expect([p.a.state, p.b.state]).toEqual(['OK', 'OK']);
    expect(p.b.probesOpened).toEqual([{ uuid: 'GPU-aaaa', probe: probeOf('GPU-aaaa') }]); // from IPC_REQ, before ACK(ok)
    expect(p.a.probesOpened).toEqual([{ uuid: 'GPU-bbbb', probe: probeOf('GPU-bbbb') }]); // from IPC_ACK, before CONFIRM
    // REQ →, ← ACK, CONFIRM →: no extra frame.
    expect([...p.a.sentTypes, ...p.b.sentTypes].sort()).toEqual(['IPC_ACK', 'IPC_CONFIRM', 'IPC_REQ']);
    // The answering side checked the probe before it said yes: its ACK(ok) was sent leaving ACKING.
    expect(p.b.sent[0]!.before).toBe('ACKING');
  });

  it('same GPU: the probe is opened too (a container may still not share IPC)', async () => {
    const p = new Pair({ aEnv: { uuid: 'GPU-same' }, bEnv: { uuid: 'GPU-same', probe: 'throw' } });
    p.a.n.gpuSend();
    await exchange(p);
    expect([p.a.state, p.b.state]).toEqual(['BAD', 'BAD']);
    expect(p.b.n.context.reasonCode).toBe('PROBE_FAILED');
  });

  it.each(['throw', 'no'] as const)("the answering side cannot open the requester's probe (%s): ACK(no), both BAD", async (mode) => {
    const p = new Pair({ aOptions: T, bOptions: T, bEnv: { probe: mode } });
    p.a.n.gpuSend();
    await exchange(p);
    expect([p.a.state, p.b.state]).toEqual(['BAD', 'BAD']);
    expect(p.b.n.context.reasonCode).toBe('PROBE_FAILED');
    expect(p.b.n.context.reason).toMatch(mode === 'no' ? /read back another value/ : /simulated driver failure/);
    expect(p.a.n.context.reasonCode).toBe('PEER_REFUSED');
    expect(p.b.sent.map((r) => r.frame)).toEqual([{ type: FrameType.IPC_ACK, attempt: 1, ok: false, deviceUuid: 'GPU-bbbb' }]);
  });

  it("the requester cannot open the answering side's probe: ABORT instead of CONFIRM, both BAD", async () => {
    const p = new Pair({ aOptions: T, bOptions: T, aEnv: { probe: 'throw' } });
    p.a.n.gpuSend();
    await exchange(p);
    expect([p.a.state, p.b.state]).toEqual(['BAD', 'BAD']);
    expect(p.a.sentTypes).toEqual(['IPC_REQ', 'IPC_ABORT']);
    expect(p.a.n.context.reasonCode).toBe('PROBE_FAILED');
    expect(p.b.n.context.reasonCode).toBe('PEER_ABORTED');
    expect(p.b.n.path).toBe('INIT→ACKING→ACKED→BAD');
  });

  it('an open that never finishes is bounded by checkTimeoutMs, on either side', async () => {
    for (const which of ['a', 'b'] as const) {
      const p = new Pair({ aOptions: T, bOptions: T, [`${which}Env`]: { probe: 'hang' } });
      p.a.n.gpuSend();
      await exchange(p);
      expect(p.side(which).state).not.toBe('OK');
      p.clock.increment(T.checkTimeoutMs);
      await exchange(p);
      expect([p.a.state, p.b.state]).toEqual(['BAD', 'BAD']);
      expect(p.side(which).n.context.reasonCode).toBe('PROBE_FAILED');
      p.stop();
    }
  });

  it('a request or an ACK(ok) without a probe is refused, whichever side it comes from', async () => {
    const p = new Pair({ aOptions: T, bOptions: T });
    const q = new Pair({ aOptions: T, bOptions: T });
    // Directly: B answers a probe-less request with no.
    p.b.n.receive({ type: FrameType.IPC_REQ, attempt: 1, deviceUuid: 'GPU-aaaa' });
    await flush();
    expect(p.b.state).toBe('BAD');
    expect(p.b.n.context.reason).toMatch(/the request carries no probe/);
    expect(p.ba).toEqual([{ type: FrameType.IPC_ACK, attempt: 1, ok: false, deviceUuid: 'GPU-bbbb' }]);
    // A gets a probe-less ACK(ok): ABORT.
    q.a.n.gpuSend();
    await flush();
    q.a.n.receive({ type: FrameType.IPC_ACK, attempt: 1, ok: true, deviceUuid: 'GPU-bbbb' });
    await flush();
    expect(q.a.state).toBe('BAD');
    expect(q.a.n.context.reason).toMatch(/the answer carries no probe/);
    expect(q.a.sentTypes).toEqual(['IPC_REQ', 'IPC_ABORT']);
    p.stop();
    q.stop();
  });
});

/** The machine with its effects provided: frames into `sent`; every check says yes unless told. */
function provided(sent: NegotiationFrame[], uuid: string, probeOk = true) {
  return negotiationMachine.provide({
    actions: { send: (_, { frame }) => void sent.push(frame) },
    actors: {
      checkReady: fromPromise<ReadyCheck, CheckReadyInput>(async () => ({ ready: true, deviceUuid: uuid, probe: probeOf(uuid) })),
      checkPeerAccess: fromPromise<boolean, CheckPeerAccessInput>(async () => true),
      openProbe: fromPromise<void, OpenProbeInput>(async () => {
        if (!probeOk) throw new Error('open failed');
      }),
    },
  });
}

describe('XState idiom: effects provided, context plain, snapshots restore', () => {
  it('an unprovided machine refuses to act: send throws (the actor errors) and the checks answer no', async () => {
    const actor = createActor(negotiationMachine, { input: { localId: 'a', peerId: 'b' } });
    const errors: unknown[] = [];
    actor.subscribe({ error: (e) => errors.push(e) });
    actor.start();
    actor.send({ type: 'GPU_SEND' });
    await flush();
    expect(topState(actor.getSnapshot())).toBe('INIT'); // checkReady not provided: not ready
    actor.send({ type: 'IPC_REQ', frame: { type: FrameType.IPC_REQ, attempt: 1, deviceUuid: 'GPU-b', probe: probeOf('GPU-b') } });
    await flush();
    expect(String(errors[0])).toMatch(/no send action was provided/); // NOTREADY could not be sent
  });

  it('the context is plain data: it survives JSON', async () => {
    const sent: NegotiationFrame[] = [];
    const actor = createActor(provided(sent, 'GPU-a'), { input: { localId: 'a', peerId: 'b', options: T } }).start();
    actor.send({ type: 'GPU_SEND' });
    await flush();
    const ctx = actor.getSnapshot().context;
    expect(JSON.parse(JSON.stringify(ctx))).toEqual(ctx);
    expect(Object.values(ctx).some((v) => typeof v === 'function')).toBe(false);
    expect(ctx.localProbe).toBe(Buffer.from(probeOf('GPU-a')).toString('hex'));
    actor.stop();
  });

  it('a requester persisted in SENT, restored from JSON, opens the probe of the ACK and confirms', async () => {
    const sent: NegotiationFrame[] = [];
    const first = createActor(provided(sent, 'GPU-a'), { input: { localId: 'a', peerId: 'b', options: T } }).start();
    first.send({ type: 'GPU_SEND' });
    await flush();
    expect(topState(first.getSnapshot())).toBe('SENT');
    const stored = JSON.stringify(first.getPersistedSnapshot());
    first.stop();

    const resent: NegotiationFrame[] = [];
    const again = createActor(provided(resent, 'GPU-a'), { snapshot: JSON.parse(stored), input: { localId: 'a', peerId: 'b', options: T } }).start();
    expect(topState(again.getSnapshot())).toBe('SENT');
    expect(again.getSnapshot().context.tries).toBe(1);
    again.send({ type: 'IPC_ACK', frame: { type: FrameType.IPC_ACK, attempt: 1, ok: true, deviceUuid: 'GPU-b', probe: probeOf('GPU-b') } });
    await flush();
    expect(topState(again.getSnapshot())).toBe('OK');
    expect(again.getSnapshot().context.path).toEqual(['INIT', 'SENT', 'OK']);
    expect(resent).toEqual([{ type: FrameType.IPC_CONFIRM, attempt: 1 }]);
    again.stop();
  });

  it('an answerer persisted in ACKED, restored, goes OK on the CONFIRM; restored with a failing probe machine, it keeps its state', async () => {
    const sent: NegotiationFrame[] = [];
    const first = createActor(provided(sent, 'GPU-b'), { input: { localId: 'b', peerId: 'a', options: T } }).start();
    first.send({ type: 'IPC_REQ', frame: { type: FrameType.IPC_REQ, attempt: 1, deviceUuid: 'GPU-a', probe: probeOf('GPU-a') } });
    await flush();
    expect(topState(first.getSnapshot())).toBe('ACKED');
    const stored = JSON.parse(JSON.stringify(first.getPersistedSnapshot()));
    first.stop();
    // Other effects, same state: the snapshot carries data only.
    const again = createActor(provided([], 'GPU-b', false), { snapshot: stored, input: { localId: 'b', peerId: 'a', options: T } }).start();
    expect(again.getSnapshot().context.peerProbe).toBe(Buffer.from(probeOf('GPU-a')).toString('hex'));
    again.send({ type: 'IPC_CONFIRM', frame: { type: FrameType.IPC_CONFIRM, attempt: 1 } });
    expect(topState(again.getSnapshot())).toBe('OK');
    again.stop();
  });
});
