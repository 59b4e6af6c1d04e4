// @ts-nocheck: generated JavaScript; its types are the CodecFactory each function is declared as.
/**
 * The frame codec's encoders and decoders, generated from src/wire/schema.ts by
 * src/wire/compile.ts: do not edit; after changing the schema run `npm run codec`
 * (test/unit/wire/codec-generated.test.ts fails while this file is stale).
 */
import type { CodecFactory } from './compile.js';

const HELLO: CodecFactory = (P, K) => [
  function encode(f, uuids) {
    const v0 = P.checkInt(1, "version", f.version, 1, 255);
    const v1 = P.checkInt(1, "pid", f.pid, 0, 4294967295);
    const v3 = P.checkString(1, "peerId", f.peerId, 1, 256);
    const v4 = P.checkBytes(1, "nonce", f.nonce, 32);
    const v5 = P.checkInt(1, "features", f.features ?? 0, 0, 4294967295);
    const w = new P.Writer(1, 63 + v3);
    w.u8(v0);
    w.u32(v1);
    { const u = f.deviceUuid; const k = uuids !== undefined && typeof u === 'string' ? uuids.bytesOf(u) : undefined; if (k !== undefined) w.raw(k); else w.uuid("deviceUuid", u); }
    w.str(f.peerId, v3);
    w.raw(v4);
    w.u32(v5);
    return w.done();
  },
  function decode(r) {
    const v0 = r.u8("version");
    if (v0 < 1) throw P.decodeError(1, "version", 'must be at least 1, got ' + v0);
    const v1 = r.u32("pid");
    const v2 = r.uuid("deviceUuid");
    const v3 = r.str("peerId", 1, 256);
    const v4 = r.copy("nonce", 32);
    const v5 = r.u32("features");
    const o = { type: 1, version: v0, pid: v1, deviceUuid: v2, peerId: v3, nonce: v4, features: v5 };
    return o;
  },
];

const PROOF: CodecFactory = (P, K) => [
  function encode(f, uuids) {
    const v0 = P.checkBytes(7, "proof", f.proof, 32);
    const w = new P.Writer(7, 36);
    w.raw(v0);
    return w.done();
  },
  function decode(r) {
    const v0 = r.copy("proof", 32);
    const o = { type: 7, proof: v0 };
    return o;
  },
];

const IPC_REQ: CodecFactory = (P, K) => [
  function encode(f, uuids) {
    const v0 = P.checkInt(2, "attempt", f.attempt, 1, 4294967295);
    const v2 = P.checkOptional(2, "probe", f.probe, 96, undefined);
    const w = new P.Writer(2, 25 + (v2 === undefined ? 0 : 96));
    w.u32(v0);
    { const u = f.deviceUuid; const k = uuids !== undefined && typeof u === 'string' ? uuids.bytesOf(u) : undefined; if (k !== undefined) w.raw(k); else w.uuid("deviceUuid", u); }
    if (v2 === undefined) w.u8(0); else { w.u8(1); w.raw(v2); }
    return w.done();
  },
  function decode(r) {
    const v0 = r.u32("attempt");
    if (v0 < 1) throw P.decodeError(2, "attempt", 'must be at least 1, got ' + v0);
    const v1 = r.uuid("deviceUuid");
    const v2 = r.bool("probe.present") ? r.copy("probe", 96) : undefined;
    const o = { type: 2, attempt: v0, deviceUuid: v1 };
    if (v2 !== undefined) o.probe = v2;
    return o;
  },
];

const IPC_ACK: CodecFactory = (P, K) => [
  function encode(f, uuids) {
    const v0 = P.checkInt(3, "attempt", f.attempt, 1, 4294967295);
    const v1 = P.checkBool(3, "ok", f.ok);
    const v3 = P.checkOptional(3, "probe", f.probe, 96, undefined);
    const w = new P.Writer(3, 26 + (v3 === undefined ? 0 : 96));
    w.u32(v0);
    w.u8(v1 ? 1 : 0);
    { const u = f.deviceUuid; const k = uuids !== undefined && typeof u === 'string' ? uuids.bytesOf(u) : undefined; if (k !== undefined) w.raw(k); else w.uuid("deviceUuid", u); }
    if (v3 === undefined) w.u8(0); else { w.u8(1); w.raw(v3); }
    return w.done();
  },
  function decode(r) {
    const v0 = r.u32("attempt");
    if (v0 < 1) throw P.decodeError(3, "attempt", 'must be at least 1, got ' + v0);
    const v1 = r.bool("ok");
    const v2 = r.uuid("deviceUuid");
    const v3 = r.bool("probe.present") ? r.copy("probe", 96) : undefined;
    const o = { type: 3, attempt: v0, ok: v1, deviceUuid: v2 };
    if (v3 !== undefined) o.probe = v3;
    return o;
  },
];

