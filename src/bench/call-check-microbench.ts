/**
 * Micro-benchmark of what checking every call against every rank's costs a
 * Communicator per call (call-check.ts): ns per made() + verify() + done()
 * of one rank among `size`, the prints in a shared table (print-table.ts,
 * here over plain memory: the same loads and stores), the other ranks'
 * prints written as they would be; and the flight recorder's queued() +
 * finished() beside it, and its point-to-point half's queued() + agreed() +
 * finished() for a send. Not a test: run it by hand when either changes, e.g.
 *   npm run build && node --expose-gc dist/src/bench/call-check-microbench.js
 */
import type { MappedSegment } from '../channel/sealed-segment.js';
import { CallCheck } from '../collectives/call-check.js';
import { printWord0 } from '../collectives/call-print.js';
import { FlightRecorder } from '../collectives/flight-recorder.js';
import { P2PFlightRecorder } from '../collectives/p2p-flight.js';
import { printTableBytes, SharedPrintTable } from '../collectives/print-table.js';
import { measure } from './micro-measure.js';

function memorySegment(bytes: number): MappedSegment {
  const b = new Uint8Array(new SharedArrayBuffer(bytes));
  return { bytes: b, fd: undefined, releaseFd: () => undefined, lendFd: () => undefined, close: () => undefined };
}

const N = 1_000_000;
const ROUNDS = 9;
for (const size of [2, 8]) {
  const seg = memorySegment(printTableBytes(size));
  const tables = [...Array(size).keys()].map((r) => new SharedPrintTable(seg, r, size));
  const check = new CallCheck(0, size, tables[0]!, tables[0]!.window);
  const w0 = printWord0('allreduce', 'f32', 'sum', true, undefined);
  let seq = 0;
  const ns = measure(N, ROUNDS, () => {
    const s = ++seq;
    for (let r = 1; r < size; r++) tables[r]!.publish(s, w0, 1024, 0); // the peers, made first (not this rank's cost)
    if (check.made(s, w0, 1024, 0) !== undefined) throw new Error('mismatch');
    if (check.verify(s) !== true) throw new Error('not verified');
    check.board.done(s);
  });
  // This rank the first to make each call: its verify, at completion, reads the peers' prints.
  const first = measure(N, ROUNDS, () => {
    const s = ++seq;
    if (check.made(s, w0, 1024, 0) !== undefined) throw new Error('mismatch');
    for (let r = 1; r < size; r++) tables[r]!.publish(s, w0, 1024, 0);
    if (check.verify(s) !== true) throw new Error('not verified');
    check.board.done(s);
  });
  let peers = 0;
  const peersNs = measure(N, ROUNDS, () => {
    const s = ++peers;
    for (let r = 1; r < size; r++) tables[r]!.publish(s, w0, 1024, 0);
  });
  console.log(
    `call check, ${size} ranks, shared table: ${(ns - peersNs).toFixed(1)} ns a call as the last rank to make it, ${(first - peersNs).toFixed(1)} ns as the first (made + verify + done; the peers' publishing, ${peersNs.toFixed(1)} ns, taken out)`,
  );
}
const rec = new FlightRecorder();
let fseq = 0;
const rns = measure(N, ROUNDS, (i) => {
  const s = ++fseq;
  rec.queued(s, 'allreduce', 'f32', 1024, undefined, 'one-shot', 0n, i);
  rec.finished(s, i + 1);
});
console.log(`flight recorder: ${rns.toFixed(1)} ns a call (queued + finished, times given)`);
const p2p = new P2PFlightRecorder(1000);
const pns = measure(N, ROUNDS, (i) => {
  const id = p2p.queued('send', 1, i, 'f32', 1024, 'device', 0n, i);
  p2p.agreed(id, i);
  p2p.finished(id, i + 1);
});
console.log(`flight recorder, a send: ${pns.toFixed(1)} ns (queued + agreed + finished, times given)`);
