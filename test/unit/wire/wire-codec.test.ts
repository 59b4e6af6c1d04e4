import { setFlagsFromString } from 'node:v8';
import { describe, it, expect } from 'vitest';
import { test, fc } from '@fast-check/vitest';
import {
  decodeFrame,
  decodeFrameType,
  deviceUuidFromBytes,
  deviceUuidToBytes,
  encodeFrame,
  spillHead,
  FinStatus,
  FrameType,
  HandleKind,
  PtRole,
  MAX_FINS,
  MAX_PEER_ID_BYTES,
  MAX_STRING_BYTES,
  NONCE_BYTES,
  PROOF_BYTES,
  WIRE_VERSION,
  IPC_PROBE_BYTES,
  readDeviceUuid,
  restampRget,
  RgetDecoder,
  UuidNames,
  SegmentKind,
  type Frame,
} from '../../../src/wire/index.js';
import { ProtocolError } from '../../../src/errors.js';

// ---------------------------------------------------------------------------
// Arbitraries: every field random within its documented range.
// ---------------------------------------------------------------------------

const MAX_SAFE = Number.MAX_SAFE_INTEGER;
const u32 = fc.integer({ min: 0, max: 0xffff_ffff });
const attempt = fc.integer({ min: 1, max: 0xffff_ffff });
const safe = fc.maxSafeNat();
const u64 = fc.bigInt({ min: 0n, max: (1n << 64n) - 1n });
const handle = fc.uint8Array({ minLength: 64, maxLength: 64 });
const uuid = fc.oneof(
  fc.constant(''),
  fc
    .uint8Array({ minLength: 16, maxLength: 16 })
    .filter((b) => b.some((x) => x !== 0))
    .map(deviceUuidFromBytes),
);
/** Strings of whole code points whose UTF-8 size is within [minBytes, maxBytes]. */
const utf8 = (minBytes: number, maxBytes: number) =>
  fc
    .string({ unit: 'binary', minLength: minBytes, maxLength: Math.floor(maxBytes / 4) })
    .filter((s) => Buffer.byteLength(s) >= minBytes && Buffer.byteLength(s) <= maxBytes);
const finStatus = fc.constantFrom(...(Object.values(FinStatus).filter((v) => typeof v === 'number') as FinStatus[]));

/** RGET frames whose device UUID comes from `deviceUuid`; offset + length ≤ allocSize. */
function rgetArb(deviceUuid: fc.Arbitrary<string>) {
  return fc
    .record({
      type: fc.constant(FrameType.RGET as const),
      tag: u32,
      seq: safe,
      kind: fc.constantFrom(HandleKind.LEGACY, HandleKind.VMM, HandleKind.POOL),
      identity: handle,
      base: u64,
      bounds: fc.tuple(safe, safe, safe).map((t) => t.sort((a, b) => a - b)),
      bufferId: u64,
      deviceUuid,
      event: fc.option(handle, { nil: null }),
    })
    .map(({ bounds: [a, b, c], ...f }) => ({ ...f, offset: a, length: b - a, allocSize: c }));
}