const IPC_NOTREADY: CodecFactory = (P, K) => [
  function encode(f, uuids) {
    const v0 = P.checkInt(4, "attempt", f.attempt, 1, 4294967295);
    const w = new P.Writer(4, 8);
    w.u32(v0);
    return w.done();
  },
  function decode(r) {
    const v0 = r.u32("attempt");
    if (v0 < 1) throw P.decodeError(4, "attempt", 'must be at least 1, got ' + v0);
    const o = { type: 4, attempt: v0 };
    return o;
  },
];

const IPC_CONFIRM: CodecFactory = (P, K) => [
  function encode(f, uuids) {
    const v0 = P.checkInt(5, "attempt", f.attempt, 1, 4294967295);
    const w = new P.Writer(5, 8);
    w.u32(v0);
    return w.done();
  },
  function decode(r) {
    const v0 = r.u32("attempt");
    if (v0 < 1) throw P.decodeError(5, "attempt", 'must be at least 1, got ' + v0);
    const o = { type: 5, attempt: v0 };
    return o;
  },
];

const IPC_ABORT: CodecFactory = (P, K) => [
  function encode(f, uuids) {
    const v0 = f.reason === '' ? 0 : P.checkString(6, "reason", f.reason, 0, 4096);
    const w = new P.Writer(6, 6 + v0);
    w.str(f.reason, v0);
    return w.done();
  },
  function decode(r) {
    const v0 = r.str("reason", 0, 4096);
    const o = { type: 6, reason: v0 };
    return o;
  },
];

const EAGER: CodecFactory = (P, K) => [
  function encode(f, uuids) {
    const v0 = P.checkInt(10, "tag", f.tag, 0, 4294967295);
    const v1 = P.checkInt(10, "seq", f.seq, 0, 9007199254740991);
    const v2 = P.checkBool(10, "fromDevice", f.fromDevice);
    const v3 = P.checkData(10, "data", f.data, 0, 4294967295);
    const w = new P.Writer(10, 21 + v3.byteLength);
    w.u32(v0);
    w.u64(v1);
    w.u8(v2 ? 1 : 0);
    w.u32(v3.byteLength);
    w.raw(v3);
    return w.done();
  },
  function decode(r) {
    const v0 = r.u32("tag");
    const v1 = r.u64("seq");
    const v2 = r.bool("fromDevice");
    const v3 = r.subview("data", r.u32("data.length"));
    const o = { type: 10, tag: v0, seq: v1, fromDevice: v2, data: v3 };
    return o;
  },
];

