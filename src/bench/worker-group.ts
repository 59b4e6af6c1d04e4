/**
 * A group of forked worker processes driven by request/response calls: the
 * orchestration that `smcuda bench` needs (and that `smcuda demo` does by
 * hand), kept free of any benchmark logic so another multi-process command
 * can use it.
 *
 *   const g = await WorkerGroup.start(modulePath, [cfg0, cfg1], { envVar: 'X' });
 *   const [a, b] = await Promise.all([g.call(0, cmd0), g.call(1, cmd1)]);
 *   await g.close();
 *
 * - Each worker gets its config as JSON in `envVar`, says `{ type: 'ready', info }`
 *   once, then answers each `{ id, command }` with `{ type: 'reply', id, ok, … }`.
 *   Commands may run concurrently inside a worker.
 * - Messages use the 'advanced' serialization, so bigint and Uint8Array cross intact.
 * - A worker that exits early, or a reply with ok: false, fails every pending
 *   call; a worker never outlives the parent (it exits on 'disconnect', and
 *   the group SIGKILLs what is left on close, on exit and on SIGINT/SIGTERM).
 */
import { type ChildProcess, fork } from 'node:child_process';
import { SmcudaError } from '../errors.js';

export type WorkerToParent =
  | { type: 'ready'; info: unknown }
  | { type: 'start-failed'; message: string; code?: string }
  | { type: 'reply'; id: number; ok: true; result: unknown }
  | { type: 'reply'; id: number; ok: false; message: string; code?: string; stack?: string };

export interface ParentToWorker {
  id: number;
  command: unknown;
}

export class WorkerFailedError extends SmcudaError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('SMCUDA_WORKER_FAILED', message, options);
  }
}

interface Pending {
  resolve: (v: unknown) => void;
  reject: (e: Error) => void;
}

export interface StartOptions {
  /** Environment variable that carries each worker's JSON config. */
  envVar: string;
  /** Extra environment for every worker. */
  env?: NodeJS.ProcessEnv;
  /** Give up waiting for 'ready' after this long. */
  readyTimeoutMs?: number;
}

