/**
 * `smcuda soak COUNT`: a long run that shows nothing leaks. Four local
 * processes (soak-worker.ts) send COUNT messages in all, spread over every
 * ordered pair: mostly small host messages, some small device messages
 * (eager), a few large device ones (RGET once IPC is negotiated, staging
 * before). Every byte is checked. Each rank reports its RSS, open IPC
 * mappings and file descriptors at the start, at the end, and after closing;
 * the command prints them and the message rate. A leak shows as growth from
 * start to end that does not scale away with a longer run.
 */
import { type ChildProcess, fork } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { formatBytes, table } from './format.js';
import type { SoakRankReport, SoakWorkerConfig } from './soak-worker.js';
import { parseArgs } from 'node:util';
import { UsageError } from './usage.js';

const HELP = `usage: smcuda soak COUNT [options]

Runs COUNT messages between local processes (mixed sizes: mostly small host
messages, some device messages by eager, RGET and staging), verifies every
byte, and reports per rank RSS, open IPC mappings and file descriptors at the
start, at the end and after closing, and the messages per second.

  --ranks N             processes (default 4)
  --driver KIND         auto | native | sim (default auto)
  --timeout SECONDS     give up after this long (default 3600)
  --quiet               no progress lines
  --json                print one JSON object instead of tables
  -h, --help            this help`;

export interface SoakOptions {
  count: number;
  ranks: number;
  driver: 'auto' | 'native' | 'sim';
  timeoutMs: number;
}

export interface SoakReport {
  count: number;
  ranks: number;
  driver: string;
  seconds: number;
  messagesPerSecond: number;
  verified: boolean;
  mismatches: string[];
  rankReports: SoakRankReport[];
}

type WorkerMessage =
  | { type: 'listening'; rank: number; driver: string }
  | { type: 'connected'; rank: number }
  | { type: 'progress'; rank: number; received: number; sent: number; seconds: number }
  | { type: 'finished'; rank: number }
  | { type: 'done'; report: SoakRankReport }
  | { type: 'failed'; rank: number; message: string };