const RGET: CodecFactory = (P, K) => [
  function encode(f, uuids) {
    const v0 = P.checkInt(11, "tag", f.tag, 0, 4294967295);
    const v1 = P.checkInt(11, "seq", f.seq, 0, 9007199254740991);
    const v2 = P.checkEnum(11, "kind", f.kind, K[0], "HandleKind");
    const v3 = P.checkBytes(11, "identity", f.identity, 64);
    const v4 = P.checkBig(11, "base", f.base);
    const v5 = P.checkInt(11, "allocSize", f.allocSize, 0, 9007199254740991);
    const v6 = P.checkInt(11, "offset", f.offset, 0, 9007199254740991);
    const v7 = P.checkInt(11, "length", f.length, 0, 9007199254740991);
    const v8 = P.checkBig(11, "bufferId", f.bufferId);
    const v10 = P.checkOptional(11, "event", f.event, 64, null);
    { const bad = K[1](f, true); if (bad !== undefined) throw P.encodeError(11, bad.field, bad.problem); }
    const w = new P.Writer(11, 138 + (v10 === null ? 0 : 64));
    w.u32(v0);
    w.u64(v1);
    w.u8(v2);
    w.raw(v3);
    w.big(v4);
    w.u64(v5);
    w.u64(v6);
    w.u64(v7);
    w.big(v8);
    { const u = f.deviceUuid; const k = uuids !== undefined && typeof u === 'string' ? uuids.bytesOf(u) : undefined; if (k !== undefined) w.raw(k); else w.uuid("deviceUuid", u); }
    if (v10 === null) w.u8(0); else { w.u8(1); w.raw(v10); }
    return w.done();
  },
  function decode(r) {
    const v0 = r.u32("tag");
    const v1 = r.u64("seq");
    const v2 = r.u8("kind");
    if (K[0][v2] === undefined) throw P.decodeError(11, "kind", "must be a HandleKind (0, 1, 2), got " + v2);
    const v3 = r.copy("identity", 64);
    const v4 = r.big("base");
    const v5 = r.u64("allocSize");
    const v6 = r.u64("offset");
    const v7 = r.u64("length");
    const v8 = r.big("bufferId");
    const v9 = r.uuid("deviceUuid");
    const v10 = r.bool("event.present") ? r.copy("event", 64) : null;
    const o = { type: 11, tag: v0, seq: v1, kind: v2, identity: v3, base: v4, allocSize: v5, offset: v6, length: v7, bufferId: v8, deviceUuid: v9, event: v10 };
    { const bad = K[1](o, false); if (bad !== undefined) throw P.decodeError(11, bad.field, bad.problem); }
    return o;
  },
];

const FIN: CodecFactory = (P, K) => [
  function encode(f, uuids) {
    const v0 = P.checkInt(12, "seq", f.seq, 0, 9007199254740991);
    const v1 = P.checkEnum(12, "status", f.status, K[0], "FinStatus");
    const v2 = f.message === '' ? 0 : P.checkString(12, "message", f.message, 0, 4096);
    const w = new P.Writer(12, 15 + v2);
    w.u64(v0);
    w.u8(v1);
    w.str(f.message, v2);
    return w.done();
  },
  function decode(r) {
    const v0 = r.u64("seq");
    const v1 = r.u8("status");
    if (K[0][v1] === undefined) throw P.decodeError(12, "status", "must be a FinStatus (0, 1, 2, 3, 4, 5, 6), got " + v1);
    const v2 = r.str("message", 0, 4096);
    const o = { type: 12, seq: v0, status: v1, message: v2 };
    return o;
  },
];

const CANCEL: CodecFactory = (P, K) => [
  function encode(f, uuids) {
    const v0 = P.checkInt(13, "seq", f.seq, 0, 9007199254740991);
    const w = new P.Writer(13, 12);
    w.u64(v0);
    return w.done();
  },
  function decode(r) {
    const v0 = r.u64("seq");
    const o = { type: 13, seq: v0 };
    return o;
  },
];

const FINS: CodecFactory = (P, K) => [
  function encode(f, uuids) {
    const v0 = P.checkList(14, "seqs", f.seqs, 1, 1024);
    const w = new P.Writer(14, 8 + 8 * v0.length);
    w.u32(v0.length);
    for (let i = 0; i < v0.length; i++) w.u64(v0[i]);
    return w.done();
  },
  function decode(r) {
    const n0 = r.u32("seqs.length");
    if (n0 < 1 || n0 > 1024) throw P.decodeError(14, "seqs.length", 'must be 1..1024, got ' + n0);
    const v0 = new Array(n0);
    for (let i = 0; i < n0; i++) v0[i] = r.u64("seqs[]");
    const o = { type: 14, seqs: v0 };
    return o;
  },
];

const CREDIT: CodecFactory = (P, K) => [
  function encode(f, uuids) {
    const v0 = P.checkInt(15, "consumed", f.consumed, 0, 9007199254740991);
    const w = new P.Writer(15, 12);
    w.u64(v0);
    return w.done();
  },
  function decode(r) {
    const v0 = r.u64("consumed");
    const o = { type: 15, consumed: v0 };
    return o;
  },
];

