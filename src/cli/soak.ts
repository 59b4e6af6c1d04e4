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
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { formatBytes, table } from './format.js';
import type { SoakRankReport, SoakWorkerConfig, SoakWorkerReady } from './soak-worker.js';
import { startWorkers, type WorkerClient } from './worker-protocol.js';
import { parseArgs } from 'node:util';
import { UsageError } from './usage.js';
import { cleanUpOnInterrupt } from './interrupt.js';

const HELP = `usage: smcuda soak COUNT [options]

Runs COUNT messages between local processes (mixed sizes: mostly small host
messages, some device messages by eager, RGET and staging), verifies every
byte, and reports per rank RSS, open IPC mappings, file descriptors and the
/dev/shm segments it owns at the start, at the end and after closing, and
the messages per second.

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
  const workers: WorkerClient<SoakWorkerReady>[] = [];
  const received = new Array<number>(opts.ranks).fill(0);
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`soak did not finish within ${opts.timeoutMs / 1000} s; received so far: ${received.reduce((s, n) => s + n, 0)}`)),
      opts.timeoutMs,
    );
  });
  timedOut.catch(() => {});
  const until = <T>(p: Promise<T>) => Promise.race([p, timedOut]);
  /** `cmd` on every rank; the first failure (a rank's error, or a rank that exited) ends the soak. */
  const everyRank = <T>(cmd: string) => until(Promise.all(workers.map((w) => w.call<T>(cmd))));
  const started = performance.now();
  const uninterruptible = cleanUpOnInterrupt({
    command: 'soak',
    dir,
    pids: () => workers.map((w) => w.child.pid!),
    kill: () => {
      for (const w of workers) if (w.child.exitCode === null && w.child.signalCode === null) w.child.kill('SIGKILL');
    },
    exited: () => Promise.all(workers.map((w) => w.exited)),
  });
  try {
    const options = Array.from({ length: opts.ranks }, (_, rank) => {
      const cfg: SoakWorkerConfig = { rank, ranks: opts.ranks, dir, count: opts.count, driver: opts.driver, token };
      return { name: `rank ${rank}`, env: { SMCUDA_SOAK: JSON.stringify(cfg) }, execArgv: ['--expose-gc'], readyTimeoutMs: opts.timeoutMs };
    });
    workers.push(...(await startWorkers<SoakWorkerReady>(workerPath, options)));
    for (const w of workers) {
      w.on('progress', (m: { rank: number; received: number; seconds: number }) => {
        received[m.rank] = m.received;
        if (m.rank === 0) {
          const total = received.reduce((s, n) => s + n, 0);
          progress(`  ${m.seconds.toFixed(0)} s: ${total} of ${opts.count} messages received (${(total / m.seconds).toFixed(0)}/s)`);
        }
      });
    }
    progress(`smcuda soak: ${opts.count} messages between ${opts.ranks} processes on the ${workers[0]!.ready.driver} driver`);
    await everyRank('connect');
    await everyRank('run');
    const rankReports = (await everyRank<SoakRankReport>('close')).sort((x, y) => x.rank - y.rank);
    await until(Promise.all(workers.map((w) => w.exit())));
    const seconds = Math.max(...rankReports.map((r) => r.seconds));
    const total = rankReports.reduce((s, r) => s + r.received, 0);
    const mismatches = rankReports.flatMap((r) => r.mismatches.map((m) => `rank${r.rank}: ${m}`));
    if (total !== opts.count) mismatches.push(`${total} messages received, ${opts.count} sent`);
    progress(`  done in ${((performance.now() - started) / 1000).toFixed(1)} s`);
    return {
      count: opts.count,
      ranks: opts.ranks,
      driver: workers[0]!.ready.driver,
      seconds,
      messagesPerSecond: seconds > 0 ? total / seconds : 0,
      verified: mismatches.length === 0,
      mismatches,
      rankReports,
    };
  } finally {
    clearTimeout(timer);
    await Promise.all(workers.map((w) => w.kill()));
    uninterruptible();
    rmSync(dir, { recursive: true, force: true });
  }
}

function render(r: SoakReport): string {
  const rows = [['rank', 'sent', 'received', 'RSS start → end → closed', 'heap used (after GC)', 'open mappings', 'fds', '/dev/shm', 'seconds']];
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
      `${x.start.shmSegments} → ${x.end.shmSegments} → ${x.closed.shmSegments}`,
      x.seconds.toFixed(1),
    ]);
  }
  const kinds: Record<string, number> = {};
  for (const x of r.rankReports) for (const [k, n] of Object.entries(x.byKind)) kinds[k] = (kinds[k] ?? 0) + n;
  const lines = [
    '',
    table(rows),
    '',
    `by kind/path: ${Object.entries(kinds)
      .sort()
      .map(([k, n]) => `${k} ${n}`)
      .join(', ')}`,
  ];
  lines.push(`${r.count} messages in ${r.seconds.toFixed(1)} s: ${r.messagesPerSecond.toFixed(0)} messages/s (${r.driver} driver)`);
  lines.push(r.verified ? 'verified: every message byte-exact' : `NOT verified: ${r.mismatches.length} problems\n  ${r.mismatches.slice(0, 20).join('\n  ')}`);
  return lines.join('\n');
}