const frameArb: fc.Arbitrary<Frame> = fc.oneof(
  fc.record({
    type: fc.constant(FrameType.HELLO as const),
    version: fc.integer({ min: 1, max: 255 }),
    pid: u32,
    peerId: utf8(1, MAX_PEER_ID_BYTES),
    deviceUuid: uuid,
    nonce: fc.uint8Array({ minLength: NONCE_BYTES, maxLength: NONCE_BYTES }),
    features: u32,
  }),
  fc.record({
    type: fc.constant(FrameType.PROOF as const),
    proof: fc.uint8Array({ minLength: PROOF_BYTES, maxLength: PROOF_BYTES }),
  }),
  fc.record({ type: fc.constant(FrameType.IPC_REQ as const), attempt, deviceUuid: uuid }),
  fc.record({ type: fc.constant(FrameType.IPC_ACK as const), attempt, ok: fc.boolean(), deviceUuid: uuid }),
  fc.record({ type: fc.constant(FrameType.IPC_NOTREADY as const), attempt }),
  fc.record({ type: fc.constant(FrameType.IPC_CONFIRM as const), attempt }),
  fc.record({ type: fc.constant(FrameType.IPC_ABORT as const), reason: utf8(0, MAX_STRING_BYTES) }),
  fc.record({
    type: fc.constant(FrameType.EAGER as const),
    tag: u32,
    seq: safe,
    fromDevice: fc.boolean(),
    data: fc.uint8Array({ maxLength: 300 }),
  }),
  rgetArb(uuid),
  fc.record({ type: fc.constant(FrameType.FIN as const), seq: safe, status: finStatus, message: utf8(0, MAX_STRING_BYTES) }),
  fc.record({ type: fc.constant(FrameType.FINS as const), seqs: fc.array(safe, { minLength: 1, maxLength: 20 }) }),
  fc.record({ type: fc.constant(FrameType.CANCEL as const), seq: safe }),
  fc.record({ type: fc.constant(FrameType.CREDIT as const), consumed: safe }),
  fc.record({
    type: fc.constant(FrameType.STAGE_BEGIN as const),
    tag: u32,
    seq: safe,
    length: safe,
    chunkSize: fc.integer({ min: 1, max: 0xffff_ffff }),
    slots: fc.integer({ min: 1, max: 0xffff }),
  }),
  fc
    .record({
      type: fc.constant(FrameType.STAGE_CHUNK as const),
      seq: safe,
      slot: fc.integer({ min: 0, max: 0xffff }),
      length: fc.integer({ min: 1, max: 0xffff_ffff }),
      offset: safe,
    })
    .map((f) => ({ ...f, offset: Math.min(f.offset, MAX_SAFE - f.length) })),
  fc.record({ type: fc.constant(FrameType.STAGE_ACK as const), seq: safe, slot: fc.integer({ min: 0, max: 0xffff }) }),
  fc.record({ type: fc.constant(FrameType.INVALIDATE as const), deviceUuid: uuid, base: u64, bufferId: u64 }),
  fc.record({ type: fc.constant(FrameType.CLOSE as const), reason: utf8(0, MAX_STRING_BYTES) }),
  fc
    .record({
      type: fc.constant(FrameType.FD_OFFER as const),
      kind: fc.constant(HandleKind.VMM),
      bufferId: u64,
      deviceUuid: uuid,
      base: u64,
      sizes: fc.array(fc.integer({ min: 1, max: 2 ** 40 }), { minLength: 1, maxLength: 6 }),
      exportData: fc.constant(new Uint8Array(64)),
    })
    .map(({ sizes, ...f }) => {
      let at = 0;
      const chunks = sizes.map((size) => ({ offset: (at += size) - size, size }));
      return { ...f, size: at, poolId: 0, chunks };
    }),
  fc.record({
    type: fc.constant(FrameType.FD_OFFER as const),
    kind: fc.constant(HandleKind.POOL),
    bufferId: u64,
    deviceUuid: uuid,
    base: u64,
    size: fc.integer({ min: 1, max: MAX_SAFE }),
    poolId: u32,
    exportData: handle,
    chunks: fc.constant([]),
  }),
  fc.record({ type: fc.constant(FrameType.FD_POOL as const), poolId: u32, deviceUuid: uuid }),
  fc.record({ type: fc.constant(FrameType.FD_RELEASE as const), kind: fc.constantFrom(HandleKind.VMM, HandleKind.POOL), id: u64, base: u64 }),
  fc.record({
    type: fc.constant(FrameType.FD_DESCRIPTOR as const),
    kind: fc.constantFrom(HandleKind.VMM, HandleKind.POOL),
    id: u64,
    base: u64,
    index: fc.integer({ min: 0, max: 0xffff }),
  }),
  fc.record({ type: fc.constant(FrameType.SEGMENT as const), kind: fc.constantFrom(SegmentKind.CONTROL_RING, SegmentKind.STAGING_RING), bytes: safe }),
  fc
    .record({ size: fc.integer({ min: 1, max: MAX_SAFE }), a: fc.double({ min: 0, max: 1, noNaN: true }), b: fc.double({ min: 0, max: 1, noNaN: true }) })
    .chain(({ size, a, b }) => {
      const offset = Math.floor(a * size);
      const length = Math.floor(b * (size - offset));
      return fc.record({
        type: fc.constant(FrameType.REG_OFFER as const),
        regId: fc.integer({ min: 1, max: 0xffff_ffff }),
        kind: fc.constantFrom(HandleKind.LEGACY, HandleKind.VMM, HandleKind.POOL),
        deviceUuid: uuid,
        base: u64,
        allocSize: fc.constant(size),
        offset: fc.constant(offset),
        length: fc.constant(length),
        bufferId: u64,
        handle,
      });
    }),
  fc.record({ type: fc.constant(FrameType.REG_RELEASE as const), regId: fc.integer({ min: 1, max: 0xffff_ffff }) }),
  fc.record({
    type: fc.constant(FrameType.PT_OFFER as const),
    ptId: fc.integer({ min: 1, max: 0xffff_ffff }),
    role: fc.constantFrom(PtRole.SEND, PtRole.RECV),
    regId: fc.integer({ min: 1, max: 0xffff_ffff }),
    offset: safe,
    length: safe,
    flagRegId: fc.integer({ min: 1, max: 0xffff_ffff }),
    slot: u32,
  }),
  fc.record({ type: fc.constant(FrameType.PT_FAIL as const), ptId: fc.integer({ min: 1, max: 0xffff_ffff }), reason: utf8(0, MAX_STRING_BYTES) }),
  fc.record({ type: fc.constant(FrameType.REG_FAIL as const), regId: fc.integer({ min: 1, max: 0xffff_ffff }), reason: utf8(0, MAX_STRING_BYTES) }),
  fc.record({ type: fc.constant(FrameType.RING_OFFER as const), capacity: u32 }),
  fc.record({ type: fc.constant(FrameType.RING_SWITCH as const) }),
  fc.record({ type: fc.constant(FrameType.DOORBELL as const) }),
  fc.record({ type: fc.constant(FrameType.SPILL as const), seq: u32, frame: fc.uint8Array({ minLength: 4, maxLength: 300 }) }),
) as fc.Arbitrary<Frame>;

const ALL_TYPES = Object.values(FrameType).filter((v): v is FrameType => typeof v === 'number');

function concat(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.byteLength, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.byteLength;
  }
  return out;
}

/** Runs `fn` and returns the ProtocolError it throws (fails the test on anything else). */
function protocolError(fn: () => unknown): ProtocolError {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(ProtocolError);
    return e as ProtocolError;
  }
  throw new Error('expected a ProtocolError, nothing was thrown');
}

function decodeError(bytes: Uint8Array): ProtocolError {
  return protocolError(() => decodeFrame(bytes));
}

function encodeError(frame: unknown): ProtocolError {
  const e = protocolError(() => encodeFrame(frame as Frame));
  expect(e.code).toBe('SMCUDA_PROTOCOL_ENCODE');
  return e;
}

const hex = (s: string) => Uint8Array.from(Buffer.from(s.replace(/\s+/g, ''), 'hex'));

// ---------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------

describe('codec properties', () => {
  test.prop([frameArb], { numRuns: 400 })('decode(encode(f)) is f, for every frame type', (f) => {
    const bytes = encodeFrame(f);
    expect(decodeFrame(bytes)).toEqual(f);
  });

  it('the arbitrary covers every frame type', () => {
    const seen = new Set(fc.sample(frameArb, 2000).map((f) => f.type));
    expect([...seen].sort((a, b) => a - b)).toEqual(ALL_TYPES);
  });

  test.prop([fc.uint8Array({ maxLength: 300 })], { numRuns: 500 })(
    'random bytes: only ProtocolError, and what decodes re-encodes to the same bytes',
    (bytes) => {
      let frame: Frame;
      try {
        frame = decodeFrame(bytes);
      } catch (e) {
        expect(e).toBeInstanceOf(ProtocolError);
        return;
      }
      expect(encodeFrame(frame)).toEqual(bytes);
    },
  );

  test.prop([fc.constantFrom(...ALL_TYPES), fc.uint8Array({ maxLength: 250 })], { numRuns: 1000 })(
    'random bodies behind a valid header: only ProtocolError, and canonical',
    (type, body) => {
      const bytes = concat([Uint8Array.of(0x53, WIRE_VERSION, type, 0), body]);
      let frame: Frame;
      try {
        frame = decodeFrame(bytes);
      } catch (e) {
        expect(e).toBeInstanceOf(ProtocolError);
        return;
      }
      expect(frame.type).toBe(type);
      expect(encodeFrame(frame)).toEqual(bytes);
    },
  );

  test.prop([frameArb, fc.nat()], { numRuns: 300 })('every strict prefix of a valid frame is refused', (f, cut) => {
    const bytes = encodeFrame(f);
    const prefix = bytes.subarray(0, cut % bytes.byteLength);
    expect(decodeError(prefix).code).toBe('SMCUDA_PROTOCOL');
  });

  test.prop([frameArb, fc.uint8Array({ minLength: 1, maxLength: 16 })], { numRuns: 300 })('trailing bytes are refused', (f, extra) => {
    const e = decodeError(concat([encodeFrame(f), extra]));
    expect(e.message).toMatch(/trailing bytes/);
  });

  test.prop([frameArb, fc.nat(), fc.integer({ min: 1, max: 255 })], { numRuns: 500 })(
    'a mutated frame is refused or decodes to a frame that encodes to exactly the mutated bytes',
    (f, at, xor) => {
      const bytes = encodeFrame(f).slice();
      bytes[at % bytes.byteLength]! ^= xor;
      let frame: Frame;
      try {
        frame = decodeFrame(bytes);
      } catch (e) {
        expect(e).toBeInstanceOf(ProtocolError);
        return;
      }
      expect(encodeFrame(frame)).toEqual(bytes);
    },
  );
});