const STAGE_BEGIN: CodecFactory = (P, K) => [
  function encode(f, uuids) {
    const v0 = P.checkInt(20, "tag", f.tag, 0, 4294967295);
    const v1 = P.checkInt(20, "seq", f.seq, 0, 9007199254740991);
    const v2 = P.checkInt(20, "length", f.length, 0, 9007199254740991);
    const v3 = P.checkInt(20, "chunkSize", f.chunkSize, 1, 4294967295);
    const v4 = P.checkInt(20, "slots", f.slots, 1, 65535);
    const w = new P.Writer(20, 30);
    w.u32(v0);
    w.u64(v1);
    w.u64(v2);
    w.u32(v3);
    w.u16(v4);
    return w.done();
  },
  function decode(r) {
    const v0 = r.u32("tag");
    const v1 = r.u64("seq");
    const v2 = r.u64("length");
    const v3 = r.u32("chunkSize");
    if (v3 < 1) throw P.decodeError(20, "chunkSize", 'must be at least 1, got ' + v3);
    const v4 = r.u16("slots");
    if (v4 < 1) throw P.decodeError(20, "slots", 'must be at least 1, got ' + v4);
    const o = { type: 20, tag: v0, seq: v1, length: v2, chunkSize: v3, slots: v4 };
    return o;
  },
];

const STAGE_CHUNK: CodecFactory = (P, K) => [
  function encode(f, uuids) {
    const v0 = P.checkInt(21, "seq", f.seq, 0, 9007199254740991);
    const v1 = P.checkInt(21, "slot", f.slot, 0, 65535);
    const v2 = P.checkInt(21, "offset", f.offset, 0, 9007199254740991);
    const v3 = P.checkInt(21, "length", f.length, 1, 4294967295);
    { const bad = K[0](f, true); if (bad !== undefined) throw P.encodeError(21, bad.field, bad.problem); }
    const w = new P.Writer(21, 26);
    w.u64(v0);
    w.u16(v1);
    w.u64(v2);
    w.u32(v3);
    return w.done();
  },
  function decode(r) {
    const v0 = r.u64("seq");
    const v1 = r.u16("slot");
    const v2 = r.u64("offset");
    const v3 = r.u32("length");
    if (v3 < 1) throw P.decodeError(21, "length", 'must be at least 1, got ' + v3);
    const o = { type: 21, seq: v0, slot: v1, offset: v2, length: v3 };
    { const bad = K[0](o, false); if (bad !== undefined) throw P.decodeError(21, bad.field, bad.problem); }
    return o;
  },
];

const STAGE_ACK: CodecFactory = (P, K) => [
  function encode(f, uuids) {
    const v0 = P.checkInt(22, "seq", f.seq, 0, 9007199254740991);
    const v1 = P.checkInt(22, "slot", f.slot, 0, 65535);
    const w = new P.Writer(22, 14);
    w.u64(v0);
    w.u16(v1);
    return w.done();
  },
  function decode(r) {
    const v0 = r.u64("seq");
    const v1 = r.u16("slot");
    const o = { type: 22, seq: v0, slot: v1 };
    return o;
  },
];

const INVALIDATE: CodecFactory = (P, K) => [
  function encode(f, uuids) {
    const v1 = P.checkBig(30, "base", f.base);
    const v2 = P.checkBig(30, "bufferId", f.bufferId);
    const w = new P.Writer(30, 36);
    { const u = f.deviceUuid; const k = uuids !== undefined && typeof u === 'string' ? uuids.bytesOf(u) : undefined; if (k !== undefined) w.raw(k); else w.uuid("deviceUuid", u); }
    w.big(v1);
    w.big(v2);
    return w.done();
  },
  function decode(r) {
    const v0 = r.uuid("deviceUuid");
    const v1 = r.big("base");
    const v2 = r.big("bufferId");
    const o = { type: 30, deviceUuid: v0, base: v1, bufferId: v2 };
    return o;
  },
];

