/**
 * The one child-process protocol (src/cli/worker-protocol.ts) of the demo,
 * bench and soak workers and the tests' peer fixtures, against a real child
 * (test/fixtures/protocol-peer.mjs).
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { type StartWorkerOptions, startWorkers } from '../../../src/cli/worker-protocol.js';
import { spawnPeer, WorkerCommandError, WorkerFailedError, type WorkerClient } from '../../helpers/child.js';

const started: WorkerClient[] = [];
const dirs: string[] = [];
afterEach(async () => {
  for (const w of started.splice(0)) await w.kill();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

async function peer(env: Record<string, string> = {}): Promise<{ w: WorkerClient<{ pid: number }>; marker: string }> {
  const dir = mkdtempSync(join(tmpdir(), 'smcuda-proto-'));
  dirs.push(dir);
  const marker = join(dir, 'marker');
  const w = await spawnPeer<{ pid: number }>('protocol-peer.mjs', { env: { SMCUDA_TEST_MARKER: marker, ...env } });
  started.push(w);
  return { w, marker };
}

describe('the worker protocol', () => {
  it("'ready' carries the worker's data; answers match their requests whatever order they finish in", async () => {
    const { w } = await peer();
    expect(w.ready.pid).toBe(w.child.pid);
    const slow = w.call('later', { ms: 80, value: 'slow' });
    const fast = w.call('later', { ms: 1, value: 'fast' });
    expect(await Promise.all([slow, fast, w.call('echo', { a: [1, 2] }), w.call('nothing')])).toEqual(['slow', 'fast', { a: [1, 2] }, null]);
  });

  it('a failure inside the worker rejects with WorkerCommandError carrying its code and class', async () => {
    const { w } = await peer();
    const err = await w.call('cuda').then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(WorkerCommandError);
    expect(err).toMatchObject({ code: 'CUDA_ERROR_OUT_OF_MEMORY', remoteName: 'CudaError', cmd: 'cuda' });
    expect((err as Error).message).toMatch(/cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY \(2\): asked by the test/);
    expect((err as Error).stack).toMatch(/--- in protocol-peer/);
    await expect(w.call('no-such')).rejects.toMatchObject({
      code: 'SMCUDA_WORKER_FAILED',
      message: expect.stringMatching(/unknown command "no-such"; this worker takes echo, .*, exit/),
    });
    expect(await w.call('echo', 1)).toBe(1); // and it goes on serving
  });

  it('events the worker reports unasked reach the parent by name', async () => {
    const { w } = await peer();
    const seen: unknown[] = [];
    w.on('progress', (d) => seen.push(d));
    expect(await w.call('progress', { count: 3 })).toBe(3);
    expect(seen).toEqual([{ i: 0 }, { i: 1 }, { i: 2 }]);
  });

  it("'exit' runs the worker's clean-up and the process ends by itself with code 0", async () => {
    const { w, marker } = await peer();
    await w.exit();
    expect(await w.exited).toEqual({ code: 0, signal: null });
    expect(readFileSync(marker, 'utf8')).toBe('cleaned up');
    await expect(w.call('echo', 1)).rejects.toBeInstanceOf(WorkerFailedError);
  });

  it('a worker that dies fails every open request with WorkerFailedError, with its stderr', async () => {
    const { w } = await peer();
    const open = w.call('hang');
    const exitEvent = new Promise((r) => w.once('exit', r));
    const dying = w.call('die', { why: 'the test kills me' });
    for (const p of [open, dying]) await expect(p).rejects.toThrow(/exited with code 3: the test kills me/);
    expect(await exitEvent).toEqual({ code: 3, signal: null });
    await expect(w.call('echo', 1)).rejects.toBeInstanceOf(WorkerFailedError);
  });

  it('a worker that cannot start says why', async () => {
    const err = await peer({ SMCUDA_TEST_START: 'fail' }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(WorkerFailedError);
    expect((err as Error).message).toMatch(/could not start: \[SMCUDA_NO_DEVICE\] no device here/);
  });

  it.each([
    ['a string', { message: 'hello' }, /sent string instead of a protocol message/],
    ['a number', { message: 42 }, /sent number instead of a protocol message/],
    ['a failure with error: null', { message: { ok: false, error: null }, everyId: true }, /a failure without an error/],
    ["an 'error' event", { message: { event: 'error', data: { boom: 1 } } }, /the reserved event "error"/],
  ])('a worker that sends %s fails its requests with WorkerFailedError; the parent goes on', async (_what, args, why) => {
    const { w } = await peer();
    const open = w.call('hang');
    const err = await w.call('raw', args).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(WorkerFailedError);
    expect((err as Error).message).toMatch(/broke the worker protocol/);
    expect((err as Error).message).toMatch(why);
    await expect(open).rejects.toBeInstanceOf(WorkerFailedError);
    expect((await w.exited).signal).toBe('SIGKILL');
  });

  it('a worker whose parent lets go of the channel cleans up and exits', async () => {
    const { w, marker } = await peer();
    w.disconnect();
    expect(await w.exited).toEqual({ code: 0, signal: null });
    expect(existsSync(marker)).toBe(true);
  });
});

describe('startWorkers', () => {
  const fixture = fileURLToPath(new URL('../../fixtures/protocol-peer.mjs', import.meta.url));
  const quiet: StartWorkerOptions = { stdio: ['ignore', 'inherit', 'pipe'] };

  it('starts a group whole: every worker ready, in the order asked', async () => {
    const ws = await startWorkers<{ pid: number }>(fixture, [
      { ...quiet, name: 'a' },
      { ...quiet, name: 'b' },
    ]);
    started.push(...ws);
    expect(ws.map((w) => w.name)).toEqual(['a', 'b']);
    for (const w of ws) expect(w.ready.pid).toBe(w.child.pid);
  });

  it('or not at all: one that cannot start rejects the group, and those that started are killed', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'smcuda-proto-'));
    dirs.push(dir);
    const pidFile = join(dir, 'pids');
    // The shell records the worker's pid, then becomes it (exec keeps the pid).
    const launcher: [string, string[]] = ['/bin/sh', ['-c', `echo $$ >> '${pidFile}' && exec '${process.execPath}' "$0"`]];
    const opts = [{ name: 'ok 0' }, { name: 'bad', env: { SMCUDA_TEST_START: 'fail' } }, { name: 'ok 2' }];
    const err = await startWorkers(
      fixture,
      opts.map((o) => ({ ...quiet, ...o, launcher })),
    ).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(WorkerFailedError);
    expect((err as Error).message).toMatch(/bad could not start: \[SMCUDA_NO_DEVICE\] no device here/);
    const pids = readFileSync(pidFile, 'utf8').trim().split('\n').map(Number);
    expect(pids).toHaveLength(3);
    for (const pid of pids) expect(() => process.kill(pid, 0), `pid ${pid} still runs`).toThrow(/ESRCH/);
  });
});
