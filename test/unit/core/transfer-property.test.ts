/**
 * Whole transfers, as properties: three transports on the simulated driver,
 * joined pairwise by in-memory channels (several endpoints each), exchange
 * random messages — sizes from 0 B to 64 MiB, random tags, host and device
 * buffers, every direction at once. Every message must arrive exactly once,
 * in order per (endpoint, tag), byte-exact.
 *
 * The staging ring is scaled down (64 KiB chunks, 4 slots, against 4 MiB
 * chunks by default) and the sizes with it: a message still spans from no
 * chunk to 64 chunks, ends mid-chunk or on a chunk boundary, and wraps the
 * ring many times, at 1/64 of the bytes; so CI runs more cases in less time
 * (20; SMCUDA_PROPERTY_RUNS=500 for a longer soak).
 */
import { fc, test } from '@fast-check/vitest';
import { afterEach, expect } from 'vitest';
import type { DeviceBuffer } from '../../../src/buffers.js';
import { createMemoryChannelPair } from '../../../src/channel/memory-channel.js';
import type { Endpoint } from '../../../src/endpoint.js';
import { deviceWith, makeSide, randomBytes, readDevice, sameBytes, type Side } from '../../helpers/transport-pair.js';

interface Msg {
  from: number;
  to: number;
  tag: number;
  size: number;
  device: boolean;
}

/** The staging chunk in this test (the default's 4 MiB / 64). */
const CHUNK = 64 << 10;
const RUNS = Number(process.env.SMCUDA_PROPERTY_RUNS ?? 20);

const size = fc.oneof(
  // around the 8 KiB device eager limit, and within one chunk
  { weight: 6, arbitrary: fc.integer({ min: 0, max: CHUNK }) },
  // a few chunks, ending anywhere
  { weight: 3, arbitrary: fc.integer({ min: CHUNK + 1, max: 6 * CHUNK + 7 }) },
  // many chunks: a multiple of the chunk, just short of one, past the ring many times
  { weight: 1, arbitrary: fc.constantFrom(16 * CHUNK, 64 * CHUNK - 3, 64 * CHUNK) },
);
const msg = fc.record({ from: fc.nat(2), to: fc.nat(2), tag: fc.nat(3), size, device: fc.boolean() }).filter((m) => m.from !== m.to);

let sides: Side[] = [];
afterEach(async () => {
  for (const s of sides) {
    await s.transport.close();
    s.driver.close();
  }
  sides = [];
});

/** Three transports, each pair joined by its own channel: eps[i][j] is i's endpoint to j. */
async function mesh(ipc: boolean[]): Promise<Endpoint[][]> {
  sides = await Promise.all([0, 1, 2].map((i) => makeSide(`t${i}`, i % 2, { negotiation: { ipc: ipc[i]! }, staging: { chunkSize: CHUNK, slots: 4 } })));
  const eps: Endpoint[][] = [[], [], []];
  for (let i = 0; i < 3; i++) {
    for (let j = i + 1; j < 3; j++) {
      const [ci, cj] = createMemoryChannelPair({ names: [`t${i}`, `t${j}`] });
      const [a, b] = await Promise.all([sides[i]!.transport.attach(ci), sides[j]!.transport.attach(cj)]);
      eps[i]![j] = a;
      eps[j]![i] = b;
    }
  }
  return eps;
}

test.prop([fc.array(msg, { minLength: 1, maxLength: 14 }), fc.array(fc.boolean(), { minLength: 3, maxLength: 3 }), fc.integer()], {
  numRuns: RUNS,
  endOnFailure: true,
})('every message arrives once, in order per tag, byte-exact', async (msgs, ipc, seed) => {
  const eps = await mesh(ipc);
  // Per (from, to, tag): the messages in send order, with their bytes.
  const expected = new Map<string, { bytes: Uint8Array; device: boolean }[]>();
  const key = (m: Msg) => `${m.from}>${m.to}#${m.tag}`;
  const sends: Promise<void>[] = [];
  const buffers: { side: Side; buf: DeviceBuffer }[] = [];
  msgs.forEach((m, i) => {
    const bytes = randomBytes(m.size, seed + i);
    const list = expected.get(key(m)) ?? [];
    list.push({ bytes, device: m.device });
    expected.set(key(m), list);
    const ep = eps[m.from]![m.to]!;
    if (m.device) {
      const buf = deviceWith(sides[m.from]!.driver, bytes);
      buffers.push({ side: sides[m.from]!, buf });
      sends.push(ep.send(buf, { tag: m.tag }));
    } else {
      sends.push(ep.send(bytes, { tag: m.tag }));
    }
  });
  // Receives: per stream, in order; streams interleaved.
  const receives = [...expected.entries()].map(async ([k, list]) => {
    const [from, to, tag] = k.split(/[>#]/).map(Number) as [number, number, number];
    const ep = eps[to]![from]!;
    for (const want of list) {
      const got = await ep.recv({ tag });
      expect(got.length).toBe(want.bytes.byteLength);
      expect(got.fromDevice).toBe(want.device);
      const bytes = 'ptr' in got.data ? readDevice(sides[to]!.driver, got.data as DeviceBuffer) : (got.data as Uint8Array);
      expect(sameBytes(bytes, want.bytes)).toBe(true);
      if ('ptr' in got.data && got.length > 0) sides[to]!.driver.memFree((got.data as DeviceBuffer).ptr);
    }
  });
  await Promise.all([...sends, ...receives]);
  // Nothing extra is waiting anywhere.
  for (let i = 0; i < 3; i++) {
    for (let j = 0; j < 3; j++) {
      if (i === j) continue;
      const st = eps[i]![j]!.stats();
      const sent = st.sent.eager.messages + st.sent.rget.messages + st.sent.staging.messages;
      expect(sent).toBe(msgs.filter((m) => m.from === i && m.to === j).length);
    }
  }
  for (const { side, buf } of buffers) if (buf.length > 0) side.driver.memFree(buf.ptr);
  for (const s of sides) {
    await s.transport.close();
    s.driver.close();
  }
  sides = [];
});
