/**
 * `smcuda demo`, the main job: N local processes (demo-worker.ts), each with
 * its own Transport over Unix sockets, exchange GPU buffers in a ring and
 * all-to-all at several sizes, verify every byte, and report each endpoint's
 * negotiation and data paths. The ranks are driven over the worker protocol
 * (worker-protocol.ts): each phase is a command to every rank, and its result
 * the rank's answer. The children never outlive this process.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { COLLECTIVE_LABELS, collectivesDemo, renderCollectives } from './demo-collectives.js';
import { FORCED_ALGORITHMS, isForcedAlgorithm, type ForcedAlgorithm } from '../collectives/communicator.js';
import { DTYPES, isDType } from '../kernels/dtypes.js';
import { formatBytes, parseSize, rate, table } from './format.js';
import { isMemoryOption, MEMORY_OPTIONS, type MemoryOption } from './demo-memory.js';
import type { DemoReportEndpoint, DemoWorkerReady, GraphResult, MemoryReport, Phase, PhaseResult, WorkerConfig } from './demo-worker.js';
import { GRAPH_SAMPLED_REPLAYS } from './demo-pattern.js';
import { mpsStatus, sharedGpuAdvice } from './mps.js';
import { findRuntime, RUNTIMES, type RuntimeCommand, type RuntimeName } from './runtimes.js';
import { parse, UsageError } from './usage.js';
import { type StartWorkerOptions, startWorkers, type WorkerClient, WorkerFailedError } from './worker-protocol.js';
import { cleanUpOnInterrupt } from './interrupt.js';

const DEFAULT_SIZES = '0,8,4K,64K,1M,16M,64M';

const HELP = `usage: smcuda demo [options]

Spawns N local processes that exchange GPU buffers over smcuda in a ring and
all-to-all at several sizes, verifies every byte, and prints for each endpoint
the negotiation path it took (e.g. INIT→SENT→OK), its tries, the data paths
used (eager, rget, staging) with bytes moved, and the throughput.
Without a GPU it runs on the simulated driver and says so.

  --ranks N             processes (default 2)
  --sizes LIST          message sizes, comma-separated (default ${DEFAULT_SIZES})
  --iters K             iterations per size and pattern (default 3)
  --driver KIND         auto | native | sim (default auto)
  --ipc on|off          CUDA IPC (default on); off: GPU data goes through staging
  --memory KIND         legacy | vmm | vmm-chunked | pool (default legacy): how the
                        ranks' buffers are allocated: cuMemAlloc, one cuMemCreate
                        chunk, four chunks with every message spanning two, or
                        cuMemAllocFromPoolAsync from a pool; the report says which
                        data path moved the large messages
  --runtime LIST        node | bun | deno, comma-separated: rank i runs under the
                        i-th, round robin (default node); bun and deno are found
                        on PATH or in node_modules/.bin (npm install bun deno)
  --graph               instead of the ring and all-to-all: every pair of ranks registers
                        buffers and makes a persistent transfer each way; each rank captures
                        all of its transfers in one CUDA graph and replays it --replays times
                        in bursts of 8 (host time per replay: the median launch call), then
                        ${GRAPH_SAMPLED_REPLAYS} more with fresh data, every byte checked (message size: the
                        largest of --sizes, default 1M here)
  --replays K           graph replays (default 100)
  --flags WHO           memops | kernel: who runs the transfers' flag operations
                        (persistent transfers' flags option; default memops)
  --trace FILE          append a JSON-lines trace of every frame and transition
  --timeout SECONDS     give up after this long (default 600)
  --collectives         instead: one Communicator of the ranks runs every collective
                        (allreduce with each reduction the dtype takes: sum/avg/min/
                        max/prod, premul, band/bor/bxor; reduce, reduce-scatter,
                        broadcast, allgather, alltoall, gather, scatter; with counts
                        per rank: allgatherv, reduce-scatterv (sum, premul),
                        alltoallv skewed as an MoE) × dtype (f32 f16 bf16 f64
                        f8e4m3 f8e5m2 i8 u8 i32 u32 i64 u64) × size (--sizes, default 0,1,1001,1M and 64M on a
                        GPU: bytes per rank, whole elements) and checks every element;
                        JSON: { driver, ranks, devices, collectives: [{ op, dtype, size,
                        algorithm, verified }], verified, mismatches, durationMs }
  --ops LIST            with --collectives: only these (allreduce-sum, allreduce-avg,
                        allreduce-min, allreduce-max, allreduce-prod, allreduce-premul,
                        allreduce-band, allreduce-bor, allreduce-bxor, reduce,
                        reduce-scatter, broadcast, allgather, alltoall, gather,
                        scatter, allgatherv, reduce-scatterv, alltoallv)
  --dtypes LIST         with --collectives: only these dtypes
  --algorithm NAME      with --collectives: allreduce by one-shot, one-shot-ll, two-shot,
                        ce-pipeline or staged at every size (the others by one-shot or
                        staged); default chosen by size
  --nodes K             with --collectives: the ranks on K virtual nodes (ranks/K each), one
                        communicator across them: smcuda inside a node, the engine between
                        (the socket twin on the simulated driver); every case, every
                        element checked against the hierarchy's order of reduction
                        (docs/multinode.md)
  --json                print one JSON object (below) instead of tables
  -h, --help            this help

When ranks share a GPU and the CUDA Multi-Process Service is not running, it
says what that costs and how to start MPS.

JSON output: { driver: { kind, reason }, ranks, sizes, iters, ipc, mps,
  memory: { option, buffers: [{ rank, kind, reason?, chunkSize?, chunksTouched? }],
            largeMessages: { rget, staging } },
  devices: [{ rank, runtime, index, name, uuid }],
  phases: [{ phase: 'ring'|'alltoall', size, messages, bytes, seconds, gbPerSecond }],
  endpoints: [{ rank, peer, negotiation: { state, path, tries, reason?, settleMs? },
                sent/received: { eager|rget|staging: { messages, bytes } }, cache: {...} }],
  graph?: { captured, replays, sampled, size, transfers, hostUsPerReplay, seconds } (--graph),
  verified: boolean, mismatches: string[], durationMs }`;

export interface DemoOptions {
  ranks: number;
  sizes: number[];
  iters: number;
  driver: 'auto' | 'native' | 'sim';
  ipc: boolean;
  /** How the ranks allocate their buffers (default legacy). */
  memory?: MemoryOption;
  trace?: string;
  timeoutMs: number;
  /** Rank i runs under runtimes[i % runtimes.length] (default: node). */
  runtimes?: RuntimeCommand[];
  /** `--graph`: persistent transfers captured in a graph, replayed this many times (instead of the phases). */
  graph?: { replays: number; flags: 'memops' | 'kernel' };
}

