/**
 * Communicator failures on the native driver (issue 47), ranks in separate
 * processes: different calls on the ranks (SMCUDA_CALL_MISMATCH on every
 * rank), a rank SIGKILLed in a loop of 25M-element allreduces (the survivors
 * learn it, then free and close in under a second), a bad argument on one
 * rank (it gets the error, the others the abort naming it), a rank that
 * closes (SMCUDA_PEER_CLOSED), and a receiver that closes right after a
 * receive on its stream (the sender's send resolves). Each case runs with the
 * ranks sharing one GPU (under MPS where the caller started it: its status is
 * recorded) and, where two are visible, across two; after each, a fresh job
 * on the same GPUs must verify an allreduce: no abort path left the GPU or
 * the MPS server faulted.
 *
 * Fixtures: test/fixtures/comm-rank.mjs and ./recv-close-pair.mjs (compiled
 * code: `npx tsc -p .` first). Skipped, visibly, where no GPU is usable.
 * COMM_FAILURES_DRIVER=sim runs the same cases on the simulated driver (what
 * checks this harness without a GPU). Each case's timings go to
 * $SMCUDA_GPU_OUT/comm-failures.json when SMCUDA_GPU_OUT is set, and one
 * line per case is printed.
 */
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { mpsStatus } from '../../src/cli/mps.js';
import { runJsonChild } from '../helpers/json-child.js';
import { itChecksMps } from './mps-check.js';
import { probeNativeGpuDriven } from './native-probe.js';

const DRIVER = process.env.COMM_FAILURES_DRIVER === 'sim' ? 'sim' : 'native';
const p =
  DRIVER === 'sim'
    ? { devices: 2, skip: false as const }
    : await probeNativeGpuDriven((g) => (g.modules ? undefined : `the native driver cannot load modules: ${g.reason ?? 'not supported'}`));
const RANK = fileURLToPath(new URL('../fixtures/comm-rank.mjs', import.meta.url));
const PAIR = fileURLToPath(new URL('./recv-close-pair.mjs', import.meta.url));
/** Elements of each rank's allreduce in the dead-rank loop (fewer on the simulator, whose copies are the CPU's). */
const DIE_COUNT = process.env.COMM_FAILURES_COUNT ?? '25000000';
/** How long any one process of a case may run before it counts as hung. */
const PROCESS_LIMIT_MS = 60_000;

interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
  pid: number;
  out: Record<string, unknown> | undefined;
  stderr: string;
  ms: number;
}

/** The child's environment: the driver, and only the GPUs of `visible` (the simulator's world reset). */
function childEnv(visible: string, extra: Record<string, string>): NodeJS.ProcessEnv {
  const { SMCUDA_TOKEN: _t, SMCUDA_SIM: _s, SMCUDA_SIM_VISIBLE: _v, ...env } = process.env;
  return { ...env, COMM_DRIVER: DRIVER, ...(DRIVER === 'native' ? { CUDA_VISIBLE_DEVICES: visible } : {}), ...extra };
}

/** Runs `node script args` to its exit (SIGKILLed past PROCESS_LIMIT_MS); its last stdout line is JSON (or `{ unparsed }`). */
async function runProcess(script: string, args: string[], env: NodeJS.ProcessEnv): Promise<Exit> {
  const e = await runJsonChild(script, args, env, PROCESS_LIMIT_MS);
  const line = e.stdout.trim().split('\n').pop();
  return { code: e.code, signal: e.signal, pid: e.pid, out: e.out ?? (line ? { unparsed: line } : undefined), stderr: e.stderr, ms: e.ms };
}