// ---------------------------------------------------------------------------
// Layout: golden bytes that docs/protocol.md describes
// ---------------------------------------------------------------------------

describe('restampRget', () => {
  test.prop([rgetArb(uuid).map((f) => ({ ...f, event: null })), u32, safe], { numRuns: 300 })(
    'a template stamped with another tag and seq is byte for byte the encoding of that RGET',
    (f, tag, seq) => {
      const stamped = restampRget(encodeFrame(f), tag, seq);
      expect(Buffer.from(stamped)).toEqual(Buffer.from(encodeFrame({ ...f, tag, seq })));
      expect(decodeFrame(stamped)).toEqual({ ...f, tag, seq });
    },
  );

  it('checks the tag and seq it stamps', () => {
    const t = encodeFrame({
      type: FrameType.RGET,
      tag: 1,
      seq: 1,
      kind: HandleKind.LEGACY,
      identity: new Uint8Array(64),
      base: 0n,
      allocSize: 10,
      offset: 0,
      length: 10,
      bufferId: 0n,
      deviceUuid: '',
      event: null,
    });
    expect(() => restampRget(t, -1, 1)).toThrow(/'tag'/);
    expect(() => restampRget(t, 1, 2 ** 53)).toThrow(/'seq'/);
  });
});

describe('RgetDecoder', () => {
  // Streams of frames as a receiver sees them: RGETs re-stamped from a few templates, other frames, and one-byte corruptions.
  const rgetNoEvent = rgetArb(uuid).map((f) => ({ ...f, event: null }));
  const step = fc.oneof(
    fc.record({ kind: fc.constant('restamp' as const), t: fc.nat({ max: 2 }), tag: u32, seq: safe }),
    fc.record({ kind: fc.constant('frame' as const), f: frameArb }),
    fc.record({ kind: fc.constant('flip' as const), t: fc.nat({ max: 2 }), at: fc.nat(), bit: fc.integer({ min: 0, max: 7 }) }),
  );
  test.prop([fc.array(rgetNoEvent, { minLength: 3, maxLength: 3 }), fc.array(step, { maxLength: 30 })], { numRuns: 200 })(
    'decodes every frame exactly as decodeFrame does (and throws where it throws)',
    (templates, steps) => {
      const rd = new RgetDecoder();
      const names = new UuidNames();
      const ring = new Uint8Array(64 << 10);
      const encoded = templates.map((f) => encodeFrame(f));
      for (const st of steps) {
        let bytes: Uint8Array;
        if (st.kind === 'restamp') bytes = restampRget(encoded[st.t]!, st.tag, st.seq);
        else if (st.kind === 'frame') bytes = encodeFrame(st.f);
        else {
          bytes = Uint8Array.from(encoded[st.t]!);
          bytes[st.at % bytes.length]! ^= 1 << st.bit;
        }
        let want: unknown;
        try {
          want = decodeFrame(bytes);
        } catch (err) {
          expect(() => rd.decode(bytes, names)).toThrow((err as Error).message);
          continue;
        }
        // Decoded where it lies, as ShmChannel hands ring entries over, then the space reused:
        // nothing of a non-EAGER frame may still point into it (EAGER data is a view by contract).
        const view = ring.subarray(8, 8 + bytes.byteLength);
        view.set(bytes);
        const got = rd.decode(view, names);
        if (got.type !== FrameType.EAGER && got.type !== FrameType.SPILL) view.fill(0xee);
        expect(got).toEqual(want);
      }
    },
  );

  it('a seq above 2^53 in a frame otherwise like the last is refused, as decodeFrame refuses it', () => {
    const rd = new RgetDecoder();
    const t = encodeFrame({
      type: FrameType.RGET,
      tag: 1,
      seq: 1,
      kind: HandleKind.LEGACY,
      identity: new Uint8Array(64),
      base: 0n,
      allocSize: 10,
      offset: 0,
      length: 10,
      bufferId: 0n,
      deviceUuid: '',
      event: null,
    });
    rd.decode(t);
    const big = Uint8Array.from(t);
    big[15] = 0xff;
    expect(() => rd.decode(big)).toThrow(/'seq'/);
  });
});

