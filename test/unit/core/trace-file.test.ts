/**
 * The trace file (src/trace.ts openTraceFile) is opened as a private file may
 * safely be: created 0600, never through a symbolic link, never another
 * user's file (issue 23, finding 12).
 */
import { chownSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { AccessDeniedError } from '../../../src/errors.js';
import { describeFrame, FileTracer } from '../../../src/trace.js';
import { FrameType, HandleKind, SegmentKind } from '../../../src/wire/frames.js';
import { Transport } from '../../../src/transport.js';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});
function dir(): string {
  const d = mkdtempSync(join(tmpdir(), 'smcuda-trace-'));
  dirs.push(d);
  return d;
}
const isRoot = process.getuid?.() === 0;

describe('the trace file', () => {
  it('is created 0600 whatever the umask, and appended to', () => {
    const path = join(dir(), 'trace.jsonl');
    const old = process.umask(0);
    try {
      const t = new FileTracer(path, 'a');
      t.state('b', 'X', 'Y', { tries: 1 });
      t.close();
    } finally {
      process.umask(old);
    }
    expect(statSync(path).mode & 0o777).toBe(0o600);
    expect(readFileSync(path, 'utf8')).toMatch(/"from":"X","to":"Y"/);
  });

  it('a symbolic link at the path is refused, and its target is not written', () => {
    const d = dir();
    const target = join(d, 'victim');
    writeFileSync(target, 'secret\n', { mode: 0o600 });
    symlinkSync(target, join(d, 'trace.jsonl'));
    expect(() => new FileTracer(join(d, 'trace.jsonl'), 'a')).toThrow(AccessDeniedError);
    expect(() => new FileTracer(join(d, 'trace.jsonl'), 'a')).toThrow(/symbolic link/);
    expect(readFileSync(target, 'utf8')).toBe('secret\n');
  });

  it('a directory or other non-regular file at the path is refused', () => {
    expect(() => new FileTracer(dir(), 'a')).toThrow(AccessDeniedError);
  });

  it.skipIf(!isRoot)('a file another user created at the path is refused (needs root to make one)', () => {
    const path = join(dir(), 'trace.jsonl');
    writeFileSync(path, '', { mode: 0o666 });
    chownSync(path, 65534, 65534);
    expect(() => new FileTracer(path, 'a')).toThrow(/belongs to uid 65534/);
    expect(readFileSync(path, 'utf8')).toBe('');
  });

  it('Transport.create with such a path rejects with AccessDeniedError before it opens a driver', async () => {
    const d = dir();
    symlinkSync(join(d, 'elsewhere'), join(d, 'trace.jsonl'));
    await expect(Transport.create({ driver: 'sim', trace: join(d, 'trace.jsonl') })).rejects.toMatchObject({ code: 'SMCUDA_ACCESS_DENIED' });
  });
});

describe('a traced frame', () => {
  it("keeps the record's kind: an RGET's HandleKind is traced by name as handleKind", () => {
    const path = join(dir(), 'trace.jsonl');
    const t = new FileTracer(path, 'a');
    const rget = {
      type: FrameType.RGET,
      tag: 1,
      seq: 2,
      kind: HandleKind.POOL,
      identity: new Uint8Array(64),
      base: 16n,
      allocSize: 8,
      offset: 0,
      length: 8,
      bufferId: 3n,
      deviceUuid: '',
      event: null,
    } as const;
    t.frame('b', 'send', rget);
    t.close();
    const rec = JSON.parse(readFileSync(path, 'utf8').trim());
    expect(rec).toMatchObject({ kind: 'frame', frame: 'RGET', handleKind: 'POOL', identity: true, base: '0x10' });
    expect(describeFrame(rget)).not.toHaveProperty('kind');
  });

  it("traces SEGMENT's SegmentKind as segmentKind, by name (not as a HandleKind)", () => {
    const seg = { type: FrameType.SEGMENT, kind: SegmentKind.STAGING_RING, bytes: 8192 } as const;
    const d = describeFrame(seg);
    expect(d).toMatchObject({ frame: 'SEGMENT', segmentKind: 'STAGING_RING', bytes: 8192 });
    expect(d).not.toHaveProperty('kind');
    expect(d).not.toHaveProperty('handleKind');
  });
});
