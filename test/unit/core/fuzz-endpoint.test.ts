/**
 * Bad frames against a LIVE endpoint (docs/reliability.md, "Bad frames"):
 * after a valid HELLO, a fake peer sends random bytes, or valid frames
 * mutated byte by byte, truncated or extended. Never a crash or a hang: the
 * endpoint either carries on (the mutation happened to be a valid frame) or
 * closes with ProtocolError, and a second endpoint of the same transport
 * keeps working throughout. (The decoder alone is fuzzed in wire-codec.test.ts.)
 */
import { fc } from '@fast-check/vitest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SimulatedCudaDriver } from '../../../src/cuda/sim-driver.js';
import type { Endpoint } from '../../../src/endpoint.js';
import { ProtocolError } from '../../../src/errors.js';
import { Transport } from '../../../src/transport.js';
import { encodeFrame } from '../../../src/wire/codec.js';
import { FinStatus, type Frame, FrameType, HandleKind, NONCE_BYTES, WIRE_VERSION } from '../../../src/wire/frames.js';
import { rawPeer, type RawPeer } from '../../helpers/raw-peer.js';

let driver: SimulatedCudaDriver;
let t: Transport;
let bystander: RawPeer;
let n = 0;

beforeAll(async () => {
  driver = new SimulatedCudaDriver();
  t = await Transport.create({ driver, id: 'fuzzed', device: 0 });
  bystander = await rawPeer(t, 'bystander');
});
afterAll(async () => {
  await t.close();
  driver.close();
});

const UUID = 'GPU-5170a11e-0001-4000-8000-000000000001';
const SAMPLES: Frame[] = [
  { type: FrameType.EAGER, tag: 3, seq: 1, fromDevice: false, data: new Uint8Array([1, 2, 3, 4, 5]) },
  {
    type: FrameType.RGET,
    tag: 3,
    seq: 1,
    kind: HandleKind.LEGACY,
    identity: new Uint8Array(64).fill(9),
    base: 0x7000_0000n,
    allocSize: 4096,
    offset: 0,
    length: 4096,
    bufferId: 5n,
    deviceUuid: UUID,
    event: null,
  },
  { type: FrameType.FIN, seq: 1, status: FinStatus.OK, message: 'ok' },
  { type: FrameType.CANCEL, seq: 1 },
  { type: FrameType.STAGE_BEGIN, tag: 3, seq: 1, length: 8192, chunkSize: 4096, slots: 2 },
  { type: FrameType.STAGE_CHUNK, seq: 1, slot: 0, offset: 0, length: 4096 },
  { type: FrameType.STAGE_ACK, seq: 1, slot: 0 },
  { type: FrameType.INVALIDATE, deviceUuid: UUID, base: 0x7000_0000n, bufferId: 5n },
  { type: FrameType.IPC_REQ, attempt: 1, deviceUuid: UUID } as Frame,
  { type: FrameType.CLOSE, reason: 'bye' },
];
const encoded = SAMPLES.map((f) => encodeFrame(f));

/** A valid frame, mutated: a byte changed, truncated, or extended. */
const mutated = fc.oneof(
  fc.record({ i: fc.nat(encoded.length - 1), at: fc.nat(), value: fc.integer({ min: 0, max: 255 }) }).map(({ i, at, value }) => {
    const b = encoded[i]!.slice();
    b[at % b.length] = value;
    return b;
  }),
  fc.record({ i: fc.nat(encoded.length - 1), keep: fc.nat() }).map(({ i, keep }) => encoded[i]!.slice(0, keep % encoded[i]!.length)),
  fc.record({ i: fc.nat(encoded.length - 1), extra: fc.uint8Array({ minLength: 1, maxLength: 64 }) }).map(({ i, extra }) => {
    const b = new Uint8Array(encoded[i]!.length + extra.length);
    b.set(encoded[i]!);
    b.set(extra, encoded[i]!.length);
    return b;
  }),
);
const garbage = fc.uint8Array({ minLength: 0, maxLength: 300 });

/** The bystander endpoint still delivers a message. */
async function bystanderWorks(ep: Endpoint, k: number): Promise<void> {
  const got = ep.recv({ tag: 1000 });
  bystander.send({ type: FrameType.EAGER, tag: 1000, seq: k, fromDevice: false, data: new Uint8Array([k & 0xff]) });
  const r = await got;
  expect((r.data as Uint8Array)[0]).toBe(k & 0xff);
}

describe('a live endpoint under bad frames', () => {
  it('random bytes and mutated frames: ProtocolError or business as usual, never a crash, and the other endpoint keeps working', async () => {
    let seq = 0;
    const closedBy = new Map<string, number>();
    await fc.assert(
      fc.asyncProperty(fc.array(fc.oneof(garbage, mutated), { minLength: 1, maxLength: 4 }), async (frames) => {
        const p = await rawPeer(t, `fuzz-${++n}`);
        const pending = p.ep.recv({ tag: 3 }).catch(() => undefined); // something for arrivals to match
        for (const f of frames) p.send(f);
        await p.settle();
        await new Promise((r) => setTimeout(r, 1));
        if (p.ep.closed) {
          const err = p.closeError();
          // closed by a CLOSE frame (no error), or by a ProtocolError
          if (err !== undefined) expect(err).toBeInstanceOf(ProtocolError);
          const key = err ? (err as ProtocolError).code : 'CLOSE';
          closedBy.set(key, (closedBy.get(key) ?? 0) + 1);
        } else {
          p.ep.close('next case');
        }
        void pending;
        await bystanderWorks(bystander.ep, ++seq);
      }),
      { numRuns: 150 },
    );
    expect(bystander.ep.closed).toBe(false);
    expect(closedBy.get('SMCUDA_PROTOCOL') ?? 0).toBeGreaterThan(0);
  });

  it('a frame right after HELLO that is a second HELLO, or of an unknown type, closes only that endpoint', async () => {
    const p = await rawPeer(t, `fuzz-${++n}`);
    p.send({ type: FrameType.HELLO, version: WIRE_VERSION, pid: 1, peerId: 'again', deviceUuid: '', nonce: new Uint8Array(NONCE_BYTES) });
    await p.settle();
    expect(p.closeError()).toBeInstanceOf(ProtocolError);
    const q = await rawPeer(t, `fuzz-${++n}`);
    const b = encodeFrame({ type: FrameType.CANCEL, seq: 1 });
    b[1] = 0xee; // unknown type
    q.send(b);
    await q.settle();
    expect(q.closeError()).toBeInstanceOf(ProtocolError);
    await bystanderWorks(bystander.ep, 9999);
  });
});
