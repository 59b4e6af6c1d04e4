/**
 * The one protocol between a parent and a child process it drives: the
 * ranks of `smcuda demo` and `smcuda soak`, the workers of `smcuda bench`,
 * and the tests' peer fixtures. It runs over Node's IPC channel (fork, or
 * spawn with an 'ipc' stdio slot); Bun and Deno speak that channel's JSON
 * form too, so a `launcher` can start a worker under either (demo --runtime).
 *
 *   parent → worker   { id, cmd, args }                 a request
 *   worker → parent   { id, ok: true, result }           its answer
 *                     { id, ok: false, error }           error: { name, code, message, stack }
 *                     { event: 'ready', data }           once, when it takes requests
 *                     { event: 'start-failed', error }   instead of 'ready'; then it exits
 *                     { event: NAME, data }              anything else it reports unasked
 *
 * `exit` is the one reserved command: the worker runs its clean-up, answers,
 * and lets go of the channel, so that it ends when its work is done. A worker
 * never outlives its parent: when the channel closes under it, it cleans up
 * (3 s at most) and exits. On the parent's side a failed request rejects with
 * a WorkerCommandError carrying the worker's error code and name, and a
 * worker that exits fails every request still open with WorkerFailedError.
 * A worker that sends anything else (a string, a number, a failure without
 * an error, an 'error' or 'exit' event) is killed, and its requests fail
 * with WorkerFailedError: the parent never throws on what a worker sends.
 */
import { type ChildProcess, fork, spawn, type StdioOptions } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { SmcudaError } from '../errors.js';

export interface WorkerRequest {
  id: number;
  cmd: string;
  args?: unknown;
}

/** An error as it crosses the channel. */
export interface WireError {
  name: string;
  message: string;
  code?: string;
  stack?: string;
}

export type WorkerReply = { id: number; ok: true; result: unknown } | { id: number; ok: false; error: WireError };
export type WorkerEvent = { event: 'ready'; data?: unknown } | { event: 'start-failed'; error: WireError } | { event: string; data?: unknown };
export type WorkerToParent = WorkerReply | WorkerEvent;

/** The reserved command that ends a worker cleanly. */
export const EXIT_COMMAND = 'exit';

/** A worker could not start, was not ready in time, or exited with requests open. */
export class WorkerFailedError extends SmcudaError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('SMCUDA_WORKER_FAILED', message, options);
  }
}

/**
 * A request failed inside the worker: `code` is the worker's error code
 * (e.g. 'CUDA_ERROR_INVALID_VALUE', 'SMCUDA_PEER_LOST'), `remoteName` its
 * class, and the stack shows both sides.
 */
export class WorkerCommandError extends SmcudaError {
  constructor(
    readonly worker: string,
    readonly cmd: string,
    readonly remoteName: string,
    code: string | undefined,
    message: string,
    remoteStack?: string,
  ) {
    super(code ?? 'SMCUDA_WORKER_COMMAND', `${worker}: ${cmd}: ${code ? `[${code}] ` : ''}${message}`);
    if (remoteStack) this.stack = `${this.stack}\n--- in ${worker} ---\n${remoteStack}`;
  }
}

export function toWireError(err: unknown): WireError {
  const e = err as { name?: unknown; message?: unknown; code?: unknown; stack?: unknown } | null;
  return {
    name: typeof e?.name === 'string' ? e.name : 'Error',
    message: typeof e?.message === 'string' ? e.message : String(err),
    ...(typeof e?.code === 'string' ? { code: e.code } : {}),
    ...(typeof e?.stack === 'string' ? { stack: e.stack } : {}),
  };
}

// -- the worker's side ----------------------------------------------------------

// biome-ignore lint/suspicious/noExplicitAny: each handler declares the argument type it takes; unknown would refuse those
export type CommandHandler = (args: any) => unknown;

export interface ServeOptions {
  /** Run requests one at a time, in order (default: concurrently). */
  sequential?: boolean;
  /** Clean-up for `exit` and for a parent that went away. */
  onExit?: () => unknown;
  /**
   * What must not be left behind even when that clean-up fails or does not
   * finish in time after the parent went away (synchronous, best effort): it
   * runs just before the forced exit.
   */
  onForcedExit?: () => void;
}

export interface WorkerLink {
  /** Starts taking requests (those that came before wait for this), and tells the parent with `data`. */
  ready(data?: unknown): void;
  /** Reports something unasked (progress, say). */
  emit(event: string, data?: unknown): void;
  /** The worker could not start: tells the parent why, then exits with code 1. */
  startFailed(err: unknown): void;
}