export class WorkerGroup<Command, Info> {
  readonly infos: Info[];
  private readonly children: ChildProcess[];
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private failure: Error | undefined;
  private closing = false;
  private readonly killAll = () => {
    for (const c of this.children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  };
  private readonly onSignal = (sig: NodeJS.Signals) => {
    this.killAll();
    process.kill(process.pid, sig);
  };

  private constructor(children: ChildProcess[], infos: Info[]) {
    this.children = children;
    this.infos = infos;
  }

  static async start<Command, Info>(modulePath: string, configs: readonly object[], options: StartOptions): Promise<WorkerGroup<Command, Info>> {
    const children: ChildProcess[] = [];
    const infos: Info[] = new Array(configs.length);
    let group: WorkerGroup<Command, Info> | undefined;
    const ready = configs.map(
      (cfg, rank) =>
        new Promise<void>((resolve, reject) => {
          const child = fork(modulePath, [], {
            env: { ...process.env, ...options.env, [options.envVar]: JSON.stringify(cfg) },
            stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
            serialization: 'advanced',
          });
          children.push(child);
          child.on('message', (m: WorkerToParent) => {
            if (m.type === 'ready') {
              infos[rank] = m.info as Info;
              resolve();
            } else if (m.type === 'start-failed') {
              const err = new WorkerFailedError(`worker ${rank} could not start: ${m.code ? `[${m.code}] ` : ''}${m.message}`);
              reject(err);
            } else if (group) group.onReply(rank, m);
          });
          child.on('exit', (code, signal) => {
            const err = new WorkerFailedError(`worker ${rank} exited with ${signal ?? `code ${code}`}`);
            if (group) group.onExit(err);
            else {
              reject(err);
            }
          });
          child.on('error', (err) => reject(new WorkerFailedError(`worker ${rank} could not start: ${err.message}`, { cause: err })));
        }),
    );
    const g = new WorkerGroup<Command, Info>(children, infos);
    process.once('exit', g.killAll);
    process.once('SIGINT', g.onSignal);
    process.once('SIGTERM', g.onSignal);
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([
        Promise.all(ready),
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new WorkerFailedError(`workers not ready within ${(options.readyTimeoutMs ?? 60_000) / 1000} s`)), options.readyTimeoutMs ?? 60_000);
        }),
      ]);
    } catch (err) {
      g.dispose();
      throw err;
    } finally {
      clearTimeout(timer);
    }
    group = g;
    return g;
  }

  get size(): number {
    return this.children.length;
  }

  /** Sends `command` to worker `rank`; resolves with its result. */
  call<R>(rank: number, command: Command): Promise<R> {
    if (this.failure) return Promise.reject(this.failure);
    const child = this.children[rank];
    if (!child) return Promise.reject(new RangeError(`no worker ${rank} (group of ${this.children.length})`));
    const id = this.nextId++;
    return new Promise<R>((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
      child.send({ id, command } satisfies ParentToWorker);
    });
  }

  /** Ends every pending call with `err` and kills the workers (e.g. on a timeout). */
  abort(err: Error): void {
    this.fail(err);
    this.dispose();
  }

  /** Lets the workers exit (IPC disconnect), SIGKILLs any still there after `graceMs`. */
  async close(graceMs = 5_000): Promise<void> {
    this.closing = true;
    const exits = this.children.map((c) => (c.exitCode !== null || c.signalCode !== null ? Promise.resolve() : new Promise<void>((r) => c.once('exit', () => r()))));
    for (const c of this.children) if (c.connected) c.disconnect();
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([Promise.all(exits), new Promise<void>((r) => (timer = setTimeout(r, graceMs)))]);
    clearTimeout(timer);
    this.dispose();
  }

  private dispose(): void {
    this.closing = true;
    this.killAll();
    process.off('exit', this.killAll);
    process.off('SIGINT', this.onSignal);
    process.off('SIGTERM', this.onSignal);
  }

  private onReply(rank: number, m: WorkerToParent): void {
    if (m.type !== 'reply') return;
    const p = this.pending.get(m.id);
    if (!p) return;
    this.pending.delete(m.id);
    if (m.ok) p.resolve(m.result);
    else {
      const err = new WorkerFailedError(`worker ${rank}: ${m.code ? `[${m.code}] ` : ''}${m.message}`);
      if (m.stack) err.stack = `${err.stack}\n--- in worker ${rank} ---\n${m.stack}`;
      p.reject(err);
    }
  }

  private onExit(err: Error): void {
    if (this.closing) return;
    this.fail(err);
  }

  private fail(err: Error): void {
    this.failure ??= err;
    for (const p of this.pending.values()) p.reject(err);
    this.pending.clear();
  }
}

/**
 * The worker side: reads the config, announces `info`, runs each command
 * with `handle` (concurrently), and exits when the parent goes away.
 */
export function serveWorker<Config, Command>(
  envVar: string,
  init: (config: Config) => Promise<{ info: unknown; handle: (command: Command) => Promise<unknown>; shutdown: () => Promise<void> }>,
): void {
  const send = process.send?.bind(process);
  const raw = process.env[envVar];
  if (!send || !raw) {
    console.error(`this module is a worker started by its parent command (${envVar} unset or no IPC channel), not by hand`);
    process.exit(2);
  }
  const config = JSON.parse(raw) as Config;
  const queue: ParentToWorker[] = [];
  let handle: ((c: Command) => Promise<unknown>) | undefined;
  const run = (m: ParentToWorker) => {
    handle!(m.command as Command).then(
      (result) => send({ type: 'reply', id: m.id, ok: true, result } satisfies WorkerToParent),
      (err: Error & { code?: string }) =>
        send({ type: 'reply', id: m.id, ok: false, message: err?.message ?? String(err), code: err?.code, stack: err?.stack } satisfies WorkerToParent),
    );
  };
  process.on('message', (m: ParentToWorker) => {
    if (handle) run(m);
    else queue.push(m);
  });
  init(config).then(
    (w) => {
      let shuttingDown = false;
      process.on('disconnect', () => {
        if (shuttingDown) return;
        shuttingDown = true;
        // A bounded clean-up: shared segments and mappings are released, then the process ends.
        const force = setTimeout(() => process.exit(0), 3_000);
        force.unref();
        w.shutdown().finally(() => process.exit(0));
      });
      handle = w.handle;
      send({ type: 'ready', info: w.info } satisfies WorkerToParent);
      for (const m of queue.splice(0)) run(m);
    },
    (err: Error & { code?: string }) => {
      // The parent reports it (with the other workers' fate); exit once the message is out.
      send({ type: 'start-failed', message: err?.message ?? String(err), code: err?.code } satisfies WorkerToParent, () => process.exit(1));
    },
  );
}
