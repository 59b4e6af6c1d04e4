/**
 * Micro-benchmark of the frame codec's hot frames: ns per encodeFrame /
 * decodeFrame of RGET (no event) and EAGER with 8 bytes of data, and of the
 * RGET fast path (restampRget, RgetDecoder hit). Not a test: run it by hand
 * when the codec changes, e.g.
 *   npm run build && node --expose-gc dist/src/bench/codec-microbench.js
 * and compare with the figures in src/wire/compile.ts's header.
 */
import { FrameType, HandleKind, type Frame } from '../wire/frames.js';
import { decodeFrame, encodeFrame, restampRget, RgetDecoder } from '../wire/codec.js';
import { UuidNames } from '../wire/uuid.js';

const gc = (globalThis as { gc?: () => void }).gc;

/** The best over `rounds` of the mean ns per call of `fn` over `n` calls (the best, since other processes share the cores). */
function measure(n: number, rounds: number, fn: (i: number) => unknown): number {
  const out: number[] = [];
  let sink = 0;
  for (let r = 0; r < rounds; r++) {
    gc?.();
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < n; i++) if (fn(i) === undefined) sink++;
    out.push(Number(process.hrtime.bigint() - t0) / n);
  }
  if (sink < 0) console.log(sink);
  return Math.min(...out);
}

const uuid = 'GPU-00112233-4455-6677-8899-aabbccddeeff';
const rget: Frame = {
  type: FrameType.RGET,
  tag: 7,
  seq: 1,
  kind: HandleKind.LEGACY,
  identity: new Uint8Array(64).fill(3),
  base: 0x7f00_1234_0000n,
  allocSize: 1 << 28,
  offset: 4096,
  length: 1 << 20,
  bufferId: 12345n,
  deviceUuid: uuid,
  event: null,
};
const eager: Frame = { type: FrameType.EAGER, tag: 7, seq: 1, fromDevice: false, data: new Uint8Array(8).fill(1) };
const names = new UuidNames();
const rgetBytes = encodeFrame(rget, names);
const eagerBytes = encodeFrame(eager);
const N = 200_000;
const ROUNDS = 15;
// Warm up every path so that each is optimised before it is timed.
for (let i = 0; i < 3; i++) {
  measure(N, 1, (k) => encodeFrame({ ...rget, seq: k } as Frame, names));
  measure(N, 1, () => decodeFrame(rgetBytes, names));
  measure(N, 1, (k) => encodeFrame({ ...eager, seq: k } as Frame));
  measure(N, 1, () => decodeFrame(eagerBytes));
}
const rd = new RgetDecoder();
const rows: Array<[string, number]> = [
  ['encode RGET', measure(N, ROUNDS, (k) => encodeFrame({ ...rget, seq: k } as Frame, names))],
  ['decode RGET', measure(N, ROUNDS, () => decodeFrame(rgetBytes, names))],
  ['encode EAGER 8 B', measure(N, ROUNDS, (k) => encodeFrame({ ...eager, seq: k } as Frame))],
  ['decode EAGER 8 B', measure(N, ROUNDS, () => decodeFrame(eagerBytes))],
  ['restampRget', measure(N, ROUNDS, (k) => restampRget(rgetBytes, 7, k))],
  ['RgetDecoder (hit)', measure(N, ROUNDS, (k) => rd.decode(restampRget(rgetBytes, 7, k), names))],
];
for (const [name, ns] of rows) console.log(`${name.padEnd(20)} ${ns.toFixed(0).padStart(6)} ns`);
