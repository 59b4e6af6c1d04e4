/**
 * What a suite part that throws leaves in the report (guarded): the figures
 * it had listed stay, the rest of its figures are listed as skipped with the
 * error, a note says what failed, and the run goes on.
 */
import { describe, expect, it } from 'vitest';
import { atMost, measured } from '../../../src/bench/figures.js';
import { guarded, type SuiteContext } from '../../../src/bench/suite-context.js';

const ctx = (): SuiteContext => ({
  opts: { driver: 'sim', suites: [], smoke: true, window: 8, timeoutMs: 1000 },
  plan: {} as SuiteContext['plan'],
  sim: true,
  figures: [],
  series: [],
  notes: [],
  progress: () => {},
  floor: new Map(),
});
const a = { name: 'a', suite: 'graph', unit: 'µs', target: atMost(5, '≤ 5 µs') };
const b = { name: 'b', suite: 'graph', unit: 'µs' };

describe('guarded', () => {
  it('a part that throws: figures listed so far stay, the others are skipped with the error, a note says so', async () => {
    const run = ctx();
    await guarded(run, 'graph suite: raw', [a, b], async () => {
      run.figures.push(measured(a, 3, null));
      throw new Error('cuIpcOpenMemHandle: peer access refused');
    });
    expect(run.figures.map((f) => [f.name, f.value, f.skipped])).toEqual([
      ['a', 3, undefined],
      ['b', null, 'graph suite: raw failed: cuIpcOpenMemHandle: peer access refused'],
    ]);
    expect(run.notes).toEqual(['graph suite: raw failed: cuIpcOpenMemHandle: peer access refused']);
  });

  it('a part that succeeds adds nothing of its own', async () => {
    const run = ctx();
    await guarded(run, 'x', [a, b], async () => {
      run.figures.push(measured(a, 1, 2), measured(b, 2, null));
    });
    expect(run.figures).toHaveLength(2);
    expect(run.notes).toEqual([]);
  });
});
