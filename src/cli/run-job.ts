/**
 * The ranks of one `smcuda run`, supervised as mpirun does: when a rank
 * fails (a non-zero exit or a signal), the others have `graceMs` to exit by
 * themselves (a communicator aborts its calls when a peer dies, so they
 * usually do), then get SIGTERM, then SIGKILL after another `graceMs`. A
 * signal to the launcher is forwarded at once, with SIGKILL after
 * `graceMs`; a second one sends SIGKILL at once.
 *
 * Each rank leads its own process group and is signalled as a group, so
 * that processes a rank started stop with it.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { constants } from 'node:os';
import { pipePrefixed, type LineSink } from './run-prefix.js';

export interface RankSpec {
  rank: number;
  command: string;
  args: string[];
  env: NodeJS.ProcessEnv;
}

export interface RankOutcome {
  rank: number;
  pid: number | null;
  /** null where a signal ended it. */
  exitCode: number | null;
  signal: NodeJS.Signals | null;
  durationMs: number;
  /** The last signal the launcher sent it, if any. */
  stoppedBy: NodeJS.Signals | null;
}

export interface JobResult {
  ranks: RankOutcome[];
  /** The first rank that failed on its own (not stopped by the launcher), if any. */
  firstFailure: number | null;
  /** The signal that interrupted the launcher, if one did. */
  interrupted: NodeJS.Signals | null;
  /** The first failure's code (a signal: 128 + its number, as shells say), else 128 + the interrupting signal's, else 0. */
  exitCode: number;
}

/** How long to wait for a rank's output to end once it exited (a process it started may hold the pipe). */
const DRAIN_LIMIT_MS = 2_000;

/** A shell's exit status for a process ended by `signal`. */
export function signalStatus(signal: NodeJS.Signals): number {
  return 128 + (constants.signals[signal] ?? 0);
}

interface Running {
  spec: RankSpec;
  child: ChildProcess;
  started: number;
  outcome: RankOutcome | undefined;
  stoppedBy: NodeJS.Signals | null;
  output: Promise<unknown>;
}

export class Job {
  private readonly running: Running[] = [];
  private firstFailure: number | null = null;
  private interrupted: NodeJS.Signals | null = null;
  private readonly timers: NodeJS.Timeout[] = [];
  private allExited!: () => void;
  private readonly exited = new Promise<void>((r) => (this.allExited = r));

  constructor(
    private readonly specs: RankSpec[],
    private readonly graceMs: number,
    private readonly out: { stdout: LineSink; stderr: LineSink },
  ) {}

  /** Starts every rank; resolves once every one has exited and its output is written. */
  async run(): Promise<JobResult> {
    for (const spec of this.specs) this.start(spec);
    await this.exited;
    for (const t of this.timers) clearTimeout(t);
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([Promise.all(this.running.map((r) => r.output)), new Promise((r) => (timer = setTimeout(r, DRAIN_LIMIT_MS)))]);
    clearTimeout(timer);
    for (const r of this.running) {
      r.child.stdout?.destroy();
      r.child.stderr?.destroy();
    }
    return this.result();
  }

  /** The pids of the ranks still running. */
  livePids(): number[] {
    return this.running.filter((r) => !r.outcome && r.child.pid !== undefined).map((r) => r.child.pid!);
  }

  /** A signal came to the launcher: forward it, SIGKILL after the grace; a second one kills at once. */
  interrupt(signal: NodeJS.Signals): void {
    if (this.interrupted) {
      this.signalAll('SIGKILL');
      return;
    }
    this.interrupted = signal;
    this.signalAll(signal);
    this.after(this.graceMs, () => this.signalAll('SIGKILL'));
  }

  private start(spec: RankSpec): void {
    const child = spawn(spec.command, spec.args, { env: spec.env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    const r: Running = { spec, child, started: Date.now(), outcome: undefined, stoppedBy: null, output: Promise.resolve() };
    this.running.push(r);
    r.output = Promise.all([pipePrefixed(child.stdout!, spec.rank, this.out.stdout), pipePrefixed(child.stderr!, spec.rank, this.out.stderr)]);
    child.once('exit', (code, signal) => this.finish(r, code, signal));
    child.once('error', (err) => {
      // Spawning failed (no such executable): the rank never ran; 127, as a shell says.
      if (child.pid !== undefined) return;
      this.out.stderr.write(`[${spec.rank}] smcuda run: cannot start ${spec.command}: ${err.message}\n`);
      this.finish(r, 127, null);
    });
  }

  private finish(r: Running, code: number | null, signal: NodeJS.Signals | null): void {
    if (r.outcome) return;
    r.outcome = { rank: r.spec.rank, pid: r.child.pid ?? null, exitCode: code, signal, durationMs: Date.now() - r.started, stoppedBy: r.stoppedBy };
    const failed = code !== 0 || signal !== null;
    if (failed && this.firstFailure === null && this.interrupted === null) {
      this.firstFailure = r.spec.rank;
      this.after(this.graceMs, () => this.signalAll('SIGTERM'));
      this.after(2 * this.graceMs, () => this.signalAll('SIGKILL'));
    }
    if (this.running.length === this.specs.length && this.running.every((x) => x.outcome)) this.allExited();
  }

  private after(ms: number, fn: () => void): void {
    const t = setTimeout(fn, ms);
    this.timers.push(t);
  }

  private signalAll(signal: NodeJS.Signals): void {
    for (const r of this.running) {
      const pid = r.child.pid;
      if (r.outcome || pid === undefined) continue;
      r.stoppedBy = signal;
      try {
        process.kill(-pid, signal);
      } catch {
        r.child.kill(signal); // not a group leader after all (it left its group): the rank alone
      }
    }
  }

  private result(): JobResult {
    const ranks = this.running.map((r) => r.outcome!);
    let exitCode = 0;
    if (this.firstFailure !== null) {
      const f = ranks.find((x) => x.rank === this.firstFailure)!;
      exitCode = f.signal ? signalStatus(f.signal) : f.exitCode!;
    } else if (this.interrupted) {
      exitCode = signalStatus(this.interrupted);
    }
    return { ranks, firstFailure: this.firstFailure, interrupted: this.interrupted, exitCode };
  }
}