const FD_OFFER: CodecFactory = (P, K) => [
  function encode(f, uuids) {
    const v0 = P.checkEnum(31, "kind", f.kind, K[0], "HandleKind other than LEGACY");
    const v1 = P.checkBig(31, "bufferId", f.bufferId);
    const v3 = P.checkBig(31, "base", f.base);
    const v4 = P.checkInt(31, "size", f.size, 0, 9007199254740991);
    const v5 = P.checkInt(31, "poolId", f.poolId, 0, 4294967295);
    const v6 = P.checkBytes(31, "exportData", f.exportData, 64);
    const v7 = P.checkExtents(31, "chunks", f.chunks, 0, 1024);
    { const bad = K[1](f, true); if (bad !== undefined) throw P.encodeError(31, bad.field, bad.problem); }
    const w = new P.Writer(31, 115 + 16 * v7.length);
    w.u8(v0);
    w.big(v1);
    { const u = f.deviceUuid; const k = uuids !== undefined && typeof u === 'string' ? uuids.bytesOf(u) : undefined; if (k !== undefined) w.raw(k); else w.uuid("deviceUuid", u); }
    w.big(v3);
    w.u64(v4);
    w.u32(v5);
    w.raw(v6);
    w.u16(v7.length);
    for (let i = 0; i < v7.length; i++) { w.u64(v7[i].offset); w.u64(v7[i].size); }
    return w.done();
  },
  function decode(r) {
    const v0 = r.u8("kind");
    if (K[0][v0] === undefined) throw P.decodeError(31, "kind", "must be a HandleKind other than LEGACY (1, 2), got " + v0);
    const v1 = r.big("bufferId");
    const v2 = r.uuid("deviceUuid");
    const v3 = r.big("base");
    const v4 = r.u64("size");
    const v5 = r.u32("poolId");
    const v6 = r.copy("exportData", 64);
    const n7 = r.u16("chunks.length");
    if (n7 < 0 || n7 > 1024) throw P.decodeError(31, "chunks.length", 'must be 0..1024, got ' + n7);
    const v7 = new Array(n7);
    for (let i = 0; i < n7; i++) { const offset = r.u64("chunks[]"); v7[i] = { offset, size: r.u64("chunks[]") }; }
    const o = { type: 31, kind: v0, bufferId: v1, deviceUuid: v2, base: v3, size: v4, poolId: v5, exportData: v6, chunks: v7 };
    { const bad = K[1](o, false); if (bad !== undefined) throw P.decodeError(31, bad.field, bad.problem); }
    return o;
  },
];

const FD_POOL: CodecFactory = (P, K) => [
  function encode(f, uuids) {
    const v0 = P.checkInt(32, "poolId", f.poolId, 0, 4294967295);
    const w = new P.Writer(32, 24);
    w.u32(v0);
    { const u = f.deviceUuid; const k = uuids !== undefined && typeof u === 'string' ? uuids.bytesOf(u) : undefined; if (k !== undefined) w.raw(k); else w.uuid("deviceUuid", u); }
    return w.done();
  },
  function decode(r) {
    const v0 = r.u32("poolId");
    const v1 = r.uuid("deviceUuid");
    const o = { type: 32, poolId: v0, deviceUuid: v1 };
    return o;
  },
];

const FD_RELEASE: CodecFactory = (P, K) => [
  function encode(f, uuids) {
    const v0 = P.checkEnum(33, "kind", f.kind, K[0], "HandleKind other than LEGACY");
    const v1 = P.checkBig(33, "id", f.id);
    const v2 = P.checkBig(33, "base", f.base);
    const w = new P.Writer(33, 21);
    w.u8(v0);
    w.big(v1);
    w.big(v2);
    return w.done();
  },
  function decode(r) {
    const v0 = r.u8("kind");
    if (K[0][v0] === undefined) throw P.decodeError(33, "kind", "must be a HandleKind other than LEGACY (1, 2), got " + v0);
    const v1 = r.big("id");
    const v2 = r.big("base");
    const o = { type: 33, kind: v0, id: v1, base: v2 };
    return o;
  },
];

const FD_DESCRIPTOR: CodecFactory = (P, K) => [
  function encode(f, uuids) {
    const v0 = P.checkEnum(34, "kind", f.kind, K[0], "HandleKind other than LEGACY");
    const v1 = P.checkBig(34, "id", f.id);
    const v2 = P.checkBig(34, "base", f.base);
    const v3 = P.checkInt(34, "index", f.index, 0, 65535);
    const w = new P.Writer(34, 23);
    w.u8(v0);
    w.big(v1);
    w.big(v2);
    w.u16(v3);
    return w.done();
  },
  function decode(r) {
    const v0 = r.u8("kind");
    if (K[0][v0] === undefined) throw P.decodeError(34, "kind", "must be a HandleKind other than LEGACY (1, 2), got " + v0);
    const v1 = r.big("id");
    const v2 = r.big("base");
    const v3 = r.u16("index");
    const o = { type: 34, kind: v0, id: v1, base: v2, index: v3 };
    return o;
  },
];

