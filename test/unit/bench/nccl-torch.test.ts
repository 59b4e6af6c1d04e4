/**
 * The NCCL baseline's launcher: the arguments it gives the Python script,
 * how it reads the script's JSON (a result, a skip, or something malformed),
 * and what it does when python3 is missing, torch does not import (as on
 * this machine), or the script dies without a result. Fake interpreters
 * stand in for python3 where a result is needed.
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { ncclAt, ncclScriptPath, parseNcclOutput, runNcclAllreduce, scriptArgs } from '../../../src/bench/nccl-torch.js';
import { ProtocolError } from '../../../src/errors.js';

const dir = mkdtempSync(join(tmpdir(), 'smcuda-nccl-test-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const point = (size: number, mode: 'stream' | 'graph', median: number) => ({
  size,
  count: Math.max(1, size / 4),
  mode,
  iters: 100,
  runsUs: [median, median + 1, median - 1, median, median],
  median,
  min: median - 1,
  max: median + 1,
  busGBs: 0,
});
const RESULT = {
  tool: 'nccl_allreduce.py',
  torch: '2.11.0+cu130',
  cuda: '13.0',
  nccl: '2.27.7',
  devices: ['NVIDIA H200', 'NVIDIA H200'],
  ranks: 2,
  dtype: 'f32',
  op: 'sum',
  runs: 5,
  verified: true,
  results: [point(8, 'stream', 25.5), point(8, 'graph', 19.9), point(1 << 20, 'stream', 25.5)],
};

/** An executable that stands in for python3: writes `doc` to the path after --out (or nothing), exits with `code`. */
function fakePython(name: string, doc: unknown, code = 0): string {
  const path = join(dir, name);
  const body = doc === undefined ? '' : `require('node:fs').writeFileSync(a[a.indexOf('--out') + 1], ${JSON.stringify(JSON.stringify(doc))});`;
  writeFileSync(
    path,
    `#!${process.execPath}\nconst a = process.argv;\nrequire('node:fs').writeFileSync(${JSON.stringify(`${path}.args`)}, JSON.stringify(a.slice(2)));\n${body}\nprocess.stderr.write('fake python stderr line\\n');\nprocess.exit(${code});\n`,
  );
  chmodSync(path, 0o755);
  return path;
}

const request = { ranks: 2, sizes: [8, 1 << 20], graphSizes: [8], runs: 5, timeoutMs: 30_000 };

describe('parseNcclOutput', () => {
  it('reads a result point by point', () => {
    const out = parseNcclOutput(JSON.stringify(RESULT));
    expect('report' in out).toBe(true);
    if (!('report' in out)) return;
    expect(out.report).toMatchObject({ torch: '2.11.0+cu130', nccl: '2.27.7', cuda: '13.0', ranks: 2, verified: true });
    expect(out.report.results).toHaveLength(3);
    expect(ncclAt(out.report, 8)?.median).toBe(25.5);
    expect(ncclAt(out.report, 8, 'graph')?.median).toBe(19.9);
    expect(ncclAt(out.report, 16)).toBeUndefined();
    expect(ncclAt(undefined, 8)).toBeUndefined();
  });

  it('passes a skip through with its reason', () => {
    expect(parseNcclOutput('{"skipped": "python3 cannot import torch (ModuleNotFoundError)"}')).toEqual({
      skipped: 'python3 cannot import torch (ModuleNotFoundError)',
    });
  });

  it("rejects what is not the script's shape with a ProtocolError naming the field", () => {
    expect(() => parseNcclOutput('not json')).toThrow(ProtocolError);
    expect(() => parseNcclOutput('[]')).toThrow(/is not an object/);
    expect(() => parseNcclOutput(JSON.stringify({ ...RESULT, nccl: 2 }))).toThrow(/lacks nccl/);
    expect(() => parseNcclOutput(JSON.stringify({ ...RESULT, results: [{ ...point(8, 'stream', 1), mode: 'eager' }] }))).toThrow(/results\[0\]\.mode is eager/);
    expect(() => parseNcclOutput(JSON.stringify({ ...RESULT, results: [{ ...point(8, 'stream', 1), median: null }] }))).toThrow(
      /results\[0\]\.median is not a finite number/,
    );
    expect(() => parseNcclOutput(JSON.stringify({ ...RESULT, results: [{ ...point(8, 'stream', 1), runsUs: [] }] }))).toThrow(/runsUs/);
  });
});

