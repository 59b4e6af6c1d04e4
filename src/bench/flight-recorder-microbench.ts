/**
 * Micro-benchmark of the flight recorder's cost per collective call: ns per
 * queued() + finished() pair (what a Communicator adds to each call), with
 * the times given (a Communicator has them: it reads the clock at each
 * call's start and end anyway) and with the recorder reading the clock
 * itself, and a clock read alone for scale. Not a test: run it by hand when the recorder
 * changes, e.g.
 *   npm run build && node --expose-gc dist/src/bench/flight-recorder-microbench.js
 */
import { FlightRecorder, flightNowUs } from '../collectives/flight-recorder.js';
import { measure } from './micro-measure.js';

const N = 1_000_000;
const ROUNDS = 9;
const rec = new FlightRecorder();
let seq = 0;
const withTimes = (i: number): void => {
  const s = ++seq;
  rec.queued(s, 'allreduce', 'f32', 1024, undefined, 'one-shot', 0n, i);
  rec.finished(s, i + 1);
};
const withClock = (): void => {
  const s = ++seq;
  rec.queued(s, 'allreduce', 'f32', 1024, undefined, 'one-shot', 0n);
  rec.finished(s);
};
// Two calls in flight at once, as back-to-back calls on the device path are.
const twoInFlight = (i: number): void => {
  const s = ++seq;
  rec.queued(s, 'allreduce', 'f32', 1024, undefined, 'one-shot', 0x7f00n, i);
  if (s > 1) rec.finished(s - 1, i + 1);
};
let sink = 0;
const clock = (): void => {
  sink += flightNowUs();
};
for (let i = 0; i < 3; i++) {
  measure(N, 1, withTimes);
  measure(N, 1, withClock);
  measure(N, 1, twoInFlight);
  measure(N, 1, clock);
}
const rows: Array<[string, number]> = [
  ['queued + finished, times given', measure(N, ROUNDS, withTimes)],
  ['queued + finished, clock read twice', measure(N, ROUNDS, withClock)],
  ['queued + finished, two in flight, times given', measure(N, ROUNDS, twoInFlight)],
  ['clock read (flightNowUs) alone', measure(N, ROUNDS, clock)],
];
for (const [name, ns] of rows) console.log(`${name.padEnd(48)} ${ns.toFixed(1).padStart(7)} ns/call`);
if (sink < 0) console.log(sink);