const SEGMENT: CodecFactory = (P, K) => [
  function encode(f, uuids) {
    const v0 = P.checkEnum(35, "kind", f.kind, K[0], "SegmentKind");
    const v1 = P.checkInt(35, "bytes", f.bytes, 0, 9007199254740991);
    const w = new P.Writer(35, 13);
    w.u8(v0);
    w.u64(v1);
    return w.done();
  },
  function decode(r) {
    const v0 = r.u8("kind");
    if (K[0][v0] === undefined) throw P.decodeError(35, "kind", "must be a SegmentKind (1, 2, 3), got " + v0);
    const v1 = r.u64("bytes");
    const o = { type: 35, kind: v0, bytes: v1 };
    return o;
  },
];

const CLOSE: CodecFactory = (P, K) => [
  function encode(f, uuids) {
    const v0 = f.reason === '' ? 0 : P.checkString(40, "reason", f.reason, 0, 4096);
    const w = new P.Writer(40, 6 + v0);
    w.str(f.reason, v0);
    return w.done();
  },
  function decode(r) {
    const v0 = r.str("reason", 0, 4096);
    const o = { type: 40, reason: v0 };
    return o;
  },
];

const REG_OFFER: CodecFactory = (P, K) => [
  function encode(f, uuids) {
    const v0 = P.checkInt(41, "regId", f.regId, 1, 4294967295);
    const v1 = P.checkEnum(41, "kind", f.kind, K[0], "HandleKind");
    const v3 = P.checkBig(41, "base", f.base);
    const v4 = P.checkInt(41, "allocSize", f.allocSize, 0, 9007199254740991);
    const v5 = P.checkInt(41, "offset", f.offset, 0, 9007199254740991);
    const v6 = P.checkInt(41, "length", f.length, 0, 9007199254740991);
    const v7 = P.checkBig(41, "bufferId", f.bufferId);
    const v8 = P.checkBytes(41, "handle", f.handle, 64);
    { const bad = K[1](f, true); if (bad !== undefined) throw P.encodeError(41, bad.field, bad.problem); }
    const w = new P.Writer(41, 129);
    w.u32(v0);
    w.u8(v1);
    { const u = f.deviceUuid; const k = uuids !== undefined && typeof u === 'string' ? uuids.bytesOf(u) : undefined; if (k !== undefined) w.raw(k); else w.uuid("deviceUuid", u); }
    w.big(v3);
    w.u64(v4);
    w.u64(v5);
    w.u64(v6);
    w.big(v7);
    w.raw(v8);
    return w.done();
  },
  function decode(r) {
    const v0 = r.u32("regId");
    if (v0 < 1) throw P.decodeError(41, "regId", 'must be at least 1, got ' + v0);
    const v1 = r.u8("kind");
    if (K[0][v1] === undefined) throw P.decodeError(41, "kind", "must be a HandleKind (0, 1, 2), got " + v1);
    const v2 = r.uuid("deviceUuid");
    const v3 = r.big("base");
    const v4 = r.u64("allocSize");
    const v5 = r.u64("offset");
    const v6 = r.u64("length");
    const v7 = r.big("bufferId");
    const v8 = r.copy("handle", 64);
    const o = { type: 41, regId: v0, kind: v1, deviceUuid: v2, base: v3, allocSize: v4, offset: v5, length: v6, bufferId: v7, handle: v8 };
    { const bad = K[1](o, false); if (bad !== undefined) throw P.decodeError(41, bad.field, bad.problem); }
    return o;
  },
];

const REG_RELEASE: CodecFactory = (P, K) => [
  function encode(f, uuids) {
    const v0 = P.checkInt(42, "regId", f.regId, 1, 4294967295);
    const w = new P.Writer(42, 8);
    w.u32(v0);
    return w.done();
  },
  function decode(r) {
    const v0 = r.u32("regId");
    if (v0 < 1) throw P.decodeError(42, "regId", 'must be at least 1, got ' + v0);
    const o = { type: 42, regId: v0 };
    return o;
  },
];