/**
 * Serves requests from the parent with `handlers` (by command name, or one
 * function for all). Exits with code 2 and a message when not started by a
 * parent with an IPC channel.
 */
export function serveRequests(
  // biome-ignore lint/suspicious/noExplicitAny: as CommandHandler's argument
  handlers: Record<string, CommandHandler> | ((cmd: string, args: any) => unknown),
  options: ServeOptions = {},
): WorkerLink {
  const rawSend = process.send?.bind(process);
  if (!rawSend) {
    console.error('this module is a worker: its parent starts it with an IPC channel, not by hand');
    process.exit(2);
  }
  // Always with a callback: without one, a write to a parent that just died (EPIPE) is an 'error' on
  // the process, uncaught, and the worker would die before its clean-up ('disconnect' does that).
  const send = (message: unknown, then?: () => void): void => {
    if (!process.connected) return;
    rawSend(message, undefined, undefined, (err: Error | null) => {
      if (!err) then?.();
    });
  };
  const handle = typeof handlers === 'function' ? handlers : undefined;
  const table = typeof handlers === 'function' ? undefined : handlers;
  const queue: WorkerRequest[] = [];
  let taking = false;
  let chain: Promise<unknown> = Promise.resolve();
  let leaving = false;
  const cleanUp = async () => {
    await options.onExit?.();
  };

  const answer = (reply: WorkerReply, then?: () => void) => {
    send(reply, then);
  };
  const execute = async (m: WorkerRequest) => {
    if (m.cmd === EXIT_COMMAND) {
      leaving = true;
      try {
        await cleanUp();
        answer({ id: m.id, ok: true, result: null }, () => {
          process.off('disconnect', orphaned);
          process.disconnect();
        });
      } catch (err) {
        answer({ id: m.id, ok: false, error: toWireError(err) }, () => process.exit(1));
      }
      return;
    }
    try {
      const fn = handle ? (args: unknown) => handle(m.cmd, args) : table![m.cmd];
      if (!fn) throw new WorkerFailedError(`unknown command ${JSON.stringify(m.cmd)}; this worker takes ${Object.keys(table!).join(', ')}, exit`);
      answer({ id: m.id, ok: true, result: (await fn(m.args)) ?? null });
    } catch (err) {
      answer({ id: m.id, ok: false, error: toWireError(err) });
    }
  };
  const run = (m: WorkerRequest) => {
    if (options.sequential || m.cmd === EXIT_COMMAND) chain = chain.then(() => execute(m));
    else void execute(m);
  };
  const orphaned = () => {
    if (leaving) return;
    leaving = true;
    // The parent is gone: a bounded clean-up (segments, mappings), then the end.
    const giveUp = () => {
      try {
        options.onForcedExit?.();
      } finally {
        process.exit(1);
      }
    };
    const force = setTimeout(giveUp, 3_000);
    force.unref();
    cleanUp().then(() => process.exit(0), giveUp);
  };
  process.on('disconnect', orphaned);
  process.on('message', (m: WorkerRequest) => {
    if (taking) run(m);
    else queue.push(m);
  });
  return {
    ready(data) {
      send({ event: 'ready', data } satisfies WorkerEvent);
      taking = true;
      for (const m of queue.splice(0)) run(m);
    },
    emit(event, data) {
      send({ event, data } satisfies WorkerEvent);
    },
    startFailed(err) {
      // The parent is gone (the start failed because the orphan clean-up closed the transport): that
      // clean-up ends the process; a send on the closed channel would throw and skip it.
      if (leaving || !process.connected) return;
      send({ event: 'start-failed', error: toWireError(err) } satisfies WorkerEvent, () => process.exit(1));
    },
  };
}

/**
 * The config a parent hands its worker as JSON in `envVar`; exits with code 2
 * and a message when the module was not started by `command` (no config, or
 * no IPC channel).
 */
export function workerConfig<T>(envVar: string, command: string): T {
  const cfg = JSON.parse(process.env[envVar] ?? 'null') as T | null;
  if (!cfg || !process.send) {
    console.error(`this worker is started by \`${command}\`, not by hand`);
    process.exit(2);
  }
  return cfg;
}

// -- the parent's side ----------------------------------------------------------

/** Event names the parent's EventEmitter gives a meaning of its own: a worker may not send them. */
const RESERVED_EVENTS = new Set(['error', 'exit', 'newListener', 'removeListener']);

