/**
 * A group of worker processes driven by request/response calls over the
 * worker protocol (src/cli/worker-protocol.ts): the orchestration that
 * `smcuda bench` needs, kept free of any benchmark logic.
 *
 *   const g = await WorkerGroup.start(modulePath, [cfg0, cfg1], { envVar: 'X' });
 *   const [a, b] = await Promise.all([g.call(0, cmd0), g.call(1, cmd1)]);
 *   await g.close();
 *
 * - Each worker gets its config as JSON in `envVar` and says 'ready' with its
 *   info; a command `{ op, … }` is the request `op` with the command as its
 *   arguments. Commands may run concurrently inside a worker.
 * - Messages use the 'advanced' serialization, so bigint and Uint8Array cross intact.
 * - A worker that exits early fails every pending call, and a failed command
 *   rejects with the worker's error code; a worker never outlives the parent
 *   (it exits when the channel closes, and the group SIGKILLs what is left on
 *   close and on exit; on SIGINT/SIGTERM the bench stops them and removes
 *   what they left: src/cli/interrupt.ts).
 */
import { serveRequests, startWorkers, type WorkerClient, WorkerFailedError } from '../cli/worker-protocol.js';
import { ArgumentRangeError } from '../errors.js';

export { WorkerFailedError } from '../cli/worker-protocol.js';

export interface StartOptions {
  /** Environment variable that carries each worker's JSON config. */
  envVar: string;
  /** Extra environment for every worker. */
  env?: NodeJS.ProcessEnv;
  /** Give up waiting for 'ready' after this long. */
  readyTimeoutMs?: number;
}

export class WorkerGroup<Command extends { op: string }, Info> {
  readonly infos: Info[];
  private failure: Error | undefined;
  private closing = false;
  private readonly killAll = () => {
    for (const w of this.workers) if (w.child.exitCode === null && w.child.signalCode === null) w.child.kill('SIGKILL');
  };

  private constructor(private readonly workers: WorkerClient<Info>[]) {
    this.infos = workers.map((w) => w.ready);
    for (const [rank, w] of workers.entries()) {
      w.once('exit', ({ code, signal }: { code: number | null; signal: NodeJS.Signals | null }) => {
        if (!this.closing) this.fail(new WorkerFailedError(`worker ${rank} exited with ${signal ?? `code ${code}`}`));
      });
    }
    process.once('exit', this.killAll);
  }

  /** The workers' pids. */
  get pids(): number[] {
    return this.workers.map((w) => w.child.pid!);
  }

  /** Resolves once every worker has exited. */
  get exited(): Promise<unknown> {
    return Promise.all(this.workers.map((w) => w.exited));
  }

  static async start<Command extends { op: string }, Info>(
    modulePath: string,
    configs: readonly object[],
    options: StartOptions,
  ): Promise<WorkerGroup<Command, Info>> {
    const workers = await startWorkers<Info>(
      modulePath,
      configs.map((cfg, rank) => ({
        name: `worker ${rank}`,
        env: { ...options.env, [options.envVar]: JSON.stringify(cfg) },
        serialization: 'advanced' as const,
        ...(options.readyTimeoutMs !== undefined ? { readyTimeoutMs: options.readyTimeoutMs } : {}),
      })),
    );
    return new WorkerGroup<Command, Info>(workers);
  }

  get size(): number {
    return this.workers.length;
  }

  /** Sends `command` to worker `rank`; resolves with its result. */
  call<R>(rank: number, command: Command): Promise<R> {
    if (this.failure) return Promise.reject(this.failure);
    const w = this.workers[rank];
    if (!w) return Promise.reject(new ArgumentRangeError(`no worker ${rank} (group of ${this.workers.length})`));
    return w.call<R>(command.op, command);
  }

  /** Ends every pending call with `err` and kills the workers (e.g. on a timeout). */
  abort(err: Error): void {
    this.fail(err);
    this.dispose();
  }

  /** Lets the workers exit (they clean up when the channel closes), SIGKILLs any still there after `graceMs`. */
  async close(graceMs = 5_000): Promise<void> {
    this.closing = true;
    for (const w of this.workers) w.disconnect();
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([Promise.all(this.workers.map((w) => w.exited)), new Promise<void>((r) => (timer = setTimeout(r, graceMs)))]);
    clearTimeout(timer);
    this.dispose();
  }

  private dispose(): void {
    this.closing = true;
    this.killAll();
    process.off('exit', this.killAll);
  }

  private fail(err: Error): void {
    this.failure ??= err;
    for (const w of this.workers) w.fail(err);
  }
}

/**
 * The worker side: reads the config, announces `info`, runs each command
 * with `handle` (concurrently), and cleans up with `shutdown` when the
 * parent lets go.
 */
export function serveWorker<Config, Command>(
  envVar: string,
  init: (config: Config) => Promise<{ info: unknown; handle: (command: Command) => Promise<unknown>; shutdown: () => Promise<void> }>,
): void {
  const raw = process.env[envVar];
  if (!process.send || !raw) {
    console.error(`this module is a worker started by its parent command (${envVar} unset or no IPC channel), not by hand`);
    process.exit(2);
  }
  let worker: Awaited<ReturnType<typeof init>> | undefined;
  const link = serveRequests((_op, command: Command) => worker!.handle(command), { onExit: () => worker?.shutdown() });
  init(JSON.parse(raw) as Config).then(
    (w) => {
      worker = w;
      link.ready(w.info);
    },
    (err: unknown) => link.startFailed(err),
  );
}