describe('runNcclAllreduce', () => {
  it('ships the script in src/bench/ and hands it the request', () => {
    expect(existsSync(ncclScriptPath())).toBe(true);
    expect(ncclScriptPath().endsWith('nccl_allreduce.py')).toBe(true);
    expect(scriptArgs({ ...request, warmup: 3, graphCalls: 10 }, '/x.json')).toEqual([
      '--ranks',
      '2',
      '--sizes',
      '8,1048576',
      '--graph-sizes',
      '8',
      '--runs',
      '5',
      '--out',
      '/x.json',
      '--warmup',
      '3',
      '--graph-calls',
      '10',
    ]);
  });

  it('reads what the script wrote', async () => {
    const py = fakePython('ok', RESULT);
    const out = await runNcclAllreduce({ ...request, python: py });
    expect('report' in out && out.report.results.length).toBe(3);
    const args = JSON.parse(readFileSync(`${py}.args`, 'utf8')) as string[];
    expect(args[0]).toBe(ncclScriptPath());
    expect(args).toContain('--ranks');
  });

  it('skipped, with why, where the interpreter does not exist', async () => {
    const out = await runNcclAllreduce({ ...request, python: join(dir, 'no-such-python') });
    expect(out).toEqual({ skipped: expect.stringMatching(/could not be started .*ENOENT.*NCCL baseline not measured/) });
  });

  it('a script that dies without a result is an error carrying its stderr', async () => {
    await expect(runNcclAllreduce({ ...request, python: fakePython('dies', undefined, 3) })).rejects.toThrow(
      /exited with code 3 without a result: fake python stderr line/,
    );
  });

  const hasPython = (() => {
    try {
      execFileSync('python3', ['-c', 'import sys'], { stdio: 'ignore' });
      return true;
    } catch {
      return false;
    }
  })();
  const hasTorch =
    hasPython &&
    (() => {
      try {
        execFileSync('python3', ['-c', 'import torch'], { stdio: 'ignore' });
        return true;
      } catch {
        return false;
      }
    })();

  it.skipIf(!hasPython || hasTorch)('the real script, where python3 cannot import torch: skipped with that note', async () => {
    const out = await runNcclAllreduce(request);
    expect(out).toEqual({ skipped: expect.stringMatching(/^python3 cannot import torch/) });
  });

  it.skipIf(!hasPython)(
    'the real script over a stand-in torch (test/fixtures/fake-torch, one rank): its JSON reads back, a stream point per size and a graph point where asked',
    async () => {
      const saved = process.env.PYTHONPATH;
      process.env.PYTHONPATH = fileURLToPath(new URL('../../fixtures/fake-torch', import.meta.url));
      try {
        const out = await runNcclAllreduce({ ranks: 1, sizes: [8, 4096], graphSizes: [8], runs: 3, maxIters: 10, graphCalls: 4, timeoutMs: 30_000 });
        expect('report' in out).toBe(true);
        if (!('report' in out)) return;
        expect(out.report).toMatchObject({ torch: '0.0.0+fake', nccl: '2.0.0', ranks: 1, verified: true, devices: ['Fake GPU'] });
        expect(out.report.results.map((p) => [p.size, p.mode, p.iters, p.runsUs.length])).toEqual([
          [8, 'stream', 10, 3],
          [8, 'graph', 4, 3],
          [4096, 'stream', 10, 3],
        ]);
      } finally {
        if (saved === undefined) delete process.env.PYTHONPATH;
        else process.env.PYTHONPATH = saved;
      }
    },
  );
});
