/**
 * The RGET path on its own (src/paths/rget.ts): a sender side and a
 * receiver side, each a real EndpointLink over a recording channel on its
 * own simulated driver (two "processes" to the simulator, devices 0 and 1),
 * with the test carrying frames between them — no endpoint, no matching.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { DeviceBuffer } from '../../../src/buffers.js';
import type { StreamHandle } from '../../../src/cuda/driver.js';
import { ProtocolError, TruncationError } from '../../../src/errors.js';
import { RgetPath, type Resender } from '../../../src/paths/rget.js';
import type { Tracer } from '../../../src/trace.js';
import { restampRget } from '../../../src/wire/codec.js';
import { FinStatus, type Frame, FrameType, type RgetFrame } from '../../../src/wire/frames.js';
import { patternBytes, sameBytes } from '../../helpers/bytes.js';
import { pathSide, pendingRecv, type PathSide, until } from '../../helpers/path-harness.js';

const sides: PathSide[] = [];
function side(device: number, o: Parameters<typeof pathSide>[1] = {}): PathSide {
  const s = pathSide(device, { ipcOk: true, ...o });
  sides.push(s);
  return s;
}
afterEach(() => {
  for (const s of sides.splice(0)) s.close();
});

function deviceWith(s: PathSide, bytes: Uint8Array): DeviceBuffer {
  const ptr = s.driver.memAlloc(bytes.length);
  s.driver.memcpyHtoD(ptr, bytes);
  return { ptr, length: bytes.length };
}

function readBack(s: PathSide, buf: DeviceBuffer): Uint8Array {
  const out = new Uint8Array(buf.length);
  s.driver.memcpyDtoH(out, buf.ptr);
  return out;
}

const noResend: Resender = {
  countReason: () => {
    throw new Error('not expected');
  },
  resend: () => {
    throw new Error('not expected');
  },
};

function recordingTracer(): Tracer & { sent: Frame[] } {
  const sent: Frame[] = [];
  return { sent, frame: (_p, dir, f) => void (dir === 'send' && sent.push(f)), state: () => {}, cache: () => {}, close: () => {} };
}

describe('RgetPath, sender', () => {
  it('takes device data once IPC is OK', () => {
    const s = side(0, { ipcOk: false });
    const rget = new RgetPath(s.link, s.link.parts.rget, noResend);
    const buf = deviceWith(s, patternBytes(8, 1));
    expect(rget.canSend(buf)).toBe(false);
    s.link.ipcOk = true;
    expect(rget.canSend(buf)).toBe(true);
    expect(rget.canSend(new Uint8Array(8))).toBe(false);
  });

  it('announces the allocation, and a re-send from the same buffer is the same bytes with a new tag and seq — traced or not', async () => {
    for (const tracer of [undefined, recordingTracer()]) {
      const s = side(0, { tracer });
      const rget = new RgetPath(s.link, s.link.parts.rget, noResend);
      const buf = deviceWith(s, patternBytes(4096, 2));
      const sub = { ptr: buf.ptr + 1024n, length: 1000 };
      void rget.send(sub, 5, {});
      void rget.send(sub, 6, {});
      const [first, second] = s.bytes;
      const f1 = s.frames[0] as RgetFrame;
      expect(f1).toMatchObject({ type: FrameType.RGET, tag: 5, seq: 1, offset: 1024, length: 1000, allocSize: 4096, event: null });
      expect(f1.base).toBe(buf.ptr);
      // The template is kept (the fast path) whether a tracer is attached or not.
      expect(s.link.exports.lookup(sub.ptr).rget?.length).toBe(1000);
      expect(sameBytes(second!, restampRget(first!, 6, 2))).toBe(true);
      expect(s.frames[1]).toEqual({ ...f1, tag: 6, seq: 2 });
      if (tracer) expect(tracer.sent).toEqual([f1, { ...f1, tag: 6, seq: 2 }]);
      expect(s.link.sends.get(2)).toMatchObject({ tag: 6, length: 1000, path: 'rget' });
    }
  });

  it('with a stream, announces an IPC event and keeps no template', () => {
    const s = side(0);
    const rget = new RgetPath(s.link, s.link.parts.rget, noResend);
    const buf = deviceWith(s, patternBytes(64, 3));
    void rget.send(buf, 1, { stream: s.link.gpu().stream });
    expect((s.frames[0] as RgetFrame).event).toBeInstanceOf(Uint8Array);
    expect(s.link.exports.lookup(buf.ptr).rget).toBeUndefined();
  });

  it('refuses a buffer that runs past its allocation before anything is announced', () => {
    const s = side(0);
    const rget = new RgetPath(s.link, s.link.parts.rget, noResend);
    const buf = deviceWith(s, patternBytes(64, 3));
    expect(() => rget.send({ ptr: buf.ptr + 32n, length: 64 }, 1, {})).toThrow(RangeError);
    expect(s.frames).toEqual([]);
  });

  it("FIN RESTAGE hands the send to its fallback, which announces it again, the peer's reason counted; a RESTAGE for an unknown send is a protocol error", () => {
    const s = side(0);
    const resent: Array<[number, DeviceBuffer, StreamHandle | undefined]> = [];
    const why: string[] = [];
    const rget = new RgetPath(s.link, s.link.parts.rget, {
      countReason: (w) => void why.push(w),
      resend: (seq, buf, stream) => void resent.push([seq, buf, stream]),
    });
    const buf = deviceWith(s, patternBytes(64, 3));
    void rget.send(buf, 1, {});
    expect(rget.onFin(1, FinStatus.OK, '')).toBe(false); // the endpoint settles plain FINs
    expect(rget.onFin(1, FinStatus.RESTAGE, 'cannot open it')).toBe(true);
    expect(resent).toEqual([[1, buf, undefined]]);
    expect(why).toEqual(['legacy key restaged, the peer could not open it: cannot open it']); // stats().stagingReasons says why
    expect(s.link.sends.get(1)?.path).toBe('staging');
    expect(() => rget.onFin(1, FinStatus.RESTAGE, 'cannot open it')).toThrow(ProtocolError); // no second restage
    expect(() => rget.onFin(99, FinStatus.RESTAGE, 'cannot open it')).toThrow(ProtocolError);
  });

  it('a fallback that cannot resend fails the send and tells the receiver (FIN SENDER_FAILED)', async () => {
    const s = side(0);
    const rget = new RgetPath(s.link, s.link.parts.rget, {
      countReason: () => {},
      resend: () => {
        throw new RangeError('source freed');
      },
    });
    const buf = deviceWith(s, patternBytes(64, 3));
    const sent = rget.send(buf, 1, {});
    s.take();
    rget.onFin(1, FinStatus.RESTAGE, 'cannot open it');
    await expect(sent).rejects.toThrow('source freed');
    expect(s.take()).toEqual([{ type: FrameType.FIN, seq: 1, status: FinStatus.SENDER_FAILED, message: 'source freed' }]);
  });
});

describe('RgetPath, receiver', () => {
  async function announced(n = 4096, seed = 5) {
    const a = side(0);
    const b = side(1);
    const data = patternBytes(n, seed);
    const src = deviceWith(a, data);
    void new RgetPath(a.link, a.link.parts.rget, noResend).send(src, 3, {});
    return { a, b, data, frame: a.take()[0] as RgetFrame, rget: new RgetPath(b.link, b.link.parts.rget, noResend) };
  }

  it('copies out of the mapped allocation into a new device buffer, then FIN OK', async () => {
    const { b, data, frame, rget } = await announced();
    const r = pendingRecv(3);
    rget.receive(r.recv, frame);
    const got = await r.result;
    expect(got).toMatchObject({ tag: 3, length: 4096, path: 'rget', fromDevice: true });
    expect(sameBytes(readBack(b, got.data as DeviceBuffer), data)).toBe(true);
    await until(() => b.frames.length > 0, 'the FIN');
    expect(b.take()).toEqual([{ type: FrameType.FIN, seq: 1, status: FinStatus.OK, message: '' }]);
    expect(b.link.received.rget).toEqual({ messages: 1, bytes: 4096 });
  });

  it("on the caller's stream the receive resolves with its new buffer at once: the buffer is the caller's, never freed by a later failure (the FIN cannot be sent)", async () => {
    const { b, data, frame, rget } = await announced();
    const stream = b.driver.streamCreate();
    b.driver.inject({ copyDelayMs: 20 });
    b.link.fins.ok = () => {
      throw new Error('the channel failed');
    };
    const r = pendingRecv(3, undefined, stream);
    rget.receive(r.recv, frame);
    const got = await r.result; // before the copy completed
    b.driver.streamSynchronize(stream);
    await new Promise((resolve) => setTimeout(resolve, 50)); // the completion ran (its FIN failed)
    expect(sameBytes(readBack(b, got.data as DeviceBuffer), data)).toBe(true);
    expect(() => b.driver.memFree((got.data as DeviceBuffer).ptr)).not.toThrow(); // still allocated: the caller frees it
    expect(b.driver.lifetimeViolations).toEqual([]);
  });

  it('a second RGET of the same allocation finds its mapping pooled (one open), into host `into` bytes', async () => {
    const { b, data, frame, rget } = await announced(256, 6);
    const r1 = pendingRecv(3);
    rget.receive(r1.recv, frame);
    await r1.result;
    const host = new Uint8Array(300);
    const r2 = pendingRecv(3, host);
    rget.receive(r2.recv, { ...frame, seq: 2 });
    const got = (await r2.result).data as Uint8Array;
    expect(got.buffer).toBe(host.buffer);
    expect(sameBytes(got, data)).toBe(true);
    expect(b.link.pool.stats()).toMatchObject({ opens: 1, hits: 1 });
  });

  it('an `into` too small: FIN TRUNCATED, TruncationError, nothing copied', async () => {
    const { b, frame, rget } = await announced(100);
    const r = pendingRecv(3, new Uint8Array(99));
    rget.receive(r.recv, frame);
    await expect(r.result).rejects.toThrow(TruncationError);
    expect(b.take()).toMatchObject([{ type: FrameType.FIN, seq: 1, status: FinStatus.TRUNCATED }]);
    expect(b.link.pool.stats().opens).toBe(0);
  });

  it('bytes past the mapping: the receive fails alone with FIN REFUSED', async () => {
    const { b, frame, rget } = await announced(100);
    const r = pendingRecv(3);
    rget.receive(r.recv, { ...frame, offset: 90, length: 20 });
    await expect(r.result).rejects.toThrow(ProtocolError);
    await until(() => b.frames.length > 0, 'the FIN');
    expect(b.take()).toMatchObject([{ type: FrameType.FIN, seq: 1, status: FinStatus.REFUSED }]);
  });

  it('a handle that cannot be mapped: FIN RESTAGE, and the receive waits for the same message by staging', async () => {
    const { b, frame, rget } = await announced(100);
    b.driver.inject({ ipcOpenFails: 'CUDA_ERROR_OUT_OF_MEMORY' });
    const r = pendingRecv(3);
    rget.receive(r.recv, frame);
    await until(() => b.frames.length > 0, 'the FIN');
    expect(b.take()).toMatchObject([{ type: FrameType.FIN, seq: 1, status: FinStatus.RESTAGE }]);
    expect(b.link.resends.get(1)).toBe(r.recv);
  });

  it("close rejects a receive waiting for the sender's stream event (the endpoint's GpuEventQueue fails the wait)", async () => {
    const a = side(0);
    const b = side(1);
    const src = deviceWith(a, patternBytes(64, 7));
    void new RgetPath(a.link, a.link.parts.rget, noResend).send(src, 1, { stream: a.link.gpu().stream });
    const frame = a.take()[0] as RgetFrame;
    const rget = new RgetPath(b.link, b.link.parts.rget, noResend);
    const r = pendingRecv(1);
    // An event that has not completed: recorded behind a long simulated copy.
    a.driver.inject({ copyDelayMs: 300 });
    const ev = a.driver.eventCreate({ interprocess: true, disableTiming: true });
    const slow = deviceWith(a, new Uint8Array(64));
    a.driver.memcpyAsync(slow.ptr, src.ptr, 64, a.link.gpu().stream);
    a.driver.eventRecord(ev, a.link.gpu().stream);
    rget.receive(r.recv, { ...frame, event: a.driver.ipcGetEventHandle(ev) });
    await new Promise((res) => setTimeout(res, 20));
    // As Endpoint.shutdown closes: the paths, then the link, whose GpuEventQueue owns the wait and fails it.
    const reason = new Error('closing');
    b.link.closedWith = null;
    b.link.closeReason = reason;
    rget.close(reason);
    b.link.close();
    await expect(r.result).rejects.toThrow('closing');
    expect(b.driver.lifetimeViolations).toEqual([]);
  });
});