/** `size` ranks of comm-rank.mjs in COMM_MODE `mode`, meeting in a fresh rendezvous directory. */
async function runRanks(size: number, mode: string, visible: string, extra: Record<string, string> = {}): Promise<{ exits: Exit[]; dirLeft: string[] }> {
  const dir = mkdtempSync(join(tmpdir(), 'smcuda-gpu-fail-'));
  try {
    const exits = await Promise.all(
      [...Array(size).keys()].map((rank) =>
        runProcess(
          RANK,
          [],
          childEnv(visible, { RANK: String(rank), WORLD_SIZE: String(size), LOCAL_RANK: String(rank), SMCUDA_RENDEZVOUS: dir, COMM_MODE: mode, ...extra }),
        ),
      ),
    );
    return { exits, dirLeft: readdirSync(dir) };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The sender and the receiver of recv-close-pair.mjs. */
async function runPair(bytes: number, visible: string, ipc: boolean): Promise<{ send: Exit; recv: Exit }> {
  const dir = mkdtempSync(join(tmpdir(), 'smcuda-gpu-close-'));
  try {
    const env = childEnv(visible, { SHUTDOWN_IPC: ipc ? '1' : '0' });
    const send = runProcess(PAIR, ['send', dir, String(bytes)], env);
    await waitFor(join(dir, 's.sock'), 20_000);
    const recv = runProcess(PAIR, ['recv', dir, String(bytes)], env);
    return { send: await send, recv: await recv };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

async function waitFor(path: string, ms: number): Promise<void> {
  const end = Date.now() + ms;
  const [dir, name] = [join(path, '..'), path.split('/').pop()!];
  while (!readdirSync(dir).includes(name)) {
    if (Date.now() > end) throw new Error(`${path} did not appear within ${ms} ms: the sender did not listen`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

function exitedCleanly(e: Exit): void {
  expect({ code: e.code, signal: e.signal }, `pid ${e.pid} stderr:\n${e.stderr}`).toEqual({ code: 0, signal: null });
}

// ------------------------------------------------------------------ the record

const records: Record<string, unknown>[] = [];

/** Keeps a case's numbers (written to $SMCUDA_GPU_OUT/comm-failures.json after every case) and prints one line. */
function record(topology: string, name: string, numbers: Record<string, unknown>): void {
  records.push({ topology, case: name, driver: DRIVER, ...numbers });
  console.log(`comm-failures [${DRIVER}, ${topology}, MPS ${mpsStatus().active ? 'on' : 'off'}] ${name}: ${JSON.stringify(numbers)}`);
  const out = process.env.SMCUDA_GPU_OUT;
  if (!out) return;
  mkdirSync(out, { recursive: true });
  writeFileSync(join(out, 'comm-failures.json'), `${JSON.stringify({ driver: DRIVER, devices: p.devices, mps: mpsStatus(), cases: records }, null, 2)}\n`);
}

const max = (xs: number[]): number => Math.round(Math.max(...xs) * 10) / 10;

/** A fresh job (new processes) on the same GPUs: two ranks verify allreduce, allgather and broadcast. */
async function freshJob(topology: string, visible: string, after: string): Promise<void> {
  const { exits } = await runRanks(2, 'ok', visible);
  for (const e of exits) {
    exitedCleanly(e);
    expect(e.out).toMatchObject({ ok: true });
  }
  record(topology, `fresh job after ${after}`, { ok: true, jobMs: max(exits.map((e) => e.ms)) });
}

// ------------------------------------------------------------------ the cases

const topologies = [
  { name: 'two ranks on one GPU', visible: '0', devices: 1 },
  { name: 'two GPUs', visible: '0,1', devices: 2 },
] as const;

describe.skipIf(p.skip !== false)(`communicator failures on the ${DRIVER} driver${p.skip ? ` (skipped: ${p.skip})` : ''}`, () => {
  for (const topo of topologies) {
    const T = topo.name;
    const fewer = p.skip === false && p.devices < topo.devices;
    describe.skipIf(p.devices < topo.devices)(`${T}${fewer ? ` (skipped: ${p.devices} GPU visible)` : ''}`, () => {
      // MPS is recorded on every line; required where the caller says it started MPS around the run.
      if (topo.devices === 1) {
        itChecksMps(DRIVER, 'the ranks');
      }

      it('baseline: a job verifies allreduce, allgather and broadcast before any failure', async () => {
        const { exits } = await runRanks(2, 'ok', topo.visible);
        for (const e of exits) {
          exitedCleanly(e);
          expect(e.out).toMatchObject({ ok: true });
        }
        record(T, 'baseline job', { ok: true, jobMs: max(exits.map((e) => e.ms)), algorithms: exits[0]!.out!.algorithms });
      }, 90_000);

      it('mismatch: rank 1 allreduces i32 where rank 0 allreduces f32: both fail with SMCUDA_CALL_MISMATCH on dtype, in bounded time; then a fresh job works', async () => {
        const { exits } = await runRanks(2, 'mismatch', topo.visible);
        for (const e of exits) {
          exitedCleanly(e);
          expect(e.out).toMatchObject({ error: { code: 'SMCUDA_CALL_MISMATCH', fields: ['dtype'], seq: 1 } });
          expect((e.out!.error as { ranks: number[] }).ranks).toContain(1);
          expect(e.out!.ms as number).toBeLessThan(5000);
        }
        record(T, 'mismatch', { failMs: max(exits.map((e) => e.out!.ms as number)), callCheck: exits.map((e) => e.out!.callCheck) });
        await freshJob(T, topo.visible, 'mismatch');
      }, 150_000);

      it(`dead rank: rank 3 of 4 SIGKILLed 300 ms into a loop of ${DIE_COUNT}-f32 allreduces: the survivors fail with SMCUDA_PEER_LOST naming it, free and close in < 1 s; then a fresh job works`, async () => {
        const { exits, dirLeft } = await runRanks(4, 'die-loop', topo.visible, { COMM_COUNT: DIE_COUNT });
        const dead = exits[3]!;
        expect(dead.signal, dead.stderr).toBe('SIGKILL');
        for (const e of exits.slice(0, 3)) {
          exitedCleanly(e);
          expect(e.out).toMatchObject({ error: { code: 'SMCUDA_COMM_ABORTED', causeCode: 'SMCUDA_PEER_LOST', failedRank: 3, failedPid: dead.pid } });
          expect(e.out!.freeMs as number).toBeLessThan(1000);
          expect(e.out!.closeMs as number).toBeLessThan(1000);
        }
        expect(dirLeft).toEqual([]);
        const survivors = exits.slice(0, 3);
        record(T, 'dead rank (die-loop, 4 ranks)', {
          freeMs: max(survivors.map((e) => e.out!.freeMs as number)),
          closeMs: max(survivors.map((e) => e.out!.closeMs as number)),
          survivorExitMs: max(survivors.map((e) => e.ms)),
        });
        await freshJob(T, topo.visible, 'dead rank');
      }, 150_000);

      for (const bad of ['pointer', 'host'] as const) {
        it(`one rank's error (${bad === 'pointer' ? 'a pointer that is no device memory' : 'a host Float32Array'}): that rank gets it, the other the abort naming it; then a fresh job works`, async () => {
          const t0 = performance.now();
          const { exits, dirLeft } = await runRanks(2, 'error', topo.visible, { COMM_BAD: bad });
          for (const e of exits) exitedCleanly(e);
          const own = exits[1]!.out!.error as { code: string };
          // The driver's code for a pointer it does not know (CUDA_ERROR_*), checked before any GPU work; JS's for a host array.
          expect(own.code).toMatch(bad === 'pointer' ? /^CUDA_ERROR_/ : /^SMCUDA_INVALID_ARG_TYPE$/);
          expect(exits[0]!.out).toMatchObject({ error: { code: 'SMCUDA_COMM_ABORTED', failedRank: 1, causeCode: own.code } });
          expect(dirLeft).toEqual([]);
          record(T, `one rank's error (${bad})`, { code: own.code, jobMs: Math.round(performance.now() - t0) });
          await freshJob(T, topo.visible, `one rank's error (${bad})`);
        }, 150_000);
      }

      it("a rank that closes: the other's next call fails with SMCUDA_PEER_CLOSED naming it within 1 s; then a fresh job works", async () => {
        const { exits } = await runRanks(2, 'close-peer', topo.visible);
        for (const e of exits) exitedCleanly(e);
        expect(exits[1]!.out).toMatchObject({ closed: true });
        expect(exits[0]!.out).toMatchObject({
          error: { code: 'SMCUDA_COMM_ABORTED', causeCode: 'SMCUDA_PEER_CLOSED', failedRank: 1, failedPid: exits[1]!.pid },
        });
        expect(exits[0]!.out!.ms as number).toBeLessThan(1000);
        record(T, 'close-peer', { failMs: max([exits[0]!.out!.ms as number]) });
        await freshJob(T, topo.visible, 'close-peer');
      }, 150_000);

      for (const ipc of [true, false]) {
        it(`shutdown (${ipc ? 'IPC on' : 'IPC off: staging'}): a receiver that closes right after a receive into device memory on its stream: the sender's send resolves, every byte landed, 2 and 4 MiB; then a fresh job works`, async () => {
          for (const bytes of [2 << 20, (4 << 20) - 12]) {
            const { send, recv } = await runPair(bytes, topo.visible, ipc);
            exitedCleanly(send);
            exitedCleanly(recv);
            expect(send.out).toMatchObject({ outcome: 'resolved' });
            expect(recv.out).toMatchObject({ received: bytes, sum: send.out!.sum });
            expect(recv.out!.path).toMatch(ipc && recv.out!.state === 'OK' ? /^rget/ : /^staging$/);
            if (!ipc) expect(recv.out!.state).toBe('BAD');
            record(T, `shutdown ${bytes} B, IPC ${ipc ? 'on' : 'off'}`, {
              state: recv.out!.state,
              path: recv.out!.path,
              device: recv.out!.device,
              sendMs: max([send.out!.sendMs as number]),
            });
          }
          await freshJob(T, topo.visible, `shutdown (IPC ${ipc ? 'on' : 'off'})`);
        }, 150_000);
      }
    });
  }
});
