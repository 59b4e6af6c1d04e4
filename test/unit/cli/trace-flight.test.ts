/**
 * `smcuda trace` on flight records: a directory of dumps or the files
 * themselves, told from traces by their header line; the findings as text
 * or JSON; wrong mixes and options refused with a usage error.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { FlightRecorder } from '../../../src/collectives/flight-recorder.js';
import { runTrace } from '../../../src/cli/trace-cmd.js';

const tmp = mkdtempSync(join(tmpdir(), 'smcuda-trace-flight-'));
const job = join(tmp, 'run.flight');
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
afterEach(() => vi.restoreAllMocks());

/** A 3-rank job: ranks 0 and 2 in call 5, rank 1 finished call 4 and never made call 5. */
beforeAll(() => {
  for (let rank = 0; rank < 3; rank++) {
    const r = new FlightRecorder();
    for (let s = 1; s <= 4; s++) {
      r.queued(s, 'allreduce', 'bf16', 4096, undefined, 'one-shot', 0n, s * 100);
      r.finished(s, s * 100 + 50);
    }
    if (rank !== 1) {
      r.queued(5, 'reduce-scatter', 'f32', 256, undefined, 'one-shot', 0n, 600);
      r.failed(5, 30_000_600);
    }
    r.dump(job, { rank, size: 3, pid: 100 + rank, ...(rank === 1 ? {} : { cause: 'reduce-scatter #5 did not complete within 30000 ms' }) });
  }
});

/** Runs `smcuda trace` in this process; its stdout. */
async function trace(args: string[]): Promise<{ code: number; out: string }> {
  let out = '';
  vi.spyOn(process.stdout, 'write').mockImplementation((s: string | Uint8Array) => ((out += String(s)), true));
  vi.spyOn(console, 'log').mockImplementation((...a: unknown[]) => void (out += `${a.join(' ')}\n`));
  vi.spyOn(console, 'error').mockImplementation(() => undefined);
  const code = await runTrace(args);
  return { code, out };
}

describe('smcuda trace on flight records', () => {
  it('reads a directory of dumps and says who is behind, then one line per rank', async () => {
    const { code, out } = await trace([job]);
    expect(code).toBe(0);
    expect(out.split('\n')[0]).toBe('rank 1 never started call 5 (reduce-scatter f32×256); ranks 0, 2 are waiting in it (for up to 30.0 s)');
    expect(out).toContain('cause (ranks 0, 2): reduce-scatter #5 did not complete within 30000 ms\n');
    expect(out).toContain('  rank 1 (pid 101): calls 1–4, last finished 4, idle\n');
  });

  it('reads the files given one by one the same way', async () => {
    const files = [0, 1, 2].map((r) => join(job, `flight.rank${r}.${100 + r}.jsonl`));
    expect((await trace(files)).out).toBe((await trace([job])).out);
  });

  it('prints the analysis as data with --json', async () => {
    const { out } = await trace([job, '--json']);
    const a = JSON.parse(out) as { verdict: string; groups: Array<{ seq: number; stage: string; ranks: number[] }>; ranks: unknown[] };
    expect(a.verdict).toBe('behind');
    expect(a.groups[0]).toEqual({ seq: 5, stage: 'not made', ranks: [1] });
    expect(a.ranks).toHaveLength(3);
    expect((await trace([job, '--format', 'json'])).out).toBe(out);
  });

  it('refuses a mix of flight records and traces, trace filters, and a Mermaid format, as usage errors', async () => {
    const traceFile = join(tmp, 'run.jsonl');
    writeFileSync(traceFile, '{"t":1,"pid":2,"self":"rank0","peer":"rank1","kind":"state","from":"INIT","to":"SENT","tries":1}\n');
    const usage = (args: string[], match: RegExp) => expect(trace(args)).rejects.toMatchObject({ code: 'SMCUDA_USAGE', message: expect.stringMatching(match) });
    await usage([job, traceFile], /run\.jsonl: not flight records, and .* are: give flight records and traces in separate runs/);
    await usage([job, '--from', '10'], /--endpoint, --from and --to filter traces, not flight records/);
    await usage([job, '--endpoint', 'rank0'], /filter traces, not flight records/);
    await usage([job, '--format', 'mermaid'], /flight records print as text \(default\) or json/);
  });

  it('refuses a directory with no flight records, saying what to give', async () => {
    const empty = join(tmp, 'empty');
    mkdirSync(empty);
    await expect(trace([empty])).rejects.toMatchObject({
      code: 'SMCUDA_USAGE',
      message: expect.stringMatching(/is a directory with no flight records \(flight\.rank<r>\.<pid>\.jsonl\) in it/),
    });
  });

  it('still draws a trace file given alone', async () => {
    const traceFile = join(tmp, 'alone.jsonl');
    writeFileSync(traceFile, '{"t":1,"pid":2,"self":"rank0","peer":"rank1","kind":"state","from":"INIT","to":"SENT","tries":1}\n');
    const { code, out } = await trace([traceFile]);
    expect(code).toBe(0);
    expect(out.startsWith('sequenceDiagram\n')).toBe(true);
  });
});