function isWireError(e: unknown): e is WireError {
  return typeof e === 'object' && e !== null && typeof (e as WireError).name === 'string' && typeof (e as WireError).message === 'string';
}

/**
 * Checks a message from a worker against the protocol; answers the reason it
 * breaks it, or undefined. Whatever a worker sends (a string, a number,
 * `error: null`, an 'error' event) must not throw in the parent.
 */
export function protocolViolation(m: unknown): string | undefined {
  if (typeof m !== 'object' || m === null || Array.isArray(m)) return `sent ${m === null ? 'null' : typeof m} instead of a protocol message`;
  const o = m as Record<string, unknown>;
  if ('id' in o) {
    if (typeof o.id !== 'number') return 'sent a reply whose id is not a number';
    if (o.ok === true) return undefined;
    if (o.ok === false) return isWireError(o.error) ? undefined : 'sent a failure without an error { name, message }';
    return 'sent a reply without ok: true or false';
  }
  if ('event' in o) {
    if (typeof o.event !== 'string') return 'sent an event whose name is not a string';
    if (RESERVED_EVENTS.has(o.event)) return `sent the reserved event ${JSON.stringify(o.event)}`;
    if (o.event === 'start-failed' && !isWireError(o.error)) return "sent 'start-failed' without an error { name, message }";
    return undefined;
  }
  return 'sent a message that is neither a reply nor an event';
}

export interface StartWorkerOptions {
  /** How the worker is named in errors (default: the module's file name and pid). */
  name?: string;
  args?: string[];
  env?: NodeJS.ProcessEnv;
  execArgv?: string[];
  /** stdin, stdout, stderr (the IPC slot is added); default inherit all but stdin. 'pipe' for stderr: its tail goes into WorkerFailedError. */
  stdio?: [StdioOptions, StdioOptions, StdioOptions] | ['ignore' | 'inherit' | 'pipe', 'ignore' | 'inherit' | 'pipe', 'ignore' | 'inherit' | 'pipe'];
  /** 'advanced' lets bigint and Uint8Array cross intact (Node to Node only); default 'json'. */
  serialization?: 'json' | 'advanced';
  /** Start it through this program instead of fork (e.g. ['/bin/sh', ['-c', 'ulimit -n 64 && exec "$0" "$1"', node]], or another runtime); the module path is its last argument. */
  launcher?: [command: string, args: string[]];
  /** Give up waiting for 'ready' after this long (default 60 s). */
  readyTimeoutMs?: number;
}

/**
 * A worker process as the parent sees it. Emits every unasked event by its
 * name (`on('progress', data => …)`) and 'exit' ({ code, signal }) when the
 * process ends.
 */
export class WorkerClient<Ready = unknown> extends EventEmitter {
  /** What the worker said with 'ready'. */
  readonly ready: Ready;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  private readonly pending = new Map<number, { cmd: string; resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  private nextId = 1;
  private failure: Error | undefined;

  private constructor(
    readonly child: ChildProcess,
    readonly name: string,
    ready: Ready,
    exited: WorkerClient['exited'],
  ) {
    super();
    this.ready = ready;
    this.exited = exited;
  }

  /** Starts `modulePath` and waits for its 'ready'. */
  static start<Ready = unknown>(modulePath: string, options: StartWorkerOptions = {}): Promise<WorkerClient<Ready>> {
    const [stdin, stdout, stderr] = options.stdio ?? ['ignore', 'inherit', 'inherit'];
    const spawnOptions = {
      env: { ...process.env, ...options.env },
      stdio: [stdin, stdout, stderr, 'ipc'] as StdioOptions,
      serialization: options.serialization ?? 'json',
    };
    const child = options.launcher
      ? spawn(options.launcher[0], [...options.launcher[1], modulePath, ...(options.args ?? [])], spawnOptions)
      : fork(modulePath, options.args ?? [], { ...spawnOptions, ...(options.execArgv ? { execArgv: options.execArgv } : {}) });
    const name = options.name ?? `worker ${modulePath.split('/').pop()} (pid ${child.pid})`;
    let errTail = '';
    child.stderr?.on('data', (d: Buffer) => (errTail = (errTail + d.toString()).slice(-4096)));
    const why = (what: string) => `${name} ${what}${errTail.trim() ? `: ${errTail.trim()}` : ''}`;
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
      child.once('exit', (code, signal) => setImmediate(() => resolve({ code, signal }))),
    );
    let client: WorkerClient<Ready> | undefined;
    return new Promise<WorkerClient<Ready>>((resolve, reject) => {
      const timer = setTimeout(() => {
        reject(new WorkerFailedError(why(`was not ready within ${(options.readyTimeoutMs ?? 60_000) / 1000} s`)));
        child.kill('SIGKILL');
      }, options.readyTimeoutMs ?? 60_000);
      child.on('message', (raw: unknown) => {
        const bad = protocolViolation(raw);
        if (bad) {
          // A worker that breaks the protocol is not trusted with more requests.
          const err = new WorkerFailedError(why(`broke the worker protocol: ${bad}`));
          child.kill('SIGKILL');
          if (client) return client.fail(err);
          clearTimeout(timer);
          return reject(err);
        }
        const m = raw as WorkerToParent;
        if (client) return client.onMessage(m);
        if ('event' in m && m.event === 'ready') {
          clearTimeout(timer);
          client = new WorkerClient<Ready>(child, name, (m as { data?: unknown }).data as Ready, exited);
          resolve(client);
        } else if ('event' in m && m.event === 'start-failed') {
          clearTimeout(timer);
          const e = (m as { error: WireError }).error;
          reject(new WorkerFailedError(why(`could not start: ${e.code ? `[${e.code}] ` : ''}${e.message}`)));
        }
      });
      child.on('error', (err) => {
        // Could not be started, or a message could not be sent (the channel closed under it).
        if (client) return client.fail(new WorkerFailedError(why(`cannot be reached: ${err.message}`), { cause: err }));
        clearTimeout(timer);
        reject(new WorkerFailedError(why(`could not start: ${err.message}`), { cause: err }));
      });
      void exited.then(({ code, signal }) => {
        clearTimeout(timer);
        const err = new WorkerFailedError(why(`exited with ${signal ?? `code ${code}`}`));
        if (!client) return reject(err);
        client.fail(err);
        client.emit('exit', { code, signal });
      });
    });
  }

