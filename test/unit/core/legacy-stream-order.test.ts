/**
 * A device send without `stream` delivers what the work queued before it on
 * the legacy default stream produced (issue 24, item 1). The simulated driver
 * models the race real drivers have: with `faults.pageableLagMs`, a pageable
 * cuMemcpyHtoD (and cuMemsetD8) returns before the device has the bytes, the
 * write landing on stream 0 later. Before the fix, the receiver copied the
 * old bytes on every path but EAGER.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { DeviceBuffer } from '../../../src/buffers.js';
import { LEGACY_STREAM } from '../../../src/cuda/driver.js';
import { deviceWith, makePair, type Pair, randomBytes, reach, readDevice, sameBytes } from '../../helpers/transport-pair.js';

let pair: Pair | undefined;
afterEach(async () => {
  vi.restoreAllMocks();
  await pair?.close();
  pair = undefined;
});

const LAG_MS = 40;
const SIZE = 256 << 10;

/** A pair whose sender's pageable writes lag; the first device message settles the negotiation. */
async function lagging(ipc: boolean): Promise<Pair> {
  pair = await makePair({ simA: { env: {}, faults: { pageableLagMs: LAG_MS } }, a: ipc ? {} : { negotiation: { ipc: false } } });
  const warm = deviceWith(pair.a.driver, randomBytes(SIZE, 7));
  pair.a.driver.streamSynchronize(LEGACY_STREAM); // the lagging HtoD of deviceWith, landed
  const r = pair.b.ep.recv({ tag: 1 });
  await pair.a.ep.send(warm, { tag: 1 });
  await r;
  if (ipc) await reach(pair.a.ep, 'OK');
  return pair;
}

describe('a device send without a stream is ordered after the legacy default stream', () => {
  for (const [name, ipc, path] of [
    ['RGET', true, 'rget'],
    ['staging', false, 'staging'],
  ] as const) {
    it(`${name}: a send right after a pageable cuMemcpyHtoD delivers the new bytes`, async () => {
      const { a, b } = await lagging(ipc);
      const src: DeviceBuffer = { ptr: a.driver.memAlloc(SIZE), length: SIZE };
      a.driver.memsetD8(src.ptr, 0, SIZE);
      a.driver.streamSynchronize(LEGACY_STREAM);
      for (let round = 0; round < 3; round++) {
        const want = randomBytes(SIZE, 100 + round);
        a.driver.memcpyHtoD(src.ptr, want); // returns before the bytes land (LAG_MS later)
        const into: DeviceBuffer = { ptr: b.driver.memAlloc(SIZE), length: SIZE };
        const r = b.ep.recv({ tag: 2, into });
        await a.ep.send(src, { tag: 2 });
        const got = await r;
        expect(got.path).toBe(path);
        expect(sameBytes(readDevice(b.driver, into), want)).toBe(true);
        b.driver.memFree(into.ptr);
      }
    });
  }

  it('a cuMemsetD8 that returned before the device had the bytes is ordered the same way', async () => {
    const { a, b } = await lagging(true);
    const src: DeviceBuffer = { ptr: a.driver.memAlloc(SIZE), length: SIZE };
    a.driver.memcpyHtoD(src.ptr, randomBytes(SIZE, 3));
    a.driver.memsetD8(src.ptr, 0x5a, SIZE); // lands LAG_MS later, after the HtoD
    const r = b.ep.recv({ tag: 3 });
    await a.ep.send(src, { tag: 3 });
    const got = await r;
    expect(readDevice(b.driver, got.data as DeviceBuffer).every((x) => x === 0x5a)).toBe(true);
  });

  it('with nothing in flight on stream 0 the send goes as before: no event handed to the peer', async () => {
    const { a, b } = await lagging(true);
    const src = deviceWith(a.driver, randomBytes(SIZE, 4));
    a.driver.streamSynchronize(LEGACY_STREAM);
    const ipcEvents = vi.spyOn(a.driver, 'ipcGetEventHandle');
    const r = b.ep.recv({ tag: 4 });
    await a.ep.send(src, { tag: 4 });
    expect(sameBytes(readDevice(b.driver, (await r).data as DeviceBuffer), randomBytes(SIZE, 4))).toBe(true);
    expect(ipcEvents).not.toHaveBeenCalled();
  });

  it('ready: true opts out: no event is recorded on the legacy stream for that send', async () => {
    const { a, b } = await lagging(true);
    const src = deviceWith(a.driver, randomBytes(SIZE, 5));
    a.driver.streamSynchronize(LEGACY_STREAM); // the caller's promise: the bytes are there
    const record = vi.spyOn(a.driver, 'eventRecord');
    const r = b.ep.recv({ tag: 5 });
    await a.ep.send(src, { tag: 5, ready: true });
    expect(sameBytes(readDevice(b.driver, (await r).data as DeviceBuffer), randomBytes(SIZE, 5))).toBe(true);
    expect(record.mock.calls.filter((c) => c[1] === LEGACY_STREAM)).toEqual([]);
    expect(() => a.ep.send(src, { tag: 5, ready: 'yes' as unknown as boolean })).toThrow(TypeError);
  });
});