const PT_OFFER: CodecFactory = (P, K) => [
  function encode(f, uuids) {
    const v0 = P.checkInt(43, "ptId", f.ptId, 1, 4294967295);
    const v1 = P.checkEnum(43, "role", f.role, K[0], "PtRole");
    const v2 = P.checkInt(43, "regId", f.regId, 1, 4294967295);
    const v3 = P.checkInt(43, "offset", f.offset, 0, 9007199254740991);
    const v4 = P.checkInt(43, "length", f.length, 0, 9007199254740991);
    const v5 = P.checkInt(43, "flagRegId", f.flagRegId, 1, 4294967295);
    const v6 = P.checkInt(43, "slot", f.slot, 0, 4294967295);
    const w = new P.Writer(43, 37);
    w.u32(v0);
    w.u8(v1);
    w.u32(v2);
    w.u64(v3);
    w.u64(v4);
    w.u32(v5);
    w.u32(v6);
    return w.done();
  },
  function decode(r) {
    const v0 = r.u32("ptId");
    if (v0 < 1) throw P.decodeError(43, "ptId", 'must be at least 1, got ' + v0);
    const v1 = r.u8("role");
    if (K[0][v1] === undefined) throw P.decodeError(43, "role", "must be a PtRole (0, 1), got " + v1);
    const v2 = r.u32("regId");
    if (v2 < 1) throw P.decodeError(43, "regId", 'must be at least 1, got ' + v2);
    const v3 = r.u64("offset");
    const v4 = r.u64("length");
    const v5 = r.u32("flagRegId");
    if (v5 < 1) throw P.decodeError(43, "flagRegId", 'must be at least 1, got ' + v5);
    const v6 = r.u32("slot");
    const o = { type: 43, ptId: v0, role: v1, regId: v2, offset: v3, length: v4, flagRegId: v5, slot: v6 };
    return o;
  },
];

const PT_FAIL: CodecFactory = (P, K) => [
  function encode(f, uuids) {
    const v0 = P.checkInt(44, "ptId", f.ptId, 1, 4294967295);
    const v1 = f.reason === '' ? 0 : P.checkString(44, "reason", f.reason, 0, 4096);
    const w = new P.Writer(44, 10 + v1);
    w.u32(v0);
    w.str(f.reason, v1);
    return w.done();
  },
  function decode(r) {
    const v0 = r.u32("ptId");
    if (v0 < 1) throw P.decodeError(44, "ptId", 'must be at least 1, got ' + v0);
    const v1 = r.str("reason", 0, 4096);
    const o = { type: 44, ptId: v0, reason: v1 };
    return o;
  },
];

const REG_FAIL: CodecFactory = (P, K) => [
  function encode(f, uuids) {
    const v0 = P.checkInt(45, "regId", f.regId, 1, 4294967295);
    const v1 = f.reason === '' ? 0 : P.checkString(45, "reason", f.reason, 0, 4096);
    const w = new P.Writer(45, 10 + v1);
    w.u32(v0);
    w.str(f.reason, v1);
    return w.done();
  },
  function decode(r) {
    const v0 = r.u32("regId");
    if (v0 < 1) throw P.decodeError(45, "regId", 'must be at least 1, got ' + v0);
    const v1 = r.str("reason", 0, 4096);
    const o = { type: 45, regId: v0, reason: v1 };
    return o;
  },
];

const RING_OFFER: CodecFactory = (P, K) => [
  function encode(f, uuids) {
    const v0 = P.checkInt(50, "capacity", f.capacity, 0, 4294967295);
    const w = new P.Writer(50, 8);
    w.u32(v0);
    return w.done();
  },
  function decode(r) {
    const v0 = r.u32("capacity");
    const o = { type: 50, capacity: v0 };
    return o;
  },
];

const RING_SWITCH: CodecFactory = (P, K) => [
  function encode(f, uuids) {
    const w = new P.Writer(51, 4);
    return w.done();
  },
  function decode(r) {
    const o = { type: 51 };
    return o;
  },
];