  /** Sends `cmd` with `args`; resolves with the worker's result. */
  call<R = unknown>(cmd: string, args?: unknown): Promise<R> {
    if (this.failure) return Promise.reject(this.failure);
    if (!this.child.connected) return Promise.reject(new WorkerFailedError(`${this.name} has let go of its channel`));
    const id = this.nextId++;
    return new Promise<R>((resolve, reject) => {
      this.pending.set(id, { cmd, resolve: resolve as (v: unknown) => void, reject });
      this.child.send({ id, cmd, ...(args === undefined ? {} : { args }) } satisfies WorkerRequest);
    });
  }

  /** Asks the worker to clean up and end; SIGKILLs it if it has not ended after `graceMs`. */
  async exit(graceMs = 10_000): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const timer = setTimeout(() => this.child.kill('SIGKILL'), graceMs);
    try {
      if (this.child.connected) await this.call(EXIT_COMMAND).catch(() => undefined); // its exit below says how it went
      await this.exited;
    } finally {
      clearTimeout(timer);
    }
  }

  /** Closes the channel: the worker cleans up and exits (how `smcuda bench` ends its workers). */
  disconnect(): void {
    if (this.child.connected) this.child.disconnect();
  }

  /** SIGKILL, and wait for the end. */
  async kill(): Promise<void> {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill('SIGKILL');
    await this.exited;
  }

  /** Ends every open request with `err`; later calls reject with it too. */
  fail(err: Error): void {
    this.failure ??= err;
    for (const p of this.pending.values()) p.reject(err);
    this.pending.clear();
  }

  private onMessage(m: WorkerToParent): void {
    if ('id' in m) {
      const p = this.pending.get(m.id);
      if (!p) return;
      this.pending.delete(m.id);
      if (m.ok) p.resolve(m.result);
      else p.reject(new WorkerCommandError(this.name, p.cmd, m.error.name, m.error.code, m.error.message, m.error.stack));
    } else if ('event' in m) {
      this.emit(m.event, (m as { data?: unknown }).data);
    }
  }
}

/**
 * Starts one worker of `modulePath` per entry of `options`, all at once, and
 * waits until every one is ready. If any cannot start, kills those that did
 * and rejects with the first failure: a group starts whole or not at all.
 */
export async function startWorkers<Ready = unknown>(modulePath: string, options: readonly StartWorkerOptions[]): Promise<WorkerClient<Ready>[]> {
  const settled = await Promise.allSettled(options.map((o) => WorkerClient.start<Ready>(modulePath, o)));
  const workers = settled.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
  const failed = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
  if (failed) {
    await Promise.all(workers.map((w) => w.kill()));
    throw failed.reason;
  }
  return workers;
}
