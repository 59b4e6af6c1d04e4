/**
 * The communicator's flight recorder (issue 47 item 7): every call is
 * recorded; an abort puts the recorder's summary on each rank's error and,
 * where tracing is configured, dumps each rank's records, from which the
 * analysis behind `smcuda trace` names the rank that never made the call;
 * sends and receives likewise.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { analyzeFlights, parseFlightFile, renderFlightAnalysis } from '../../../src/diagram/flight-analysis.js';
import type { CommunicatorAbortedError } from '../../../src/errors.js';
import { makeWorld, type World } from '../../helpers/comm-world.js';

let w: World | undefined;
let dir: string | undefined;
afterEach(async () => {
  await w?.close();
  w = undefined;
  if (dir) rmSync(dir, { recursive: true, force: true });
  dir = undefined;
});

describe('the flight recorder', () => {
  it('records every call: queued, finished, with op, dtype, count and algorithm', async () => {
    w = await makeWorld(2, { flightRecords: 4 });
    const bufs = w.sides.map((s) => s.driver.memAlloc(4096));
    for (let i = 0; i < 6; i++) await Promise.all(w.comms.map((c, r) => c.allreduce({ send: bufs[r]!, count: 1 + i, dtype: 'f32', op: 'sum' })));
    const e = w.comms[0]!.flightRecords();
    expect(e.map((x) => x.seq)).toEqual([3, 4, 5, 6]); // the last 4
    expect(e.at(-1)).toMatchObject({ op: 'allreduce', dtype: 'f32', count: 6, algorithm: 'one-shot-ll', state: 'finished' });
  });

  it("a rank that never makes a call: each rank's timeout names it, carries the summary, and the dumps say who is behind", async () => {
    dir = mkdtempSync(join(tmpdir(), 'smcuda-flight-'));
    const trace = join(dir, 'run.jsonl');
    w = await makeWorld(3, { timeoutMs: 400, trace });
    const bufs = w.sides.map((s) => s.driver.memAlloc(4096));
    await Promise.all(w.comms.map((c, r) => c.allreduce({ send: bufs[r]!, count: 8, dtype: 'f32', op: 'sum' })));
    const errs = await Promise.all(
      [0, 1].map((r) =>
        w!.comms[r]!.allreduce({ send: bufs[r]!, count: 1024, dtype: 'f32', op: 'sum' }).then(
          () => undefined,
          (e: unknown) => e as CommunicatorAbortedError,
        ),
      ),
    );
    for (const e of errs) {
      expect(e?.code).toBe('SMCUDA_COMM_ABORTED');
      expect(e?.flight).toMatch(/flight recorder/);
    }
    expect(errs.some((e) => /rank 2 never made call #2/.test(e!.message))).toBe(true);
    // Rank 2 learns of the abort too (its communicator is aborted) and dumps its records.
    await new Promise((r) => setTimeout(r, 200));
    const files = readdirSync(join(dir, 'run.flight')).filter((f) => f.startsWith('flight.rank'));
    expect(files.length).toBe(3);
    const flights = files.map((f) => parseFlightFile(readFileSync(join(dir!, 'run.flight', f), 'utf8'), f));
    const text = renderFlightAnalysis(analyzeFlights(flights));
    expect(text).toMatch(/rank 2 never (started|made) call 2/);
  });

  it("sends and receives are recorded too: a receive whose send never comes is in every rank's dump, and the analysis names the rank that never sent", async () => {
    dir = mkdtempSync(join(tmpdir(), 'smcuda-flight-'));
    const trace = join(dir, 'run.jsonl');
    w = await makeWorld(3, { timeoutMs: 400, trace });
    const bufs = w.sides.map((s) => s.driver.memAlloc(4096));
    await Promise.all([
      w.comms[0]!.send({ buf: bufs[0]!, count: 8, dtype: 'f32', peer: 1 }),
      w.comms[1]!.recv({ buf: bufs[1]!, count: 8, dtype: 'f32', peer: 0 }),
    ]);
    expect(w.comms[0]!.p2pFlightRecords()).toMatchObject([{ id: 1, kind: 'send', peer: 1, n: 1, dtype: 'f32', count: 8, state: 'finished' }]);
    const e = await w.comms[1]!.recv({ buf: bufs[1]!, count: 16, dtype: 'f32', peer: 0 }).then(
      () => undefined,
      (err: unknown) => err as CommunicatorAbortedError,
    );
    expect(e?.causeCode).toBe('SMCUDA_COMM_TIMEOUT');
    expect(e?.flight).toMatch(/sends and receives not finished: recv #2 from rank 0 \(f32 × 16\), rank 0's send not made yet/);
    await new Promise((r) => setTimeout(r, 200));
    const files = readdirSync(join(dir, 'run.flight')).filter((f) => f.startsWith('flight.rank'));
    expect(files.length).toBe(3);
    const a = analyzeFlights(files.map((f) => parseFlightFile(readFileSync(join(dir!, 'run.flight', f), 'utf8'), f)));
    expect(a.verdict).toBe('p2p');
    expect(a.lines[0]).toMatch(
      /^rank 1's recv #2 from rank 0 \(f32 × 16\) (failed|did not finish) .*: rank 0 never made its send #2 to rank 1 \(its last: #1\)/,
    );
  });

  it('refuses a bad flightRecords option', async () => {
    await expect(makeWorld(2, { flightRecords: 0 })).rejects.toMatchObject({ code: expect.stringMatching(/SMCUDA_OUT_OF_RANGE|SMCUDA_CONFIG/) });
  });
});