export async function runSoak(argv: string[]): Promise<number> {
  let a: { ranks?: string; driver?: string; timeout?: string; quiet?: boolean; json?: boolean; help?: boolean };
  let positional: string[];
  try {
    ({ values: a, positionals: positional } = parseArgs({
      args: argv,
      allowPositionals: true,
      strict: true,
      options: {
        ranks: { type: 'string', default: '4' },
        driver: { type: 'string', default: 'auto' },
        timeout: { type: 'string', default: '3600' },
        quiet: { type: 'boolean', default: false },
        json: { type: 'boolean', default: false },
        help: { type: 'boolean', short: 'h', default: false },
      },
    }));
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  if (a.help) {
    console.log(HELP);
    return 0;
  }
  if (positional.length !== 1) throw new UsageError('give the number of messages, e.g. smcuda soak 100000');
  const count = Number(positional[0]!.replace(/_/g, ''));
  if (!Number.isSafeInteger(count) || count < 1) throw new UsageError(`COUNT must be a positive integer, got ${positional[0]}`);
  const ranks = Number(a.ranks);
  if (!Number.isInteger(ranks) || ranks < 2 || ranks > 64) throw new UsageError(`--ranks must be an integer from 2 to 64, got ${a.ranks}`);
  if (!['auto', 'native', 'sim'].includes(a.driver!)) throw new UsageError(`--driver must be auto, native or sim, got ${a.driver}`);
  const timeout = Number(a.timeout);
  if (!(timeout > 0)) throw new UsageError('--timeout must be a positive number of seconds');
  const progress = a.json || a.quiet ? () => {} : (line: string) => console.log(line);
  const report = await soak({ count, ranks, driver: a.driver as SoakOptions['driver'], timeoutMs: timeout * 1000 }, progress);
  console.log(a.json ? JSON.stringify(report, null, 2) : render(report));
  return report.verified ? 0 : 1;
}

/** Runs the soak; rejects on a worker failure or the timeout, after killing every worker. */
export async function soak(opts: SoakOptions, progress: (line: string) => void = () => {}): Promise<SoakReport> {
  const dir = mkdtempSync(join(tmpdir(), 'smcuda-soak-')); // 0700: only this user reaches the sockets
  const token = randomBytes(16).toString('hex');
  const workerPath = fileURLToPath(new URL('./soak-worker.js', import.meta.url));
  const children: ChildProcess[] = [];
  const killAll = () => {
    for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  };
  process.once('exit', killAll);
  const waiters = new Map<string, { items: WorkerMessage[]; resolve: (items: WorkerMessage[]) => void }>();
  let failure: ((err: Error) => void) | undefined;
  const failed = new Promise<never>((_, reject) => (failure = reject));
  failed.catch(() => {});
  const collect = (type: WorkerMessage['type']) => new Promise<WorkerMessage[]>((resolve) => waiters.set(type, { items: [], resolve }));
  const until = <T>(p: Promise<T>) => Promise.race([p, failed]);
  const received = new Array<number>(opts.ranks).fill(0);
  const timer = setTimeout(() => failure?.(new Error(`soak did not finish within ${opts.timeoutMs / 1000} s; received so far: ${received.reduce((s, n) => s + n, 0)}`)), opts.timeoutMs);
  const started = performance.now();
  try {
    const listening = collect('listening');
    for (let rank = 0; rank < opts.ranks; rank++) {
      const cfg: SoakWorkerConfig = { rank, ranks: opts.ranks, dir, count: opts.count, driver: opts.driver, token };
      const child = fork(workerPath, [], { env: { ...process.env, SMCUDA_SOAK: JSON.stringify(cfg) }, stdio: ['ignore', 'inherit', 'inherit', 'ipc'], execArgv: ['--expose-gc'] });
      children.push(child);
      child.on('message', (m: WorkerMessage) => {
        if (m.type === 'failed') return failure?.(new Error(`rank ${m.rank} failed: ${m.message}`));
        if (m.type === 'progress') {
          received[m.rank] = m.received;
          if (m.rank === 0) {
            const total = received.reduce((s, n) => s + n, 0);
            progress(`  ${m.seconds.toFixed(0)} s: ${total} of ${opts.count} messages received (${(total / m.seconds).toFixed(0)}/s)`);
          }
          return;
        }
        const w = waiters.get(m.type);
        if (!w) return;
        w.items.push(m);
        if (w.items.length === opts.ranks) {
          waiters.delete(m.type);
          w.resolve(w.items);
        }
      });
      child.on('exit', (code, signal) => {
        if (code !== 0) failure?.(new Error(`rank ${rank} exited with ${signal ?? `code ${code}`} before the soak finished`));
      });
    }
    const hello = (await until(listening)) as Extract<WorkerMessage, { type: 'listening' }>[];
    progress(`smcuda soak: ${opts.count} messages between ${opts.ranks} processes on the ${hello[0]!.driver} driver`);
    const connected = collect('connected');
    for (const c of children) c.send({ type: 'connect' });
    await until(connected);
    const finished = collect('finished');
    for (const c of children) c.send({ type: 'run' });
    await until(finished);
    const done = collect('done');
    for (const c of children) c.send({ type: 'exit' });
    const rankReports = ((await until(done)) as Extract<WorkerMessage, { type: 'done' }>[]).map((m) => m.report).sort((x, y) => x.rank - y.rank);
    const seconds = Math.max(...rankReports.map((r) => r.seconds));
    const total = rankReports.reduce((s, r) => s + r.received, 0);
    const mismatches = rankReports.flatMap((r) => r.mismatches.map((m) => `rank${r.rank}: ${m}`));
    if (total !== opts.count) mismatches.push(`${total} messages received, ${opts.count} sent`);
    progress(`  done in ${((performance.now() - started) / 1000).toFixed(1)} s`);
    return { count: opts.count, ranks: opts.ranks, driver: hello[0]!.driver, seconds, messagesPerSecond: seconds > 0 ? total / seconds : 0, verified: mismatches.length === 0, mismatches, rankReports };
  } finally {
    clearTimeout(timer);
    killAll();
    process.off('exit', killAll);
    rmSync(dir, { recursive: true, force: true });
  }
}

function render(r: SoakReport): string {
  const rows = [['rank', 'sent', 'received', 'RSS start → end → closed', 'heap used (after GC)', 'open mappings', 'fds', 'seconds']];
  const mb = (n: number) => formatBytes(n);
  for (const x of r.rankReports) {
    rows.push([
      `rank${x.rank}`,
      String(x.sent),
      String(x.received),
      `${mb(x.start.rssBytes)} → ${mb(x.end.rssBytes)} → ${mb(x.closed.rssBytes)}`,
      `${mb(x.start.heapUsedBytes)} → ${mb(x.end.heapUsedBytes)} → ${mb(x.closed.heapUsedBytes)}`,
      `${x.start.openMappings} → ${x.end.openMappings} → ${x.closed.openMappings}`,
      `${x.start.fds} → ${x.end.fds} → ${x.closed.fds}`,
      x.seconds.toFixed(1),
    ]);
  }
  const kinds: Record<string, number> = {};
  for (const x of r.rankReports) for (const [k, n] of Object.entries(x.byKind)) kinds[k] = (kinds[k] ?? 0) + n;
  const lines = ['', table(rows), '', `by kind/path: ${Object.entries(kinds).sort().map(([k, n]) => `${k} ${n}`).join(', ')}`];
  lines.push(`${r.count} messages in ${r.seconds.toFixed(1)} s: ${r.messagesPerSecond.toFixed(0)} messages/s (${r.driver} driver)`);
  lines.push(r.verified ? 'verified: every message byte-exact' : `NOT verified: ${r.mismatches.length} problems\n  ${r.mismatches.slice(0, 20).join('\n  ')}`);
  return lines.join('\n');
}
