/**
 * The EAGER path on its own (src/paths/eager.ts): driven through a real
 * EndpointLink over a recording channel on the simulated driver, without an
 * endpoint or matching (test/helpers/path-harness.ts).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { isDeviceBuffer, type DeviceBuffer } from '../../../src/buffers.js';
import { TruncationError } from '../../../src/errors.js';
import { EagerPath } from '../../../src/paths/eager.js';
import { receiveTarget } from '../../../src/paths/receive-target.js';
import { type EagerFrame, FrameType } from '../../../src/wire/frames.js';
import { patternBytes, sameBytes } from '../../helpers/bytes.js';
import { pathSide, pendingRecv, type PathSide } from '../../helpers/path-harness.js';

const sides: PathSide[] = [];
function side(device: number, o: Parameters<typeof pathSide>[1] = {}): PathSide {
  const s = pathSide(device, o);
  sides.push(s);
  return s;
}
afterEach(() => {
  for (const s of sides.splice(0)) s.close();
});

function deviceWith(s: PathSide, bytes: Uint8Array): DeviceBuffer {
  const ptr = s.driver.memAlloc(Math.max(1, bytes.length));
  if (bytes.length > 0) s.driver.memcpyHtoD(ptr, bytes);
  return { ptr, length: bytes.length };
}

describe('EagerPath', () => {
  it('takes host data always, and device data only while IPC is not OK, within deviceEagerLimit, without a stream', () => {
    const s = side(0, { options: { deviceEagerLimit: 1024, negotiationEagerLimit: 4096 } });
    const eager = new EagerPath(s.link, s.link.parts.eager);
    const dev = deviceWith(s, patternBytes(1024, 1));
    expect(eager.canSend(new Uint8Array(1 << 20), {})).toBe(true);
    expect(eager.canSend(dev, {})).toBe(true);
    // While the negotiation may still end OK, up to negotiationEagerLimit; once it ended BAD, deviceEagerLimit.
    expect(eager.canSend({ ptr: dev.ptr, length: 4096 }, {})).toBe(true);
    expect(eager.canSend({ ptr: dev.ptr, length: 4097 }, {})).toBe(false);
    s.link.ipcPending = false;
    expect(eager.canSend({ ptr: dev.ptr, length: 1025 }, {})).toBe(false);
    expect(eager.canSend(dev, { stream: s.link.gpu().stream })).toBe(false);
    s.link.ipcOk = true;
    expect(eager.canSend(dev, {})).toBe(false);
    expect(eager.canSend({ ptr: dev.ptr, length: 0 }, { stream: s.link.gpu().stream })).toBe(true); // empty: nothing to copy
    expect(eager.inlineBytes(dev)).toBe(1024);
  });

  it('sends host and device bytes inline, charges the window, counts, and resolves at once', async () => {
    const s = side(0);
    const eager = new EagerPath(s.link, s.link.parts.eager);
    const host = patternBytes(100, 2);
    const dev = deviceWith(s, patternBytes(200, 3));
    await eager.send(host, 7);
    await eager.send(dev, 8);
    const [a, b] = s.take() as EagerFrame[];
    expect(a).toMatchObject({ type: FrameType.EAGER, tag: 7, seq: 1, fromDevice: false });
    expect(sameBytes(a!.data, host)).toBe(true);
    expect(b).toMatchObject({ type: FrameType.EAGER, tag: 8, seq: 2, fromDevice: true });
    expect(sameBytes(b!.data, patternBytes(200, 3))).toBe(true);
    expect(s.link.flow.unread).toBe(100 + 200 + 2 * 64);
    expect(s.link.sent.eager).toEqual({ messages: 2, bytes: 300 });
  });

  it('receives into a new device buffer (device data), new host bytes, a device `into`, or exactly `length` bytes of a host `into`', async () => {
    const s = side(1);
    const eager = new EagerPath(s.link, s.link.parts.eager);
    const data = patternBytes(64, 4);
    const frame = (fromDevice: boolean): EagerFrame => ({ type: FrameType.EAGER, tag: 1, seq: 1, fromDevice, data });

    const r1 = pendingRecv(1);
    eager.receive(r1.recv, frame(true));
    const got1 = await r1.result;
    expect(isDeviceBuffer(got1.data)).toBe(true);
    const back = new Uint8Array(64);
    s.driver.memcpyDtoH(back, (got1.data as DeviceBuffer).ptr);
    expect(sameBytes(back, data)).toBe(true);

    const r2 = pendingRecv(1);
    eager.receive(r2.recv, frame(false));
    const got2 = await r2.result;
    expect(got2.data).toBeInstanceOf(Uint8Array);
    expect((got2.data as Uint8Array).buffer).not.toBe(data.buffer); // its own copy
    expect(got2).toMatchObject({ tag: 1, length: 64, path: 'eager', fromDevice: false });

    const into = deviceWith(s, new Uint8Array(128));
    const r3 = pendingRecv(1, into);
    eager.receive(r3.recv, frame(true));
    expect((await r3.result).data).toBe(into);
    s.driver.memcpyDtoH(back, into.ptr);
    expect(sameBytes(back, data)).toBe(true);

    const host = new Uint8Array(100);
    const r4 = pendingRecv(1, host);
    eager.receive(r4.recv, frame(false));
    const got4 = (await r4.result).data as Uint8Array;
    expect(got4.buffer).toBe(host.buffer);
    expect(got4.byteLength).toBe(64);
    expect(s.link.received.eager).toEqual({ messages: 4, bytes: 256 });
  });

  it('throws TruncationError for an `into` that is too small (the endpoint fails that receive alone)', () => {
    const s = side(0);
    const eager = new EagerPath(s.link, s.link.parts.eager);
    const r = pendingRecv(1, new Uint8Array(10));
    expect(() => eager.receive(r.recv, { type: FrameType.EAGER, tag: 1, seq: 1, fromDevice: false, data: new Uint8Array(11) })).toThrow(TruncationError);
  });
});

describe('receiveTarget', () => {
  it('allocates on the device or the host, or resolves `into`', () => {
    const s = side(0);
    const d = s.driver;
    const dev = receiveTarget(d, undefined, 16, true) as DeviceBuffer;
    expect(isDeviceBuffer(dev) && dev.length === 16 && dev.device === 0).toBe(true);
    expect(d.memGetAddressRange(dev.ptr).size).toBeGreaterThanOrEqual(16);
    expect(receiveTarget(d, undefined, 16, false)).toEqual(new Uint8Array(16));
    const into = new Float64Array(4);
    const view = receiveTarget(d, into, 8, false) as Uint8Array;
    expect(view.buffer).toBe(into.buffer);
    expect(view.byteLength).toBe(8);
    expect(receiveTarget(d, dev, 16, false)).toBe(dev);
    expect(() => receiveTarget(d, dev, 17, false)).toThrow(TruncationError);
  });
});