export async function runDemo(argv: string[]): Promise<number> {
  const a = parse(argv, {
    ranks: { type: 'string', default: '2' },
    sizes: { type: 'string' },
    graph: { type: 'boolean', default: false },
    replays: { type: 'string', default: '100' },
    flags: { type: 'string', default: 'memops' },
    iters: { type: 'string', default: '3' },
    driver: { type: 'string', default: 'auto' },
    ipc: { type: 'string', default: 'on' },
    memory: { type: 'string', default: 'legacy' },
    runtime: { type: 'string', default: 'node' },
    trace: { type: 'string' },
    timeout: { type: 'string', default: '600' },
    json: { type: 'boolean', default: false },
    collectives: { type: 'boolean', default: false },
    ops: { type: 'string' },
    dtypes: { type: 'string' },
    algorithm: { type: 'string' },
    nodes: { type: 'string' },
    help: { type: 'boolean', short: 'h', default: false },
  });
  if (a.help) {
    console.log(HELP);
    return 0;
  }
  const ranks = Number(a.ranks);
  if (!Number.isInteger(ranks) || ranks < 2 || ranks > 64) throw new UsageError(`--ranks must be an integer from 2 to 64, got ${a.ranks}`);
  const iters = Number(a.iters);
  if (!Number.isInteger(iters) || iters < 1) throw new UsageError(`--iters must be a positive integer, got ${a.iters}`);
  if (!['auto', 'native', 'sim'].includes(a.driver!)) throw new UsageError(`--driver must be auto, native or sim, got ${a.driver}`);
  if (a.ipc !== 'on' && a.ipc !== 'off') throw new UsageError(`--ipc must be on or off, got ${a.ipc}`);
  if (!isMemoryOption(a.memory!)) throw new UsageError(`--memory must be one of ${MEMORY_OPTIONS.join(', ')}, got ${a.memory}`);
  let sizes: number[];
  try {
    sizes = (a.sizes ?? (a.graph ? '1M' : DEFAULT_SIZES)).split(',').map(parseSize);
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  const names = a.runtime!.split(',').map((r) => r.trim());
  for (const r of names)
    if (!(RUNTIMES as readonly string[]).includes(r)) throw new UsageError(`--runtime takes ${RUNTIMES.join(', ')} (comma-separated), got '${r}'`);
  const runtimes = names.map((r) => findRuntime(r as RuntimeName)); // not found: says how to install it
  const timeout = Number(a.timeout);
  if (!(timeout > 0)) throw new UsageError(`--timeout must be a positive number of seconds`);
  const collectiveOnly = (['ops', 'dtypes', 'algorithm', 'nodes'] as const).filter((k) => a[k] !== undefined);
  if (!a.collectives && collectiveOnly.length > 0) {
    throw new UsageError(
      `${collectiveOnly.map((k) => `--${k}`).join(', ')} only go with --collectives (smcuda demo --collectives ${collectiveOnly.map((k) => `--${k} …`).join(' ')})`,
    );
  }
  if (a.collectives) {
    const given = argv.some((x) => x === '--sizes' || x.startsWith('--sizes='));
    const ops = a.ops?.split(',').map((x) => x.trim());
    for (const o of ops ?? [])
      if (!COLLECTIVE_LABELS.includes(o)) throw new UsageError(`--ops takes ${COLLECTIVE_LABELS.join(', ')} (comma-separated), got '${o}'`);
    const dtypes = a.dtypes?.split(',').map((x) => x.trim());
    for (const t of dtypes ?? []) if (!isDType(t)) throw new UsageError(`--dtypes takes ${DTYPES.join(', ')} (comma-separated), got '${t}'`);
    if (a.algorithm !== undefined && !isForcedAlgorithm(a.algorithm))
      throw new UsageError(`--algorithm takes ${FORCED_ALGORITHMS.join(', ')}, got '${a.algorithm}'`);
    const algorithm = a.algorithm as ForcedAlgorithm | undefined;
    const nodes = a.nodes === undefined ? undefined : Number(a.nodes);
    if (nodes !== undefined && (!Number.isInteger(nodes) || nodes < 1 || ranks % nodes !== 0))
      throw new UsageError(`--nodes must be a whole number of nodes that divides --ranks (as many ranks on each), got ${a.nodes} for ${ranks} ranks`);
    const report = await collectivesDemo(
      {
        ranks,
        driver: a.driver as DemoOptions['driver'],
        timeoutMs: timeout * 1000,
        ...(given ? { sizes } : {}),
        ...(ops ? { ops } : {}),
        ...(dtypes ? { dtypes } : {}),
        ...(algorithm ? { algorithm } : {}),
        ...(nodes !== undefined ? { nodes } : {}),
      },
      a.json ? () => {} : (line) => console.log(line),
    );
    console.log(a.json ? JSON.stringify(report, null, 2) : renderCollectives(report));
    return report.verified ? 0 : 1;
  }
  const replays = Number(a.replays);
  if (!Number.isInteger(replays) || replays < 1) throw new UsageError(`--replays must be a positive integer, got ${a.replays}`);
  if (a.flags !== 'memops' && a.flags !== 'kernel') throw new UsageError(`--flags must be memops or kernel, got ${a.flags}`);
  if (a.graph && Math.max(...sizes) === 0) throw new UsageError('--graph needs a message size above 0 (--sizes)');
  const opts: DemoOptions = {
    ...(a.graph ? { graph: { replays, flags: a.flags as 'memops' | 'kernel' } } : {}),
    ranks,
    sizes,
    iters,
    driver: a.driver as DemoOptions['driver'],
    ipc: a.ipc === 'on',
    memory: a.memory,
    timeoutMs: timeout * 1000,
    runtimes,
    ...(a.trace ? { trace: a.trace } : {}),
  };

  const progress = a.json ? () => {} : (line: string) => console.log(line);
  const report = await demo(opts, progress);
  if (a.json) console.log(JSON.stringify(report, null, 2));
  else console.log(render(report));
  return report.verified ? 0 : 1;
}

export interface DemoReport {
  driver: { kind: string; reason: string };
  ranks: number;
  sizes: number[];
  iters: number;
  ipc: boolean;
  /**
   * The ranks' buffers: what the driver says of them, and by which data path
   * the messages that were not eager (the large ones) arrived, over all endpoints.
   */
  memory: { option: MemoryOption; buffers: Omit<MemoryReport, never>[]; largeMessages: { rget: number; staging: number } };
  /** The CUDA Multi-Process Service, and whether ranks share a GPU without it. */
  mps: { active: boolean; sharedGpuWithoutMps: boolean };
  devices: { rank: number; runtime: string; index: number; name: string; uuid: string }[];
  phases: { phase: Phase; size: number; messages: number; bytes: number; seconds: number; gbPerSecond: number }[];
  endpoints: DemoReportEndpoint[];
  /** `--graph`: what the graph did (host time per replay is the slowest rank's). */
  graph?: { captured: boolean; replays: number; sampled: number; size: number; transfers: number; hostUsPerReplay: number; seconds: number };
  verified: boolean;
  mismatches: string[];
  durationMs: number;
}

/** Runs the demo; rejects on any worker failure or the timeout, after killing every worker. */
export async function demo(opts: DemoOptions, progress: (line: string) => void = () => {}): Promise<DemoReport> {
  const started = performance.now();
  const memory = opts.memory ?? 'legacy';
  const dir = mkdtempSync(join(tmpdir(), 'smcuda-demo-')); // mode 0700: only we can reach the sockets
  const token = randomBytes(16).toString('hex');
  const workerPath = fileURLToPath(new URL('./demo-worker.js', import.meta.url));
  const workers: WorkerClient<DemoWorkerReady>[] = [];
  const killAll = () => {
    for (const w of workers) if (w.child.exitCode === null && w.child.signalCode === null) w.child.kill('SIGKILL');
  };
  process.once('exit', killAll);
  const uninterruptible = cleanUpOnInterrupt({
    command: 'demo',
    dir,
    pids: () => workers.map((w) => w.child.pid!),
    kill: killAll,
    exited: () => Promise.all(workers.map((w) => w.exited)),
  });

  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new WorkerFailedError(`demo did not finish within ${opts.timeoutMs / 1000} s`)), opts.timeoutMs);
  });
  timedOut.catch(() => {});
  const until = <T>(p: Promise<T>) => Promise.race([p, timedOut]);
  /** `cmd` on every rank; the first failure (a rank's error, or a rank that exited) ends the demo. */
  const everyRank = <T>(cmd: string, args?: unknown) => until(Promise.all(workers.map((w) => w.call<T>(cmd, args))));
  try {
    const options = Array.from({ length: opts.ranks }, (_, rank): StartWorkerOptions => {
      const cfg: WorkerConfig = {
        rank,
        ranks: opts.ranks,
        dir,
        sizes: opts.sizes,
        iters: opts.iters,
        driver: opts.driver,
        ipc: opts.ipc,
        memory,
        token,
        ...(opts.trace ? { trace: opts.trace } : {}),
      };
      const runtime = opts.runtimes?.[rank % opts.runtimes.length];
      // Bun and Deno speak Node's IPC protocol to a parent (NODE_CHANNEL_FD, JSON), so one channel serves all
      // three. A launcher (spawn), not fork: Deno's fork rewrites the arguments as if the child were Deno.
      return {
        name: `rank ${rank}`,
        env: { SMCUDA_DEMO: JSON.stringify(cfg) },
        readyTimeoutMs: opts.timeoutMs,
        ...(runtime ? { launcher: [runtime.command, runtime.args] } : {}),
      };
    });
    workers.push(...(await until(startWorkers<DemoWorkerReady>(workerPath, options))));
    const hello = workers.map((w) => w.ready);
    const first = hello[0]!;
    progress(
      `smcuda demo: ${opts.ranks} ranks on the ${first.driver === 'sim' ? 'simulated' : 'native'} driver (${first.reason}); IPC ${opts.ipc ? 'on' : 'off'}; memory ${memory}`,
    );
    for (const h of hello) progress(`  rank${h.rank} (${h.runtime}): device ${h.device.index} ${h.device.name} ${h.device.uuid}`);
    const mps = mpsStatus();
    const sharing = first.driver === 'native' && new Set(hello.map((h) => h.device.uuid)).size < hello.length;
    for (const line of sharedGpuAdvice(sharing, mps)) progress(line);

    const buffers = await everyRank<MemoryReport>('connect');
    for (const b of buffers) progress(`  rank${b.rank} buffers: ${describeBuffers(b)}`);

    const phases: DemoReport['phases'] = [];
    const mismatches: string[] = [];
    let graph: DemoReport['graph'];
    if (opts.graph) {
      const size = Math.max(...opts.sizes);
      const results = await everyRank<GraphResult>('graph', { replays: opts.graph.replays, size, flags: opts.graph.flags });
      for (const r of results) mismatches.push(...r.mismatches);
      graph = {
        captured: results.every((r) => r.captured),
        replays: results[0]!.replays,
        sampled: results[0]!.sampled,
        size,
        transfers: results.reduce((k, r) => k + r.transfers, 0) / 2, // each transfer has a half on two ranks
        hostUsPerReplay: Math.max(...results.map((r) => r.hostUsPerReplay)),
        seconds: Math.max(...results.map((r) => r.seconds)),
      };
      progress(
        `  graph    ${formatBytes(size).padStart(8)}  ${graph.transfers} persistent transfers captured, ${graph.replays} replays (${graph.sampled} with fresh data, checked): ${graph.hostUsPerReplay.toFixed(1)} µs of host time per replay${results.some((r) => r.mismatches.length) ? '  MISMATCH' : ''}`,
      );
    }
    for (const phase of (opts.graph ? [] : ['ring', 'alltoall']) as Phase[]) {
      for (let sizeIndex = 0; sizeIndex < opts.sizes.length; sizeIndex++) {
        const results = await everyRank<PhaseResult>('phase', { phase, sizeIndex });
        const bytes = results.reduce((s, r) => s + r.bytesReceived, 0);
        const seconds = Math.max(...results.map((r) => r.seconds));
        const messages = results.reduce((s, r) => s + r.messages, 0);
        for (const r of results) mismatches.push(...r.mismatches);
        const row = { phase, size: opts.sizes[sizeIndex]!, messages, bytes, seconds, gbPerSecond: seconds > 0 ? bytes / seconds / 1e9 : 0 };
        phases.push(row);
        // Per message: the phase's time over the messages one rank received (ranks run side by side).
        const perRank = messages / opts.ranks;
        progress(
          `  ${phase.padEnd(8)} ${formatBytes(row.size).padStart(8)}  ${String(messages).padStart(4)} msgs  ${rate(row.size, bytes / opts.ranks, seconds, perRank)}${results.some((r) => r.mismatches.length) ? '  MISMATCH' : ''}`,
        );
      }
    }
    const endpoints = (await everyRank<DemoReportEndpoint[]>('report')).flat().sort((a, b) => a.rank - b.rank || a.peer - b.peer);
    // Every rank has reported, so none can turn another's endpoints BAD by closing first.
    await until(Promise.all(workers.map((w) => w.exit())));
    for (const w of workers) {
      const { code, signal } = await w.exited;
      if (code !== 0) throw new WorkerFailedError(`${w.name} exited with ${signal ?? `code ${code}`} while closing`);
    }
    const largeMessages = { rget: 0, staging: 0 };
    for (const e of endpoints) {
      const received = e.received as Record<'rget' | 'rget-fd' | 'staging', { messages: number }>;
      // RGET by IPC handle or by descriptor (VMM, pool memory): both are RGET
      largeMessages.rget += received.rget.messages + (received['rget-fd']?.messages ?? 0);
      largeMessages.staging += received.staging.messages;
    }
    return {
      driver: { kind: first.driver, reason: first.reason },
      ranks: opts.ranks,
      sizes: opts.sizes,
      iters: opts.iters,
      ipc: opts.ipc,
      memory: { option: memory, buffers, largeMessages },
      mps: { active: mps.active, sharedGpuWithoutMps: sharing && !mps.active },
      devices: hello.map((h) => ({ rank: h.rank, runtime: h.runtime, ...h.device })),
      phases,
      endpoints,
      ...(graph ? { graph } : {}),
      verified: mismatches.length === 0,
      mismatches,
      durationMs: performance.now() - started,
    };
  } finally {
    clearTimeout(timer);
    await Promise.all(workers.map((w) => w.kill()));
    process.off('exit', killAll);
    uninterruptible();
    rmSync(dir, { recursive: true, force: true });
  }
}

