/**
 * `smcuda trace` on a real trace: a 2-rank demo on the simulated driver,
 * recorded with --trace, rendered as a sequence diagram, a timeline and JSON,
 * and filtered by endpoint and time.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { filterTrace, mergeTraces, parseMs, parseTrace } from '../../../src/diagram/trace-records.js';
import type { TraceRecord } from '../../../src/trace.js';
import { smcuda } from '../../helpers/cli.js';
import { WIRE_VERSION } from '../../../src/wire/frames.js';

const dir = mkdtempSync(join(tmpdir(), 'smcuda-trace-test-'));
const trace = join(dir, 'run.jsonl');
afterAll(() => rmSync(dir, { recursive: true, force: true }));

beforeAll(async () => {
  const r = await smcuda(['demo', '--driver', 'sim', '--sizes', '8,64K', '--iters', '1', '--trace', trace]);
  expect(r.code, r.stderr).toBe(0);
});

describe('the trace a demo writes', () => {
  it('records frames both ways, HELLO included, state changes and cache events, each with time, pid and endpoint', () => {
    const records = parseTrace(readFileSync(trace, 'utf8'));
    for (const r of records) {
      expect(r.t).toBeGreaterThan(1e15); // µs since the epoch
      expect(r.pid).toBeGreaterThan(0);
      expect(['rank0', 'rank1']).toContain(r.self);
      expect(['rank0', 'rank1']).toContain(r.peer);
    }
    const frames = (dir: string) => new Set(records.filter((r) => r.kind === 'frame' && r.dir === dir).map((r) => r.frame));
    expect(frames('recv')).toContain('HELLO');
    for (const f of ['IPC_REQ', 'EAGER', 'RGET', 'FIN']) expect(frames('send')).toContain(f);
    expect(records.some((r) => r.kind === 'state' && r.to === 'OK')).toBe(true);
    expect(records.some((r) => r.kind === 'cache' && r.type === 'miss')).toBe(true);
    expect(new Set(records.map((r) => r.pid)).size).toBe(2);
  });
});

describe('smcuda trace', () => {
  it('draws a Mermaid sequence diagram of the IPC_REQ/ACK exchange between the two processes', async () => {
    const r = await smcuda(['trace', trace]);
    expect(r.code, r.stderr).toBe(0);
    const out = r.stdout;
    expect(out.startsWith('sequenceDiagram\n')).toBe(true);
    const alias = (id: string) => new RegExp(`participant (P\\d+) as ${id}\\n`).exec(out)![1]!;
    const [a0, a1] = [alias('rank0'), alias('rank1')];
    expect(out).toMatch(new RegExp(`(${a0}->>${a1}|${a1}->>${a0}): HELLO pid=\\d+ v${WIRE_VERSION}`));
    // The handshake's proofs, both ways, each after the HELLOs (no secret in the label).
    expect(out).toMatch(new RegExp(`${a0}->>${a1}: PROOF\\n`));
    expect(out).toMatch(new RegExp(`${a1}->>${a0}: PROOF\\n`));
    expect(out.indexOf('HELLO')).toBeLessThan(out.indexOf('PROOF'));
    expect(out).toMatch(new RegExp(`(${a0}->>${a1}|${a1}->>${a0}): IPC_REQ attempt=1\\n`));
    expect(out).toMatch(new RegExp(`(${a0}->>${a1}|${a1}->>${a0}): IPC_ACK attempt=1 ok\\n`));
    expect(out).toMatch(new RegExp(`(${a0}->>${a1}|${a1}->>${a0}): IPC_CONFIRM attempt=1\\n`));
    expect(out).toMatch(/: RGET tag=\d+ seq=\d+ 64 KiB\n/);
    expect(out).toMatch(/Note over P\d: rank[01]: (SENT|ACKED)→OK\n/);
    // The ACK comes after the REQ it answers, and CONFIRM after the ACK.
    expect(out.indexOf('IPC_REQ attempt=1')).toBeLessThan(out.indexOf('IPC_ACK attempt=1'));
    expect(out.indexOf('IPC_ACK attempt=1')).toBeLessThan(out.indexOf('IPC_CONFIRM attempt=1'));
  });

  it('prints a per-endpoint timeline of states with --format text', async () => {
    const r = await smcuda(['trace', trace, '--format', 'text']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^rank0 → rank1 \(pid \d+\): /m);
    expect(r.stdout).toMatch(/^rank1 → rank0 \(pid \d+\): /m);
    expect(r.stdout).toMatch(/\+\d+\.\d{3} ms {2}INIT→SENT/);
    expect(r.stdout).toMatch(/(SENT|ACKED)→OK/);
    expect(r.stdout).toMatch(/frames sent: .*IPC_REQ 1/);
    expect(r.stdout).toMatch(/cache events: .*miss 2/); // the peer's negotiation probe, then the first RGET's buffer
  });

  it('filters by endpoint, and by a time window relative to the start', async () => {
    const all = JSON.parse((await smcuda(['trace', trace, '--json'])).stdout) as { records: TraceRecord[]; startUs: number };
    const one = JSON.parse((await smcuda(['trace', trace, '--json', '--endpoint', 'rank0:rank1'])).stdout) as { records: TraceRecord[] };
    expect(one.records.length).toBe(all.records.length); // two ranks: one pair
    const side = await smcuda(['trace', trace, '--format', 'text', '--endpoint', 'rank0→rank1']);
    expect(side.stdout).toContain('rank0 → rank1');

    const okAt = all.records.find((r) => r.kind === 'state' && r.to === 'OK')!;
    const okMs = (okAt.t - all.startUs) / 1000;
    const before = JSON.parse((await smcuda(['trace', trace, '--json', '--to', String(okMs - 0.001)])).stdout) as { records: TraceRecord[] };
    expect(before.records.length).toBeGreaterThan(0);
    expect(before.records.every((r) => (r.t - all.startUs) / 1000 < okMs)).toBe(true);
    const after = await smcuda(['trace', trace, '--from', `${okMs}ms`]);
    expect(after.stdout).not.toContain('HELLO');
    expect(after.stdout).toMatch(/→OK/);

    const none = await smcuda(['trace', trace, '--endpoint', 'rank9']);
    expect(none.code).toBe(0);
    expect(none.stderr).toContain('no record matches');
  });

  it('merges traces written to several files in time order', async () => {
    const records = parseTrace(readFileSync(trace, 'utf8'));
    const [f0, f1] = [join(dir, 'rank0.jsonl'), join(dir, 'rank1.jsonl')];
    writeFileSync(
      f0,
      records
        .filter((r) => r.self === 'rank0')
        .map((r) => `${JSON.stringify(r)}\n`)
        .join(''),
    );
    writeFileSync(
      f1,
      records
        .filter((r) => r.self === 'rank1')
        .map((r) => `${JSON.stringify(r)}\n`)
        .join(''),
    );
    const merged = JSON.parse((await smcuda(['trace', f1, f0, '--json'])).stdout) as { records: TraceRecord[] };
    expect(merged.records.map((r) => r.t)).toEqual(mergeTraces([records]).map((r) => r.t));
  });

  it('reports bad input clearly', async () => {
    const bad = join(dir, 'bad.jsonl');
    writeFileSync(bad, '{"t":1,"pid":1,"self":"a","peer":"b","kind":"frame"}\nnot json\n');
    const r = await smcuda(['trace', bad]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`${bad}:2: not a trace record`);
    expect((await smcuda(['trace'])).code).toBe(2);
    const t = await smcuda(['trace', trace, '--from', 'soon']);
    expect(t.code).toBe(2);
    expect(t.stderr).toContain('not a time');
  });
});

describe('trace records', () => {
  const rec = (t: number, self = 'a', peer = 'b'): TraceRecord => ({ t, pid: 1, self, peer, kind: 'frame', dir: 'send', frame: 'EAGER' });
  it('window times are relative to the first record, inclusive at both ends', () => {
    const rs = [rec(1000), rec(2000), rec(3000)];
    expect(filterTrace(rs, { fromMs: 1, toMs: 2 }).map((r) => r.t)).toEqual([2000, 3000]);
    expect(filterTrace(rs, { endpoints: ['b'] }).length).toBe(3);
    expect(filterTrace([rec(1, 'a', 'c')], { endpoints: ['a:b'] })).toEqual([]);
  });
  it('parses times', () => {
    expect(parseMs('250')).toBe(250);
    expect(parseMs('250ms')).toBe(250);
    expect(parseMs('1.5s')).toBe(1500);
    expect(() => parseMs('-1')).toThrow(RangeError);
  });
});