describe('layout', () => {
  it('EAGER: header, tag u32, seq u64, fromDevice u8, data length u32, data', () => {
    const bytes = encodeFrame({ type: FrameType.EAGER, tag: 0x01020304, seq: 2 ** 32 + 5, fromDevice: true, data: Uint8Array.of(0xaa, 0xbb) });
    expect(bytes).toEqual(hex('53 05 0a 00  04030201  05000000 01000000  01  02000000  aabb'));
  });

  it('HELLO: the 32-byte nonce, then the features word; PROOF: the 32-byte HMAC; channel-layer frames as protocol.md lays them out', () => {
    const nonce = new Uint8Array(NONCE_BYTES).fill(0xab);
    const hello = encodeFrame({ type: FrameType.HELLO, version: 5, pid: 2, peerId: 'p', deviceUuid: '', nonce, features: 1 });
    expect(hello).toEqual(hex(`53 05 01 00  05  02000000  00000000000000000000000000000000  0100 70  ${'ab'.repeat(32)}  01000000`));
    expect(encodeFrame({ type: FrameType.PROOF, proof: new Uint8Array(PROOF_BYTES).fill(0xcd) })).toEqual(hex(`53 05 07 00  ${'cd'.repeat(32)}`));
    expect(encodeFrame({ type: FrameType.RING_OFFER, capacity: 4096 })).toEqual(hex('53 05 32 00  00100000'));
    expect(encodeFrame({ type: FrameType.SEGMENT, kind: SegmentKind.STAGING_RING, bytes: 8192 })).toEqual(hex('53 05 23 00  02  0020000000000000'));
    expect(encodeFrame({ type: FrameType.RING_SWITCH })).toEqual(hex('53 05 33 00'));
    expect(encodeFrame({ type: FrameType.DOORBELL })).toEqual(hex('53 05 34 00'));
    const inner = hex('53 05 34 00');
    expect(encodeFrame({ type: FrameType.SPILL, seq: 9, frame: inner })).toEqual(hex('53 05 35 00  09000000  04000000  53053400'));
    expect(concat([spillHead(9, 4), inner])).toEqual(encodeFrame({ type: FrameType.SPILL, seq: 9, frame: inner }));
  });

  it('IPC_REQ: attempt u32, the 16 UUID bytes, then a probe-present byte and the probe', () => {
    const bytes = encodeFrame({ type: FrameType.IPC_REQ, attempt: 3, deviceUuid: 'GPU-00112233-4455-6677-8899-aabbccddeeff' });
    expect(bytes).toEqual(hex('53 05 02 00  03000000  00112233445566778899aabbccddeeff  00'));
    const probe = new Uint8Array(IPC_PROBE_BYTES).map((_, i) => i);
    const withProbe = encodeFrame({ type: FrameType.IPC_REQ, attempt: 3, deviceUuid: '', probe });
    expect(withProbe.byteLength).toBe(4 + 4 + 16 + 1 + IPC_PROBE_BYTES);
    expect(withProbe[24]).toBe(1);
    expect(decodeFrame(withProbe.slice())).toEqual({ type: FrameType.IPC_REQ, attempt: 3, deviceUuid: '', probe });
    const ack = encodeFrame({ type: FrameType.IPC_ACK, attempt: 1, ok: true, deviceUuid: '', probe });
    expect(decodeFrame(ack.slice())).toEqual({ type: FrameType.IPC_ACK, attempt: 1, ok: true, deviceUuid: '', probe });
    expect(() => encodeFrame({ type: FrameType.IPC_ACK, attempt: 1, ok: true, deviceUuid: '', probe: new Uint8Array(3) })).toThrow(/'probe'/);
  });

  it('FIN: seq u64, status u8, message as u16 length + UTF-8', () => {
    const bytes = encodeFrame({ type: FrameType.FIN, seq: 7, status: FinStatus.TRUNCATED, message: 'é' });
    expect(bytes).toEqual(hex('53 05 0c 00  0700000000000000  03  0200 c3a9'));
  });

  it('RGET: 138 bytes without an event, 202 with one; the kind after seq, then the identity', () => {
    const f = {
      type: FrameType.RGET as const,
      tag: 1,
      seq: 2,
      kind: HandleKind.POOL,
      identity: new Uint8Array(64).fill(9),
      base: 0x7f00_0000_0000n,
      allocSize: 4096,
      offset: 0,
      length: 4096,
      bufferId: 77n,
      deviceUuid: '',
      event: null as Uint8Array | null,
    };
    const bytes = encodeFrame(f);
    expect(bytes.byteLength).toBe(138);
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    expect(bytes[16]).toBe(HandleKind.POOL);
    expect(bytes.subarray(17, 81)).toEqual(f.identity);
    expect(view.getBigUint64(81, true)).toBe(f.base);
    expect(view.getBigUint64(89, true)).toBe(4096n);
    expect(view.getBigUint64(105, true)).toBe(4096n);
    expect(view.getBigUint64(113, true)).toBe(77n);
    expect(bytes[137]).toBe(0);
    expect(decodeFrame(bytes)).toEqual(f);
    expect(encodeFrame({ ...f, event: new Uint8Array(64) }).byteLength).toBe(202);
  });

  it('fixed sizes of the small frames', () => {
    expect(encodeFrame({ type: FrameType.CANCEL, seq: 1 }).byteLength).toBe(12);
    expect(encodeFrame({ type: FrameType.STAGE_ACK, seq: 1, slot: 2 }).byteLength).toBe(14);
    expect(encodeFrame({ type: FrameType.STAGE_CHUNK, seq: 1, slot: 2, offset: 3, length: 4 }).byteLength).toBe(26);
    expect(encodeFrame({ type: FrameType.INVALIDATE, deviceUuid: '', base: 1n, bufferId: 2n }).byteLength).toBe(36);
    expect(encodeFrame({ type: FrameType.IPC_ACK, attempt: 1, ok: true, deviceUuid: '' }).byteLength).toBe(26); // + probe-present byte
    expect(encodeFrame({ type: FrameType.IPC_NOTREADY, attempt: 1 }).byteLength).toBe(8);
  });

  it('EAGER data decodes as a view into the input (no copy); RGET handles are copies', () => {
    const bytes = encodeFrame({ type: FrameType.EAGER, tag: 0, seq: 0, fromDevice: false, data: Uint8Array.of(1, 2, 3) });
    const f = decodeFrame(bytes) as Extract<Frame, { type: FrameType.EAGER }>;
    expect(f.data.buffer).toBe(bytes.buffer);
    expect(f.data.byteOffset).toBe(bytes.byteOffset + 21);
    const r = encodeFrame({
      type: FrameType.RGET,
      tag: 0,
      seq: 0,
      kind: HandleKind.LEGACY,
      identity: new Uint8Array(64).fill(3),
      base: 0n,
      allocSize: 0,
      offset: 0,
      length: 0,
      bufferId: 0n,
      deviceUuid: '',
      event: null,
    });
    const decoded = decodeFrame(r) as Extract<Frame, { type: FrameType.RGET }>;
    r.fill(0);
    expect(decoded.identity).toEqual(new Uint8Array(64).fill(3));
  });

  it('device UUIDs: upper case is accepted and decoded lower case; the all-zero UUID is reserved', () => {
    const upper = 'GPU-AABBCCDD-0000-1111-2222-333344445555';
    const f = decodeFrame(encodeFrame({ type: FrameType.IPC_REQ, attempt: 1, deviceUuid: upper }));
    expect(f).toEqual({ type: FrameType.IPC_REQ, attempt: 1, deviceUuid: upper.toLowerCase().replace('gpu', 'GPU') });
    expect(deviceUuidToBytes('')).toEqual(new Uint8Array(16));
    expect(() => deviceUuidToBytes('GPU-00000000-0000-0000-0000-000000000000')).toThrow(RangeError);
  });
});