function render(r: DemoReport): string {
  const lines: string[] = [''];
  // Before each timed exchange the ranks meet in a barrier: one empty message each way per peer
  // (demo-worker.ts). Those are the demo's, not the user's data: left out of the counts below.
  const barriers = r.iters * 2 * r.sizes.length;
  lines.push(`endpoints (not counting the demo's own ${barriers} empty barrier messages each way per endpoint):`);
  const rows = [['endpoint', 'negotiation', 'tries', 'to OK/BAD', 'sent by path', 'received by path', 'cache hits/misses']];
  for (const e of r.endpoints) {
    const n = e.negotiation as { path: string[]; tries: number; settleMs?: number; reason?: string };
    const byPath = (d: Record<string, { messages: number; bytes: number }>) =>
      Object.entries(d)
        .map(([p, c]): [string, { messages: number; bytes: number }] => [p, p === 'eager' ? { ...c, messages: c.messages - barriers } : c])
        .filter(([, c]) => c.messages > 0)
        .map(([p, c]) => `${p} ${c.messages}/${formatBytes(c.bytes)}`)
        .join(', ') || '-';
    const cache = e.cache as { hits: number; misses: number } | undefined;
    rows.push([
      `rank${e.rank}→rank${e.peer}`,
      n.path.join('→') + (n.reason ? ` (${n.reason})` : ''),
      String(n.tries),
      n.settleMs === undefined ? '-' : `${n.settleMs.toFixed(1)} ms`,
      byPath(e.sent as never),
      byPath(e.received as never),
      cache ? `${cache.hits}/${cache.misses}` : '-',
    ]);
  }
  lines.push(table(rows).replace(/^/gm, '  '));
  lines.push('');
  if (!r.graph) lines.push(memoryLine(r), '');
  const total = r.phases.reduce((s, p) => s + p.messages, 0);
  if (r.graph) {
    const g = r.graph;
    lines.push(
      `graph: ${g.transfers} persistent transfers of ${formatBytes(g.size)} captured, ${g.replays} replays, ${g.hostUsPerReplay.toFixed(1)} µs host time per replay`,
    );
    if (r.verified)
      lines.push(`verified: the last of the timed replays and ${g.sampled} replays with fresh data, byte-exact (${(r.durationMs / 1000).toFixed(1)} s)`);
    else lines.push(`NOT verified: ${r.mismatches.length} mismatches\n  ${r.mismatches.slice(0, 20).join('\n  ')}`);
    return lines.join('\n');
  }
  if (r.verified) lines.push(`verified: all ${total} messages byte-exact (${(r.durationMs / 1000).toFixed(1)} s)`);
  else lines.push(`NOT verified: ${r.mismatches.length} mismatches\n  ${r.mismatches.slice(0, 20).join('\n  ')}`);
  return lines.join('\n');
}