const DOORBELL: CodecFactory = (P, K) => [
  function encode(f, uuids) {
    const w = new P.Writer(52, 4);
    return w.done();
  },
  function decode(r) {
    const o = { type: 52 };
    return o;
  },
];

const SPILL: CodecFactory = (P, K) => [
  function encode(f, uuids) {
    const v0 = P.checkInt(53, "seq", f.seq, 0, 4294967295);
    const v1 = P.checkData(53, "frame", f.frame, 4, 4294967295);
    const w = new P.Writer(53, 12 + v1.byteLength);
    w.u32(v0);
    w.u32(v1.byteLength);
    w.raw(v1);
    return w.done();
  },
  function decode(r) {
    const v0 = r.u32("seq");
    const n1 = r.u32("frame");
    if (n1 < 4) throw P.decodeError(53, "frame", 'must be a whole frame of at least 4 bytes, got ' + n1);
    const v1 = r.subview("frame", n1);
    const o = { type: 53, seq: v0, frame: v1 };
    return o;
  },
];

/** Each frame type's CodecFactory, by type number. */
export const CODEC_FACTORIES: Readonly<Record<number, CodecFactory>> = {
  1: HELLO,
  7: PROOF,
  2: IPC_REQ,
  3: IPC_ACK,
  4: IPC_NOTREADY,
  5: IPC_CONFIRM,
  6: IPC_ABORT,
  10: EAGER,
  11: RGET,
  12: FIN,
  13: CANCEL,
  14: FINS,
  15: CREDIT,
  20: STAGE_BEGIN,
  21: STAGE_CHUNK,
  22: STAGE_ACK,
  30: INVALIDATE,
  31: FD_OFFER,
  32: FD_POOL,
  33: FD_RELEASE,
  34: FD_DESCRIPTOR,
  35: SEGMENT,
  40: CLOSE,
  41: REG_OFFER,
  42: REG_RELEASE,
  43: PT_OFFER,
  44: PT_FAIL,
  45: REG_FAIL,
  50: RING_OFFER,
  51: RING_SWITCH,
  52: DOORBELL,
  53: SPILL,
};

/** The layout (compile.ts layoutOf) each factory was generated from, by type number. */
export const CODEC_LAYOUTS: Readonly<Record<number, string>> = {
  1: "version:u8,pid:u32,deviceUuid:uuid,peerId:string,nonce:bytes,features:u32",
  7: "proof:bytes",
  2: "attempt:u32,deviceUuid:uuid,probe:optional",
  3: "attempt:u32,ok:bool,deviceUuid:uuid,probe:optional",
  4: "attempt:u32",
  5: "attempt:u32",
  6: "reason:string",
  10: "tag:u32,seq:u64,fromDevice:bool,data:data",
  11: "tag:u32,seq:u64,kind:enum,identity:bytes,base:big,allocSize:u64,offset:u64,length:u64,bufferId:big,deviceUuid:uuid,event:optional +relation",
  12: "seq:u64,status:enum,message:string",
  13: "seq:u64",
  14: "seqs:u64list",
  15: "consumed:u64",
  20: "tag:u32,seq:u64,length:u64,chunkSize:u32,slots:u16",
  21: "seq:u64,slot:u16,offset:u64,length:u32 +relation",
  22: "seq:u64,slot:u16",
  30: "deviceUuid:uuid,base:big,bufferId:big",
  31: "kind:enum,bufferId:big,deviceUuid:uuid,base:big,size:u64,poolId:u32,exportData:bytes,chunks:extents +relation",
  32: "poolId:u32,deviceUuid:uuid",
  33: "kind:enum,id:big,base:big",
  34: "kind:enum,id:big,base:big,index:u16",
  35: "kind:enum,bytes:u64",
  40: "reason:string",
  41: "regId:u32,kind:enum,deviceUuid:uuid,base:big,allocSize:u64,offset:u64,length:u64,bufferId:big,handle:bytes +relation",
  42: "regId:u32",
  43: "ptId:u32,role:enum,regId:u32,offset:u64,length:u64,flagRegId:u32,slot:u32",
  44: "ptId:u32,reason:string",
  45: "regId:u32,reason:string",
  50: "capacity:u32",
  51: "",
  52: "",
  53: "seq:u32,frame:frame",
};