// ---------------------------------------------------------------------------
// Each decode rule on its own
// ---------------------------------------------------------------------------

const eager = () => encodeFrame({ type: FrameType.EAGER, tag: 1, seq: 2, fromDevice: false, data: Uint8Array.of(1, 2, 3) }).slice();
const rget = (event: Uint8Array | null = null) =>
  encodeFrame({
    type: FrameType.RGET,
    tag: 1,
    seq: 2,
    kind: HandleKind.LEGACY,
    identity: new Uint8Array(64),
    base: 0n,
    allocSize: 100,
    offset: 10,
    length: 90,
    bufferId: 1n,
    deviceUuid: '',
    event,
  }).slice();
const hello = (peerId = 'p') =>
  encodeFrame({ type: FrameType.HELLO, version: WIRE_VERSION, pid: 1, peerId, deviceUuid: '', nonce: new Uint8Array(NONCE_BYTES) }).slice();
const dv = (b: Uint8Array) => new DataView(b.buffer, b.byteOffset, b.byteLength);

describe('decode rules', () => {
  it('header: too short, magic, version, type, flags', () => {
    for (let n = 0; n < 4; n++) expect(decodeError(eager().subarray(0, n)).message).toMatch(/shorter than the 4-byte header/);
    const b = eager();
    b[0] = 0x54;
    expect(decodeError(b).message).toMatch(/magic/);
    for (const v of [0, WIRE_VERSION + 1, 255]) {
      const c = eager();
      c[1] = v;
      const e = decodeError(c);
      expect(e.code).toBe('SMCUDA_PROTOCOL_VERSION');
      expect(e.message).toMatch(/same smcuda version/);
    }
    const t = eager();
    t[2] = 99;
    expect(decodeError(t).message).toMatch(/unknown frame type 99/);
    const fl = eager();
    fl[3] = 1;
    expect(decodeError(fl).message).toMatch(/EAGER.*'flags'/);
  });

  it('decodeFrameType reads the header alone', () => {
    expect(decodeFrameType(eager())).toBe(FrameType.EAGER);
    expect(protocolError(() => decodeFrameType('x' as unknown as Uint8Array)).message).toMatch(/must be a Uint8Array/);
  });

  it('EAGER: data length beyond the frame, booleans 0/1 only', () => {
    const b = eager();
    dv(b).setUint32(17, 4, true);
    expect(decodeError(b).message).toMatch(/EAGER frame: 'data' needs 4 bytes/);
    const c = eager();
    c[16] = 2;
    expect(decodeError(c).message).toMatch(/EAGER frame: 'fromDevice' must be 0 or 1/);
  });

  it('u64 numbers above Number.MAX_SAFE_INTEGER', () => {
    const b = eager();
    dv(b).setBigUint64(8, 1n << 53n, true);
    expect(decodeError(b).message).toMatch(/EAGER frame: 'seq' .*MAX_SAFE_INTEGER/);
  });

  it('RGET: offset + length beyond allocSize, event flag, event size', () => {
    const b = rget();
    dv(b).setBigUint64(105, 91n, true); // length 91 at offset 10 of 100
    expect(decodeError(b).message).toMatch(/RGET frame: 'offset' \+ 'length' \(10 \+ 91\) exceeds 'allocSize' \(100\)/);
    const huge = rget();
    dv(huge).setBigUint64(97, BigInt(MAX_SAFE), true);
    dv(huge).setBigUint64(105, BigInt(MAX_SAFE), true);
    dv(huge).setBigUint64(89, BigInt(MAX_SAFE), true);
    expect(decodeError(huge).message).toMatch(/exceeds 'allocSize'/);
    const flag = rget();
    flag[137] = 2;
    expect(decodeError(flag).message).toMatch(/RGET frame: 'event.present' must be 0 or 1/);
    const noEvent = rget();
    noEvent[137] = 1; // claims an event but has none
    expect(decodeError(noEvent).message).toMatch(/RGET frame: 'event' needs 64 bytes/);
    expect(decodeError(rget(new Uint8Array(64)).subarray(0, 201)).message).toMatch(/'event' needs 64/);
    expect(decodeError(rget().subarray(0, 80)).message).toMatch(/'identity' needs 64/);
  });

  it('FIN: unknown status', () => {
    const b = encodeFrame({ type: FrameType.FIN, seq: 1, status: FinStatus.OK, message: '' }).slice();
    b[12] = 200;
    expect(decodeError(b).message).toMatch(/FIN frame: 'status' must be a FinStatus/);
  });

  it('negotiation: attempt 0, ACK ok byte', () => {
    const b = encodeFrame({ type: FrameType.IPC_CONFIRM, attempt: 1 }).slice();
    dv(b).setUint32(4, 0, true);
    expect(decodeError(b).message).toMatch(/IPC_CONFIRM frame: 'attempt' must be at least 1/);
    const a = encodeFrame({ type: FrameType.IPC_ACK, attempt: 1, ok: false, deviceUuid: '' }).slice();
    a[8] = 7;
    expect(decodeError(a).message).toMatch(/IPC_ACK frame: 'ok' must be 0 or 1/);
  });

  it('strings: invalid UTF-8, over-long, beyond the frame, empty where required', () => {
    const bad = encodeFrame({ type: FrameType.CLOSE, reason: 'ab' }).slice();
    bad[6] = 0xff;
    expect(decodeError(bad).message).toMatch(/CLOSE frame: 'reason' is not valid UTF-8/);
    const overlong = encodeFrame({ type: FrameType.CLOSE, reason: 'ab' }).slice();
    overlong.set([0xc0, 0xaf], 6); // over-long encoding of '/'
    expect(decodeError(overlong).message).toMatch(/not valid UTF-8/);
    const long = concat([Uint8Array.of(0x53, WIRE_VERSION, FrameType.IPC_ABORT, 0, 0x01, 0x10), new Uint8Array(4097).fill(0x61)]);
    expect(decodeError(long).message).toMatch(/IPC_ABORT frame: 'reason' must be 0..4096 UTF-8 bytes, got 4097/);
    const past = encodeFrame({ type: FrameType.CLOSE, reason: 'ab' }).slice();
    dv(past).setUint16(4, 3, true);
    expect(decodeError(past).message).toMatch(/CLOSE frame: 'reason' needs 3 bytes/);
    const noPeer = hello();
    dv(noPeer).setUint16(25, 0, true);
    expect(decodeError(noPeer).message).toMatch(/HELLO frame/);
  });

  it('HELLO: exactly a 32-byte nonce (no token), version at least 1; PROOF: exactly 32 bytes', () => {
    const h = hello('p');
    expect(decodeFrame(h)).not.toHaveProperty('token');
    expect(decodeError(h.subarray(0, h.byteLength - 5)).message).toMatch(/HELLO frame/);
    const proof = encodeFrame({ type: FrameType.PROOF, proof: new Uint8Array(PROOF_BYTES) }).slice();
    expect(decodeError(proof.subarray(0, proof.byteLength - 1)).message).toMatch(/PROOF frame: 'proof'/);
    expect(decodeError(concat([proof, Uint8Array.of(0)])).message).toMatch(/PROOF frame/);
    const v0 = hello();
    v0[4] = 0;
    expect(decodeError(v0).message).toMatch(/HELLO frame: 'version' must be at least 1/);
  });

  it('STAGE_BEGIN: chunkSize and slots at least 1; STAGE_CHUNK length at least 1', () => {
    const begin = () => encodeFrame({ type: FrameType.STAGE_BEGIN, tag: 1, seq: 1, length: 10, chunkSize: 4, slots: 2 }).slice();
    const c = begin();
    dv(c).setUint32(24, 0, true);
    expect(decodeError(c).message).toMatch(/STAGE_BEGIN frame: 'chunkSize' must be at least 1/);
    const s = begin();
    dv(s).setUint16(28, 0, true);
    expect(decodeError(s).message).toMatch(/STAGE_BEGIN frame: 'slots' must be at least 1/);
    const chunk = encodeFrame({ type: FrameType.STAGE_CHUNK, seq: 1, slot: 0, offset: 0, length: 1 }).slice();
    dv(chunk).setUint32(22, 0, true);
    expect(decodeError(chunk).message).toMatch(/STAGE_CHUNK frame: 'length' must be at least 1/);
    const end = encodeFrame({ type: FrameType.STAGE_CHUNK, seq: 1, slot: 0, offset: MAX_SAFE - 1, length: 1 }).slice();
    dv(end).setUint32(22, 2, true);
    expect(decodeError(end).message).toMatch(/STAGE_CHUNK frame: 'offset' \+ 'length' exceeds/);
  });
});