function describeBuffers(b: MemoryReport): string {
  let out = b.kind === 'none' ? 'none (all sizes 0)' : `the driver sees ${b.kind} memory`;
  if (b.reason !== undefined) out += ` (${b.reason})`;
  if (b.chunksTouched !== undefined) out += `; the largest message spans ${b.chunksTouched} chunks of ${formatBytes(b.chunkSize!)}`;
  return out;
}

/** Which data path moved the large (not eager) messages, and what the endpoints said about it. */
function memoryLine(r: DemoReport): string {
  const { rget, staging } = r.memory.largeMessages;
  const kinds = [...new Set(r.memory.buffers.map((b) => b.kind))].join(', ');
  let line = `memory ${r.memory.option} (driver: ${kinds}): large messages by RGET ${rget}, by staging ${staging}`;
  if (rget + staging === 0) return `${line} (no message was large enough to leave the eager path)`;
  if (staging > 0) {
    const reasons = [...new Set(r.endpoints.map((e) => (e.negotiation as { reason?: string }).reason).filter((x) => x !== undefined))];
    if (!r.ipc) line += ' — IPC is off';
    else if (reasons.length > 0) line += ` — negotiation: ${reasons.join('; ')}`;
    else line += ' — the endpoints report no reason';
  }
  return line;
}
