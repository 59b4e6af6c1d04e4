/**
 * Messages that used to mislead (issue 28): each says what happened and what
 * to do, in words. The CLI ones run the compiled command as a user would.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { connectUnix, listenUnix } from '../../../src/channel/unix-channel.js';
import { ConfigError, NoListenerError } from '../../../src/errors.js';
import { smcuda } from '../../helpers/cli.js';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'smcuda-messages-'));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

describe('sockets', () => {
  it('listening in a shared directory such as /tmp advises a private directory inside it, never chmod of it', async () => {
    // A sticky, world-writable directory of our own stands for /tmp (which may belong to root here).
    const shared = path.join(dir, 'shared');
    fs.mkdirSync(shared);
    fs.chmodSync(shared, 0o1777);
    for (const where of [shared, os.tmpdir()]) {
      const err = await listenUnix(path.join(where, 'x.sock'), () => {}).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ConfigError);
      expect((err as Error).message).not.toMatch(/chmod 700/);
      expect((err as Error).message).toMatch(/private directory for the job's sockets inside it \(mkdir -m 700 .+myjob, or fs\.mkdtempSync/);
    }
  });

  it('connecting to a regular file says it is not a socket, not that "its owner exited"', async () => {
    const file = path.join(dir, 'not-a-socket');
    fs.writeFileSync(file, 'x');
    const err = await connectUnix(file).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NoListenerError);
    expect((err as Error).message).toMatch(/is not a socket \(a regular file\): check the path/);
    expect((err as Error).message).not.toMatch(/owner exited/);
  });
});

describe('the smcuda command', () => {
  it('trace of a missing file says so in words (no raw ENOENT)', async () => {
    const r = await smcuda(['trace', path.join(dir, 'nonexistent.jsonl')]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/no trace file at .+nonexistent\.jsonl: record one with SMCUDA_TRACE=/);
    expect(r.stderr).not.toMatch(/ENOENT/);
  });

  it('--ranks -3 gets the option\'s own check, not parseArgs\' "ambiguous"', async () => {
    const r = await smcuda(['demo', '--ranks', '-3']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('--ranks must be an integer from 2 to 64, got -3');
    expect(r.stderr).not.toMatch(/ambiguous/);
  });

  it('--algorithm, --ops and --dtypes without --collectives are refused, not ignored', async () => {
    const r = await smcuda(['demo', '--algorithm', 'two-shot', '--dtypes', 'f32', '--driver', 'sim']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('--dtypes, --algorithm only go with --collectives');
  });
});