// ---------------------------------------------------------------------------
// Encode refuses what would not decode
// ---------------------------------------------------------------------------

describe('encode rules', () => {
  const okEager = { type: FrameType.EAGER, tag: 1, seq: 1, fromDevice: false, data: new Uint8Array(1) };
  const okRget = {
    type: FrameType.RGET,
    tag: 1,
    seq: 1,
    kind: HandleKind.LEGACY,
    identity: new Uint8Array(64),
    base: 0n,
    allocSize: 10,
    offset: 0,
    length: 10,
    bufferId: 0n,
    deviceUuid: '',
    event: null,
  };

  it('integers out of range or not integers', () => {
    expect(encodeError({ ...okEager, tag: -1 }).message).toMatch(/EAGER frame: 'tag' must be an integer in 0..4294967295, got -1/);
    encodeError({ ...okEager, tag: 2 ** 32 });
    encodeError({ ...okEager, seq: 1.5 });
    encodeError({ ...okEager, seq: 2 ** 53 });
    encodeError({ ...okEager, seq: '1' });
    encodeError({ type: FrameType.IPC_REQ, attempt: 0, deviceUuid: '' });
    encodeError({ type: FrameType.STAGE_ACK, seq: 1, slot: 65536 });
    encodeError({ type: FrameType.STAGE_CHUNK, seq: 1, slot: 0, offset: MAX_SAFE, length: 1 });
  });

  it('bigints, booleans, handles, data', () => {
    encodeError({ ...okRget, base: -1n });
    encodeError({ ...okRget, bufferId: 1n << 64n });
    encodeError({ ...okRget, base: 1 });
    encodeError({ ...okEager, fromDevice: 1 });
    expect(encodeError({ ...okRget, identity: new Uint8Array(63) }).message).toMatch(/'identity' must be a Uint8Array of exactly 64 bytes/);
    encodeError({ ...okRget, event: new Uint8Array(65) });
    encodeError({ ...okEager, data: [1, 2] });
  });

  it('RGET bounds are checked before sending', () => {
    expect(encodeError({ ...okRget, offset: 1 }).message).toMatch(/'offset' \+ 'length' \(1 \+ 10\) must not exceed 'allocSize' \(10\)/);
  });

  it('strings: lone surrogates, sizes, UUIDs', () => {
    expect(encodeError({ type: FrameType.CLOSE, reason: 'a\ud800' }).message).toMatch(/lone UTF-16 surrogate/);
    encodeError({ type: FrameType.CLOSE, reason: 'x'.repeat(MAX_STRING_BYTES + 1) });
    encodeError({ type: FrameType.HELLO, version: 1, pid: 1, peerId: '', deviceUuid: '', nonce: new Uint8Array(NONCE_BYTES) });
    encodeError({ type: FrameType.HELLO, version: 1, pid: 1, peerId: 'p', deviceUuid: '', nonce: new Uint8Array(16) });
    encodeError({ type: FrameType.PROOF, proof: new Uint8Array(31) });
    encodeError({ type: FrameType.STAGE_BEGIN, tag: 1, seq: 1, length: 1, chunkSize: 0, slots: 1 });
    expect(encodeError({ type: FrameType.IPC_REQ, attempt: 1, deviceUuid: 'GPU-1' }).message).toMatch(/IPC_REQ frame: 'deviceUuid'/);
    encodeError({ type: FrameType.IPC_REQ, attempt: 1, deviceUuid: 'GPU-00000000-0000-0000-0000-000000000000' });
  });

  it('FIN status and unknown frame types', () => {
    encodeError({ type: FrameType.FIN, seq: 1, status: 42, message: '' });
    expect(encodeError({ type: 77 }).message).toMatch(/unknown type 77/);
  });
});

