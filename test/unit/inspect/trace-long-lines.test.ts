/**
 * `smcuda inspect --trace` on a trace with an overlong line (issue 47, item 8):
 * a 640 MiB line without a newline made one string too long for V8
 * (`RangeError: Invalid string length`) and the inspector died. Now the file
 * is read a bounded piece at a time, line by line, and a line longer than
 * `maxLineBytes` is skipped with a warning; the records around it are read.
 * Here: a few MiB against a small limit.
 */
import { spawn } from 'node:child_process';
import { appendFileSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ConfigError } from '../../../src/errors.js';
import { TraceFollower } from '../../../src/inspect/trace-follower.js';
import type { TraceRecord } from '../../../src/trace.js';
import { CLI } from '../../helpers/cli.js';

const dir = mkdtempSync(join(tmpdir(), 'smcuda-longline-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const rec = (t: number) => `${JSON.stringify({ t, pid: 7, self: 'rank0', peer: 'rank1', kind: 'frame', dir: 'recv', frame: 'HELLO' })}\n`;
const MiB = 1 << 20;

describe('trace lines longer than maxLineBytes', () => {
  it('a 3 MiB line between records, with and without its newline: skipped with a warning, the records around it read', async () => {
    const file = join(dir, 'a.jsonl');
    writeFileSync(file, rec(1));
    appendFileSync(file, Buffer.alloc(3 * MiB, 0x78)); // 'xxx…', no newline yet
    const got: TraceRecord[] = [];
    const warnings: string[] = [];
    const f = new TraceFollower(file, (r) => got.push(r), { maxLineBytes: 64 << 10, onWarning: (w) => warnings.push(w) });
    await f.poll();
    expect(got.map((r) => r.t)).toEqual([1]);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(/skipped a line longer than 65536 bytes/);
    appendFileSync(file, Buffer.alloc(MiB, 0x79)); // the same line goes on
    appendFileSync(file, `\n${rec(2)}`);
    appendFileSync(file, Buffer.alloc(2 * MiB, 0x7a)); // a second overlong line, ended in the same poll
    appendFileSync(file, `\n${rec(3)}`);
    await f.poll();
    expect(got.map((r) => r.t)).toEqual([1, 2, 3]);
    expect(f.skippedLong).toBe(2);
    expect(warnings).toHaveLength(2);
    f.close();
  });

  it('a line of exactly maxLineBytes is read; a record split across polls is put together', async () => {
    const file = join(dir, 'b.jsonl');
    const line = rec(5);
    writeFileSync(file, line.slice(0, 10));
    const got: TraceRecord[] = [];
    const f = new TraceFollower(file, (r) => got.push(r), { maxLineBytes: line.length - 1 }); // the record without its newline
    await f.poll();
    appendFileSync(file, line.slice(10));
    await f.poll();
    expect(got.map((r) => r.t)).toEqual([5]);
    expect(f.skippedLong).toBe(0);
    expect(() => new TraceFollower(file, () => {}, { maxLineBytes: 0 })).toThrow(ConfigError);
  });

  it('smcuda inspect --max-line-bytes: warns on stderr and keeps serving', async () => {
    const file = join(dir, 'c.jsonl');
    writeFileSync(file, rec(1));
    appendFileSync(file, Buffer.alloc(4 * MiB, 0x78));
    appendFileSync(file, `\n${rec(2)}`);
    const child = spawn(process.execPath, [CLI, 'inspect', '--trace', file, '--port', '0', '--max-line-bytes', '65536', '--json'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d));
    child.stderr.on('data', (d: Buffer) => (err += d));
    try {
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no URL within 10 s: ${err}`)), 10_000);
        child.once('exit', (code) => reject(new Error(`smcuda inspect exited with ${code}: ${err}`)));
        child.stdout.on('data', () => {
          if (out.includes('\n')) {
            clearTimeout(timer);
            resolve();
          }
        });
      });
      const { url } = JSON.parse(out.split('\n')[0]!) as { url: string };
      const res = await fetch(`${url}state`);
      const state = (await res.json()) as { endpoints: unknown[] };
      expect(state.endpoints.length).toBe(1);
      expect(err).toMatch(/smcuda inspect: trace .* skipped a line longer than 65536 bytes/);
    } finally {
      child.kill('SIGTERM');
    }
  }, 20_000);
});