// ---------------------------------------------------------------------------
// UuidNames: readDeviceUuid with a memory of the last 8 UUIDs
// ---------------------------------------------------------------------------

// Whether two strings are one heap object: `===` compares contents, so only
// V8's %IsSameHeapObject can tell a remembered name from a fresh equal one.
setFlagsFromString('--allow-natives-syntax');
const sameObject = new Function('a', 'b', 'return %IsSameHeapObject(a, b)') as (a: string, b: string) => boolean;

const uuidBytes = fc.uint8Array({ minLength: 16, maxLength: 16 }).filter((b) => b.some((x) => x !== 0));
/** `n` distinct non-zero UUIDs, as bytes. */
const distinctUuids = (n: number): Uint8Array[] =>
  Array.from({ length: n }, (_, i) => Uint8Array.from({ length: 16 }, (_, j) => (j === 15 ? i + 1 : j === 0 ? 0xa0 : 0x11 * (j % 3))));

describe('UuidNames', () => {
  test.prop([uuidBytes, fc.nat({ max: 40 }), fc.nat({ max: 40 })], { numRuns: 200 })(
    'reads the same string as readDeviceUuid, at any offset, the first time and again',
    (id, before, after) => {
      const buf = concat([new Uint8Array(before).fill(0xff), id, new Uint8Array(after).fill(0xee)]);
      const names = new UuidNames();
      const want = readDeviceUuid(buf, before);
      expect(want).toMatch(/^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
      expect(names.read(buf, before)).toBe(want);
      expect(names.read(buf, before)).toBe(want);
      expect(names.read(id, 0)).toBe(want);
    },
  );

  it('all-zero bytes read as the empty string, remembered or not', () => {
    const names = new UuidNames();
    const zero = new Uint8Array(20);
    expect(names.read(zero, 2)).toBe('');
    expect(names.read(zero, 4)).toBe('');
    const [id] = distinctUuids(1) as [Uint8Array];
    expect(names.read(id, 0)).toBe(readDeviceUuid(id, 0));
    expect(names.read(zero, 0)).toBe('');
  });

  it('returns the identical string object for the same 16 bytes, wherever they are', () => {
    const names = new UuidNames();
    const [id] = distinctUuids(1) as [Uint8Array];
    const elsewhere = concat([new Uint8Array(7), id]);
    const first = names.read(id, 0);
    expect(sameObject(names.read(id, 0), first)).toBe(true);
    expect(sameObject(names.read(elsewhere, 7), first)).toBe(true);
    // The check can tell: readDeviceUuid builds a new (equal) string each time.
    expect(sameObject(readDeviceUuid(id, 0), readDeviceUuid(id, 0))).toBe(false);
  });

  it('compares bytes, not buffers: bytes changed in place read as their new UUID', () => {
    const names = new UuidNames();
    const buf = distinctUuids(1)[0]!.slice();
    const before = names.read(buf, 0);
    buf[5] = buf[5]! ^ 0xff;
    const after = names.read(buf, 0);
    expect(after).toBe(readDeviceUuid(buf, 0));
    expect(after).not.toBe(before);
  });

  it('remembers 8 UUIDs, replacing the oldest (round robin); more than 8 still read correctly', () => {
    const names = new UuidNames();
    const ids = distinctUuids(20);
    const first = ids.slice(0, 8).map((id) => names.read(id, 0));
    names.read(ids[8]!, 0); // a ninth: replaces the first remembered
    ids.slice(1, 8).forEach((id, i) => expect(sameObject(names.read(id, 0), first[i + 1]!)).toBe(true));
    const again = names.read(ids[0]!, 0); // forgotten: read afresh (and replaces the second)
    expect(again).toBe(first[0]);
    expect(sameObject(again, first[0]!)).toBe(false);
    expect(sameObject(names.read(ids[1]!, 0), first[1]!)).toBe(false);
    // Cycling through 20 (more than it remembers), every read is right.
    for (let round = 0; round < 3; round++) for (const id of ids) expect(names.read(id, 0)).toBe(readDeviceUuid(id, 0));
  });
});

describe('decodeFrame with a UuidNames', () => {
  /** Frames that carry a device UUID, drawn from a pool small enough to repeat and large enough to evict. */
  const uuidFramesArb = fc.uniqueArray(uuidBytes.map(deviceUuidFromBytes), { minLength: 1, maxLength: 12 }).chain((pool) => {
    const poolUuid = fc.oneof({ weight: 5, arbitrary: fc.constantFrom(...pool) }, { weight: 1, arbitrary: fc.constant('') });
    const rget = rgetArb(poolUuid);
    const ipcReq = fc.record({ type: fc.constant(FrameType.IPC_REQ as const), attempt, deviceUuid: poolUuid });
    const ipcAck = fc.record({ type: fc.constant(FrameType.IPC_ACK as const), attempt, ok: fc.boolean(), deviceUuid: poolUuid });
    const invalidate = fc.record({ type: fc.constant(FrameType.INVALIDATE as const), deviceUuid: poolUuid, base: u64, bufferId: u64 });
    return fc.array(fc.oneof(rget, ipcReq, ipcAck, invalidate) as fc.Arbitrary<Frame>, { minLength: 1, maxLength: 40 });
  });

  test.prop([uuidFramesArb], { numRuns: 150 })('one UuidNames over a stream of frames decodes the same frames as none', (frames) => {
    const names = new UuidNames();
    for (const f of frames) {
      const bytes = encodeFrame(f);
      const withNames = decodeFrame(bytes, names);
      expect(withNames).toEqual(decodeFrame(bytes));
      expect(withNames).toEqual(f);
    }
  });

  test.prop([fc.array(frameArb, { minLength: 1, maxLength: 20 })], { numRuns: 100 })('every frame type decodes the same with a UuidNames', (frames) => {
    const names = new UuidNames();
    for (const f of frames) {
      const bytes = encodeFrame(f);
      expect(decodeFrame(bytes, names)).toEqual(decodeFrame(bytes));
    }
  });

  it('frames naming the same device share one string', () => {
    const names = new UuidNames();
    const deviceUuid = deviceUuidFromBytes(distinctUuids(1)[0]!);
    const a = decodeFrame(encodeFrame({ type: FrameType.IPC_REQ, attempt: 1, deviceUuid }).slice(), names);
    const b = decodeFrame(encodeFrame({ type: FrameType.IPC_ACK, attempt: 1, ok: true, deviceUuid }).slice(), names);
    if (a.type !== FrameType.IPC_REQ || b.type !== FrameType.IPC_ACK) throw new Error('wrong frame types');
    expect(a.deviceUuid).toBe(deviceUuid);
    expect(sameObject(a.deviceUuid, b.deviceUuid)).toBe(true);
  });
});

describe('u64 fields at the 32-bit boundaries', () => {
  const edges = [0n, 1n, 0xffff_ffffn, 1n << 32n, (1n << 32n) + 1n, 0x8000_0000n, 1n << 63n, (1n << 64n) - 1n, 0x1234_5678_9abc_def0n];

  it.each(edges.map((v) => [v]))('RGET base and bufferId %s decode to the same bigint', (v) => {
    const f: Frame = {
      type: FrameType.RGET,
      tag: 1,
      seq: 2,
      kind: HandleKind.LEGACY,
      identity: new Uint8Array(64).fill(3),
      base: v,
      allocSize: 10,
      offset: 0,
      length: 10,
      bufferId: (1n << 64n) - 1n - v,
      deviceUuid: '',
      event: null,
    };
    expect(decodeFrame(encodeFrame(f))).toEqual(f);
    const inv: Frame = { type: FrameType.INVALIDATE, deviceUuid: '', base: v, bufferId: v };
    expect(decodeFrame(encodeFrame(inv))).toEqual(inv);
  });
});

describe('file-descriptor memory frames', () => {
  const offer = {
    type: FrameType.FD_OFFER as const,
    kind: HandleKind.VMM,
    bufferId: 5n,
    deviceUuid: '',
    base: 0x1000n,
    size: 6,
    poolId: 0,
    exportData: new Uint8Array(64),
    chunks: [
      { offset: 0, size: 2 },
      { offset: 2, size: 4 },
    ],
  };

  it('RGET of a descriptor key: the kind after seq, the identity (pool export data) after it', () => {
    const bytes = encodeFrame({
      type: FrameType.RGET,
      tag: 1,
      seq: 2,
      kind: HandleKind.POOL,
      identity: new Uint8Array(64).fill(0xab),
      base: 3n,
      allocSize: 10,
      offset: 4,
      length: 6,
      bufferId: 7n,
      deviceUuid: '',
      event: null,
    });
    expect(bytes).toEqual(
      hex(
        `53 ${WIRE_VERSION.toString(16).padStart(2, '0')} 0b 00  01000000  0200000000000000  02  ${'ab'.repeat(64)}  0300000000000000  0a00000000000000  0400000000000000  0600000000000000  0700000000000000  ${'00'.repeat(16)}  00`,
      ),
    );
    const unknown = bytes.slice();
    unknown[16] = 3; // no such kind (yet: a fabric handle would be one)
    expect(decodeError(unknown).message).toMatch(/RGET frame: 'kind' must be a HandleKind/);
  });

  it('FD_OFFER: the chunks as a u16 count and (offset, size) pairs, last', () => {
    const bytes = encodeFrame(offer);
    expect(bytes.byteLength).toBe(115 + 2 * 16);
    expect(dv(bytes).getUint16(113, true)).toBe(2);
    expect(dv(bytes).getBigUint64(115 + 16, true)).toBe(2n);
    expect(decodeFrame(bytes)).toEqual(offer);
  });

  it('FD_OFFER: VMM chunks must tile 0..size, a POOL offer has none; both ways', () => {
    expect(encodeError({ ...offer, size: 7 }).message).toMatch(/FD_OFFER frame: 'chunks' end at 6, not at 'size' \(7\)/);
    expect(
      encodeError({
        ...offer,
        chunks: [
          { offset: 0, size: 2 },
          { offset: 3, size: 3 },
        ],
      }).message,
    ).toMatch(/'chunks' \[1\] must start at 2/);
    expect(encodeError({ ...offer, chunks: [] }).message).toMatch(/at least one chunk/);
    expect(encodeError({ ...offer, poolId: 1 }).message).toMatch(/'poolId' must be 0 for a VMM offer/);
    expect(encodeError({ ...offer, kind: HandleKind.POOL }).message).toMatch(/'chunks' must be empty for a POOL offer/);
    expect(encodeError({ ...offer, kind: HandleKind.LEGACY }).message).toMatch(/'kind' must be a HandleKind other than LEGACY/);
    const bad = encodeFrame(offer).slice();
    dv(bad).setBigUint64(115 + 16 + 8, 5n, true); // second chunk 5 bytes: ends at 7, size says 6
    expect(decodeError(bad).message).toMatch(/Malformed FD_OFFER frame: 'chunks' end at 7/);
    const legacy = encodeFrame({ type: FrameType.FD_RELEASE, kind: HandleKind.VMM, id: 1n, base: 0n }).slice();
    legacy[4] = HandleKind.LEGACY;
    expect(decodeError(legacy).message).toMatch(/FD_RELEASE frame: 'kind' must be a HandleKind other than LEGACY/);
  });
});

describe('FINS', () => {
  it('carries 1..MAX_FINS sequence numbers, in order', () => {
    const most: Frame = { type: FrameType.FINS, seqs: Array.from({ length: MAX_FINS }, (_, i) => MAX_SAFE - i) };
    expect(decodeFrame(encodeFrame(most))).toEqual(most);
    expect(decodeFrame(encodeFrame({ type: FrameType.FINS, seqs: [3, 1, 2] }))).toEqual({ type: FrameType.FINS, seqs: [3, 1, 2] });
  });

  it('refuses an empty list and one over MAX_FINS, encoding and decoding', () => {
    encodeError({ type: FrameType.FINS, seqs: [] });
    encodeError({ type: FrameType.FINS, seqs: new Array(MAX_FINS + 1).fill(1) });
    encodeError({ type: FrameType.FINS, seqs: [-1] });
    const one = encodeFrame({ type: FrameType.FINS, seqs: [7] }).slice();
    const empty = one.slice(0, one.byteLength - 8);
    empty.fill(0, 4, 8); // count 0, no entries
    expect(decodeError(empty).message).toMatch(/seqs\.length/);
    const tooMany = one.slice();
    new DataView(tooMany.buffer).setUint32(4, MAX_FINS + 1, true);
    expect(decodeError(tooMany).message).toMatch(/seqs\.length/);
  });
});
