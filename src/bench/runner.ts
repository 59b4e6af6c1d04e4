/**
 * Runs the suites: forks two workers per layout ("across": devices 0 and 1;
 * "same": both on device 0), drives the measurements of protocol.ts, and
 * turns results into figures (each beside its baseline from this same run)
 * and plot series.
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { cpus, hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { MEMORY_OPTIONS, type MemoryOption } from '../cli/demo-memory.js';
import { formatBytes } from '../cli/format.js';
import { type Figure, measured, skipped } from './figures.js';
import { type BenchOptions, makePlan, type Plan, shmFreeBytes } from './plan.js';
import {
  BENCH_WORKER_ENV,
  type BenchCommand,
  type BenchWorkerConfig,
  type BenchWorkerInfo,
  type ExportedBuffer,
  type FramesResult,
  type IpcOpenResult,
  type NegotiationResult,
  type ProbeResult,
  type SamplesResult,
  type SessionOptions,
  type TimedResult,
} from './protocol.js';
import type { KindExport, KindOpenResult } from './memory-kinds.js';
import type { BenchReport, MachineInfo, SeriesPoint } from './report.js';
import { gbPerSecond, median, summarize } from './stats.js';
import {
  BANDWIDTH_TARGETS,
  CACHE_SIZE,
  FIG,
  HEADLINE_SIZE,
  MEMORY_FIG,
  MEMORY_OPEN_SIZE,
  MEMORY_TARGET_SIZE,
  SAME_GPU_TARGET_SIZE,
  type ScopedSpec,
  STAGING_TARGET_SIZE,
  type SuiteName,
} from './suites.js';
import { WorkerFailedError, WorkerGroup } from './worker-group.js';
import { cleanUpOnInterrupt } from '../cli/interrupt.js';

type Group = WorkerGroup<BenchCommand, BenchWorkerInfo>;
export type Progress = (line: string) => void;

const SUITES_ACROSS: SuiteName[] = ['latency', 'bandwidth', 'streaming', 'cache', 'ipc', 'negotiation'];

/** One run's state, passed to each suite. */
interface Run {
  opts: BenchOptions;
  plan: Plan;
  sim: boolean;
  figures: Figure[];
  series: SeriesPoint[];
  notes: string[];
  progress: Progress;
}

export async function runBench(opts: BenchOptions, progress: Progress = () => {}): Promise<BenchReport> {
  const started = performance.now();
  const date = new Date().toISOString();
  const dir = mkdtempSync(join(tmpdir(), 'smcuda-bench-')); // 0700: only we reach the sockets
  const token = randomBytes(16).toString('hex');
  const wants = (s: SuiteName) => opts.suites.includes(s);
  const figures: Figure[] = [];
  const series: SeriesPoint[] = [];
  const devices: MachineInfo['devices'] = [];
  let first: BenchWorkerInfo | undefined;
  let run: Run | undefined;
  const groups: Group[] = [];
  const timer = setTimeout(() => {
    for (const g of groups) g.abort(new WorkerFailedError(`bench did not finish within ${opts.timeoutMs / 1000} s`));
  }, opts.timeoutMs);
  const start = async (layout: string, devs: [number, number]) => {
    const configs: BenchWorkerConfig[] = devs.map((device, rank) => ({ rank: rank as 0 | 1, device, driver: opts.driver, dir: join(dir, layout), token }));
    mkdirSync(join(dir, layout), { mode: 0o700 });
    const g = await WorkerGroup.start<BenchCommand, BenchWorkerInfo>(fileURLToPath(new URL('./worker.js', import.meta.url)), configs, { envVar: BENCH_WORKER_ENV });
    groups.push(g);
    for (const i of g.infos) devices.push({ layout, rank: i.rank, ...i.device });
    return g;
  };
  const uninterruptible = cleanUpOnInterrupt({
    command: 'bench',
    dir,
    pids: () => groups.flatMap((g) => g.pids),
    kill: () => {
      for (const g of groups) g.abort(new WorkerFailedError('bench interrupted'));
    },
    exited: () => Promise.all(groups.map((g) => g.exited)),
  });
  try {
    const needAcross = SUITES_ACROSS.some(wants);
    progress(`starting workers (driver ${opts.driver})`);
    const across = await start('across', [0, 1]);
    first = across.infos[0]!;
    const sim = first.driver === 'sim';
    const deviceBytes = Math.min(...across.infos.map((i) => i.device.totalMemory));
    const plan = makePlan(opts, first.driver, { deviceBytes, ...(sim ? { shmBytes: shmFreeBytes() } : {}) });
    run = { opts, plan, sim, figures, series, notes: [...plan.notes], progress };
    progress(`${sim ? 'simulated' : 'native'} driver (${first.reason}); sizes ${plan.sizes.map(formatBytes).join(', ')}`);
    const twoDevices = across.infos[0]!.device.uuid !== across.infos[1]!.device.uuid;
    if (needAcross) {
      if (!twoDevices) run.notes.push('one device visible: the GPU0→GPU1 figures ran with both workers on that device');
      await runAcross(run, across, twoDevices);
    }
    await across.close();
    if (wants('same-gpu')) {
      if (sim) figures.push(skipped(FIG.sameGpu, gpuOnly()));
      else {
        const same = await start('same', [0, 0]);
        await runSameGpu(run, same);
        await same.close();
      }
    }
    if (wants('memory')) {
      const mem = await start('memory', [0, 0]);
      await runMemory(run, mem);
      await mem.close();
    }
  } finally {
    clearTimeout(timer);
    for (const g of groups) g.abort(new WorkerFailedError('bench ended'));
    uninterruptible();
    rmSync(dir, { recursive: true, force: true });
  }
  return {
    tool: 'smcuda bench',
    version: packageVersion(),
    date,
    durationMs: performance.now() - started,
    machine: {
      driver: first.driver,
      driverReason: first.reason,
      node: process.version,
      platform: process.platform,
      arch: process.arch,
      cpus: cpus().length,
      cpuModel: cpus()[0]?.model ?? 'unknown',
      hostname: hostname(),
      devices,
    },
    options: { driver: opts.driver, sizes: run.plan.sizes, suites: [...opts.suites], smoke: opts.smoke, window: opts.window },
    figures,
    series,
    notes: run.notes,
  };
}

function gpuOnly(): string {
  return 'GPU target: not meaningful on the simulated driver (its copies are host memcpy); run with --driver native on a GPU machine';
}

/** A figure of `spec`: skipped on the simulator when its target is a GPU one; the 'sim' scope's target dropped on a GPU. */
function figure(run: Run, spec: ScopedSpec, value: number, baseline: number | null, extra: Parameters<typeof measured>[3] = {}): Figure {
  if (spec.scope === 'sim' && !run.sim) {
    const { target: _t, ...rest } = spec;
    return measured(rest, value, baseline, extra);
  }
  return measured(spec, value, baseline, extra);
}

// ------------------------------------------------------------ across GPUs

async function both<A, B>(g: Group, c0: BenchCommand, c1: BenchCommand): Promise<[A, B]> {
  return Promise.all([g.call<A>(0, c0), g.call<B>(1, c1)]);
}

async function openSession(g: Group, session: string, options: SessionOptions): Promise<void> {
  await g.call(0, { op: 'open', session, options }); // rank 0 listens first
  await g.call(1, { op: 'open', session, options });
}

async function negotiateSession(g: Group, session: string): Promise<[NegotiationResult, NegotiationResult]> {
  return both(g, { op: 'negotiate', session }, { op: 'negotiate', session });
}

async function pingpong(g: Group, session: string, size: number, repeat: { iters: number; warmup: number }): Promise<SamplesResult> {
  const cmd: BenchCommand = { op: 'pingpong', session, size, ...repeat };
  const [, r1] = await both<SamplesResult, SamplesResult>(g, cmd, cmd);
  return r1; // rank 1 initiates and times
}

async function oneway(g: Group, session: string, size: number, window: number, repeat: { iters: number; warmup: number }, memory?: MemoryOption): Promise<TimedResult> {
  const cmd: BenchCommand = { op: 'oneway', session, size, window, ...repeat, ...(memory ? { memory } : {}) };
  const [r0] = await both<TimedResult, TimedResult>(g, cmd, cmd);
  return r0; // rank 0 sends and times
}

async function rawCopy(g: Group, size: number, repeat: { iters: number; warmup: number }): Promise<TimedResult> {
  const [buffer] = await g.call<ExportedBuffer[]>(0, { op: 'export', size, count: 1 });
  try {
    return await g.call<TimedResult>(1, { op: 'raw-copy', buffer: buffer!, size, ...repeat });
  } finally {
    await g.call(0, { op: 'unexport' });
  }
}

async function runAcross(run: Run, g: Group, twoDevices: boolean): Promise<void> {
  const { plan, opts, progress } = run;
  const wants = (s: SuiteName) => opts.suites.includes(s);
  const label = twoDevices ? 'GPU0→GPU1' : 'one GPU';

  await openSession(g, 'default', { ipc: true, cache: true });
  const [neg] = await negotiateSession(g, 'default');
  if (neg.state !== 'OK') run.notes.push(`the default endpoint negotiated ${neg.path.join('→')}: RGET figures measure ${neg.state === 'BAD' ? 'staging' : 'whatever path was taken'}`);

  if (wants('latency')) {
    progress('latency: raw Unix-socket ping-pong');
    const { path } = await g.call<{ path: string }>(0, { op: 'socket-serve' });
    const socket = summarize((await g.call<SamplesResult>(1, { op: 'socket-ping', path, frameBytes: 64, ...plan.small })).samples);
    const copy = summarize((await g.call<SamplesResult>(1, { op: 'copy-completion', ...plan.small })).samples);
    socketLine(run, socket);
    let headline: SamplesResult | undefined;
    for (const size of plan.sizes) {
      progress(`latency: ping-pong ${formatBytes(size)}`);
      const r = await pingpong(g, 'default', size, plan.latency(size));
      const s = summarize(r.samples);
      run.series.push({ plot: 'latency', series: `smcuda ping-pong (${label})`, size, value: s.median, unit: 'µs', p10: s.p10, p90: s.p90, iterations: s.n, paths: r.paths! });
      if (size === HEADLINE_SIZE) headline = r;
    }
    headline ??= await pingpong(g, 'default', HEADLINE_SIZE, plan.latency(HEADLINE_SIZE));
    const h = summarize(headline.samples);
    const extra = { stats: h, paths: headline.paths!, details: { socketHalfRoundTrip: socket, copyWithCompletion: copy } };
    run.figures.push(figure(run, FIG.overhead8, h.median, socket.median, extra));
    if (run.sim) run.figures.push(skipped(FIG.latency8, gpuOnly()));
    else run.figures.push(figure(run, FIG.latency8, h.median, socket.median + copy.median, extra));
  }

  if (wants('bandwidth')) {
    const byTarget = new Map(BANDWIDTH_TARGETS.map((t) => [t.size, t.spec]));
    const done = new Set<number>();
    for (const size of plan.sizes) {
      progress(`bandwidth: ${formatBytes(size)} (raw, then smcuda)`);
      const repeat = plan.bandwidth(size);
      const raw = await rawCopy(g, size, repeat);
      // As osu_bw does: a window of outstanding sends, against back-to-back raw copies.
      const r = await oneway(g, 'default', size, opts.window, repeat);
      const rawGBs = gbPerSecond(raw.bytes, raw.seconds);
      const gbs = gbPerSecond(r.bytes, r.seconds);
      run.series.push({ plot: 'bandwidth', series: `raw cuMemcpyAsync (${label})`, size, value: rawGBs, unit: 'GB/s', iterations: repeat.iters });
      run.series.push({ plot: 'bandwidth', series: `smcuda (${label})`, size, value: gbs, unit: 'GB/s', iterations: repeat.iters, paths: r.paths! });
      const spec = byTarget.get(size);
      if (spec) {
        done.add(size);
        if (run.sim) run.figures.push(skipped(spec, gpuOnly()));
        else if (!twoDevices) run.figures.push(skipped(spec, 'needs two GPUs; one is visible'));
        else run.figures.push(figure(run, spec, gbs, rawGBs, { paths: r.paths!, details: { size, iterations: repeat.iters } }));
      }
    }
    for (const t of BANDWIDTH_TARGETS) {
      if (!done.has(t.size)) run.figures.push(skipped(t.spec, run.sim ? gpuOnly() : `${formatBytes(t.size)} was not measured (--sizes, or device memory)`));
    }
  }

  if (wants('streaming')) {
    const spec = FIG.streaming(opts.window);
    if (run.sim) run.figures.push(skipped(spec, gpuOnly()));
    else {
      const size = plan.streamSize;
      progress(`streaming: ${formatBytes(size)}, window ${opts.window}`);
      const repeat = plan.streaming;
      const raw = await rawCopy(g, size, repeat);
      const r = await oneway(g, 'default', size, opts.window, repeat);
      run.figures.push(figure(run, spec, gbPerSecond(r.bytes, r.seconds), gbPerSecond(raw.bytes, raw.seconds), { paths: r.paths!, details: { size, window: opts.window, iterations: repeat.iters, warmup: repeat.warmup } }));
    }
  }

  if (wants('cache')) {
    progress('cache: cuIpcOpenMemHandle, then hits');
    const buffers = await g.call<ExportedBuffer[]>(0, { op: 'export', size: 2 << 20, count: plan.ipcOpens + 1 });
    try {
      const opens = await g.call<IpcOpenResult>(1, { op: 'ipc-open', buffers: buffers.slice(1) });
      const hit = await g.call<SamplesResult>(1, { op: 'cache-hit', buffer: buffers[0]!, ...plan.cacheHit });
      // The first open in a process sets up peer access (milliseconds on a GPU): not the per-open cost.
      const open = summarize(opens.openUs.length > 1 ? opens.openUs.slice(1) : opens.openUs);
      const hitUs = summarize(hit.samples.map((ns) => ns / 1000));
      run.figures.push(
        figure(run, FIG.cacheHit, hitUs.median, open.median, { stats: hitUs, details: { open, close: summarize(opens.closeUs), firstOpenUs: opens.openUs[0] } }),
      );
    } finally {
      await g.call(0, { op: 'unexport' });
    }
    if (run.sim) run.figures.push(skipped(FIG.cacheOnOff, gpuOnly()));
    else {
      progress('cache: 64 KiB re-sent, cache on and off');
      await openSession(g, 'nocache', { ipc: true, cache: false });
      await negotiateSession(g, 'nocache');
      const repeat = plan.latency(CACHE_SIZE);
      const on = summarize((await pingpong(g, 'default', CACHE_SIZE, repeat)).samples);
      const offRun = await pingpong(g, 'nocache', CACHE_SIZE, repeat);
      const off = summarize(offRun.samples);
      await both(g, { op: 'close', session: 'nocache' }, { op: 'close', session: 'nocache' });
      run.figures.push(figure(run, FIG.cacheOnOff, on.median, off.median, { stats: on, paths: offRun.paths!, details: { cacheOff: off } }));
    }
  }

  if (wants('ipc')) {
    await openSession(g, 'noipc', { ipc: false, cache: true });
    await negotiateSession(g, 'noipc');
    let target: { gbs: number; base: number; paths: Record<string, number>; iterations: number } | undefined;
    for (const size of plan.sizes.filter((s) => s > 8 << 10)) {
      progress(`ipc off: staging ${formatBytes(size)}`);
      const repeat = plan.bandwidth(size);
      const base = await g.call<TimedResult>(0, { op: 'staging-baseline', size, ...repeat });
      const r = await oneway(g, 'noipc', size, 1, repeat);
      const gbs = gbPerSecond(r.bytes, r.seconds);
      const baseGBs = gbPerSecond(base.bytes, base.seconds);
      run.series.push({ plot: 'bandwidth', series: 'pinned single-buffer staging', size, value: baseGBs, unit: 'GB/s', iterations: repeat.iters });
      run.series.push({ plot: 'bandwidth', series: `smcuda, IPC off (${label})`, size, value: gbs, unit: 'GB/s', iterations: repeat.iters, paths: r.paths! });
      if (size === STAGING_TARGET_SIZE) target = { gbs, base: baseGBs, paths: r.paths!, iterations: repeat.iters };
    }
    await both(g, { op: 'close', session: 'noipc' }, { op: 'close', session: 'noipc' });
    if (run.sim) run.figures.push(skipped(FIG.staging, gpuOnly()));
    else if (!target) run.figures.push(skipped(FIG.staging, `${formatBytes(STAGING_TARGET_SIZE)} was not measured (--sizes, or device memory)`));
    else run.figures.push(figure(run, FIG.staging, target.gbs, target.base, { paths: target.paths, details: { size: STAGING_TARGET_SIZE, iterations: target.iterations } }));
  }

  if (wants('negotiation')) {
    const reps: Array<{ initiator: NegotiationResult; responder: NegotiationResult; frames: FramesResult }> = [];
    for (let i = 0; i < plan.negotiationReps; i++) {
      progress(`negotiation: fresh endpoint ${i + 1}/${plan.negotiationReps}`);
      const session = `neg${i}`;
      await openSession(g, session, { ipc: true, cache: true, countFrames: true });
      const [responder, initiator] = await negotiateSession(g, session);
      const frames = await g.call<FramesResult>(1, { op: 'frames', session });
      await both(g, { op: 'close', session }, { op: 'close', session });
      reps.push({ initiator, responder, frames });
    }
    const rtts = reps.map((r) => r.frames.negotiation / 2);
    const settle = reps.map((r) => r.initiator.settleMs).filter((x): x is number => x !== undefined);
    const details = {
      repetitions: reps.length,
      initiatorPath: reps[0]?.initiator.path,
      responderPath: reps[0]?.responder.path,
      tries: reps.map((r) => r.initiator.tries),
      frames: reps[0]?.frames.frames,
      roundTripsEach: rtts,
    };
    // The worst repetition: the target is a bound, not a typical value.
    run.figures.push(figure(run, FIG.negotiationRtt, Math.max(...rtts), null, { details }));
    if (settle.length > 0) run.figures.push(figure(run, FIG.negotiationMs, median(settle), null, { stats: summarize(settle) }));
  }
  await both(g, { op: 'close', session: 'default' }, { op: 'close', session: 'default' });
}

/** The socket ping-pong as a flat reference line on the latency plot. */
function socketLine(run: Run, socket: ReturnType<typeof summarize>): void {
  for (const size of run.plan.sizes) {
    run.series.push({ plot: 'latency', series: 'raw Unix-socket ping-pong (64 B frames)', size, value: socket.median, unit: 'µs', p10: socket.p10, p90: socket.p90, iterations: socket.n });
  }
}

// ------------------------------------------------------------- same GPU

async function runSameGpu(run: Run, g: Group): Promise<void> {
  const { plan, progress } = run;
  await openSession(g, 'default', { ipc: true, cache: true });
  await negotiateSession(g, 'default');
  let target: { gbs: number; raw: number; paths: Record<string, number>; iterations: number } | undefined;
  for (const size of plan.sizes.filter((s) => s >= 64 << 10)) {
    progress(`same GPU: ${formatBytes(size)} (raw, then smcuda)`);
    const repeat = plan.bandwidth(size);
    const raw = await rawCopy(g, size, repeat);
    const r = await oneway(g, 'default', size, run.opts.window, repeat);
    const gbs = gbPerSecond(r.bytes, r.seconds);
    const rawGBs = gbPerSecond(raw.bytes, raw.seconds);
    run.series.push({ plot: 'bandwidth', series: 'raw cuMemcpyAsync (same GPU)', size, value: rawGBs, unit: 'GB/s', iterations: repeat.iters });
    run.series.push({ plot: 'bandwidth', series: 'smcuda (same GPU)', size, value: gbs, unit: 'GB/s', iterations: repeat.iters, paths: r.paths! });
    if (size === SAME_GPU_TARGET_SIZE) target = { gbs, raw: rawGBs, paths: r.paths!, iterations: repeat.iters };
  }
  await both(g, { op: 'close', session: 'default' }, { op: 'close', session: 'default' });
  if (!target) run.figures.push(skipped(FIG.sameGpu, `${formatBytes(SAME_GPU_TARGET_SIZE)} was not measured (--sizes, or device memory)`));
  else run.figures.push(figure(run, FIG.sameGpu, target.gbs, target.raw, { paths: target.paths, details: { size: SAME_GPU_TARGET_SIZE, iterations: target.iterations } }));
}

// ------------------------------------------------------------- memory kinds

/**
 * Per kind, both workers on device 0: the first import of an allocation and
 * a cache hit on it (raw driver calls and HandlePool, not the transport),
 * then a transfer against raw copies over an open mapping of that kind. The
 * transfer is measured only where one probe message of that kind went
 * through the endpoint; otherwise the figure is skipped with the endpoint's error.
 */
async function runMemory(run: Run, g: Group): Promise<void> {
  const { plan, progress } = run;
  const { path, token } = await g.call<{ path: string; token: Uint8Array }>(0, { op: 'fd-listen' });
  await g.call(1, { op: 'fd-connect', path, token });
  await g.call(0, { op: 'fd-accept' });
  await openSession(g, 'memory', { ipc: true, cache: true });
  await negotiateSession(g, 'memory');
  const size = plan.memorySize;
  const costs = new Map<MemoryOption, { open: ReturnType<typeof summarize>; hit: ReturnType<typeof summarize>; result: KindOpenResult }>();
  for (const kind of MEMORY_OPTIONS) {
    progress(`memory ${kind}: first imports, then cache hits`);
    const exports = await g.call<KindExport[]>(0, { op: 'kind-export', kind, size: MEMORY_OPEN_SIZE, count: plan.ipcOpens + 1 });
    let result: KindOpenResult;
    try {
      result = await g.call<KindOpenResult>(1, { op: 'kind-open', exports, ...plan.cacheHit });
    } finally {
      await g.call(0, { op: 'kind-unexport' });
    }
    // The first import in a process sets up peer access (milliseconds on a GPU): not the per-import cost.
    const open = summarize(result.openUs.length > 1 ? result.openUs.slice(1) : result.openUs);
    costs.set(kind, { open, hit: summarize(result.hitNs.map((ns) => ns / 1000)), result });

    progress(`memory ${kind}: ${formatBytes(size)} (raw, then smcuda)`);
    const repeat = plan.bandwidth(size);
    const [exp] = await g.call<KindExport[]>(0, { op: 'kind-export', kind, size, count: 1 });
    let raw: TimedResult;
    try {
      raw = await g.call<TimedResult>(1, { op: 'kind-raw-copy', export: exp!, ...repeat });
    } finally {
      await g.call(0, { op: 'kind-unexport' });
    }
    const rawGBs = gbPerSecond(raw.bytes, raw.seconds);
    run.series.push({ plot: 'bandwidth', series: `raw cuMemcpyAsync, ${kind} memory (one GPU)`, size, value: rawGBs, unit: 'GB/s', iterations: repeat.iters });
    await g.call(1, { op: 'probe-recv', session: 'memory', size, memory: kind });
    const sent = await g.call<ProbeResult>(0, { op: 'probe-send', session: 'memory', size, memory: kind });
    const got = await g.call<ProbeResult>(1, { op: 'probe-finish', session: 'memory', abort: !sent.ok });
    const spec = MEMORY_FIG.transfer(kind);
    if (!sent.ok || !got.ok) {
      const why = `smcuda could not send ${kind} memory here: ${sent.error ?? got.error}`;
      run.figures.push(skipped(spec, why));
      continue;
    }
    const r = await oneway(g, 'memory', size, run.opts.window, repeat, kind);
    const gbs = gbPerSecond(r.bytes, r.seconds);
    run.series.push({ plot: 'bandwidth', series: `smcuda, ${kind} memory (one GPU)`, size, value: gbs, unit: 'GB/s', iterations: repeat.iters, paths: r.paths! });
    if (run.sim) run.figures.push(skipped(spec, gpuOnly()));
    else if (size !== MEMORY_TARGET_SIZE) run.figures.push(skipped(spec, `${formatBytes(MEMORY_TARGET_SIZE)} was not measured (device memory)`));
    else run.figures.push(figure(run, spec, gbs, rawGBs, { paths: r.paths!, details: { size, iterations: repeat.iters } }));
  }
  await both(g, { op: 'close', session: 'memory' }, { op: 'close', session: 'memory' });
  const legacyOpen = costs.get('legacy')!.open.median;
  for (const [kind, c] of costs) {
    const details: Record<string, unknown> = { close: summarize(c.result.closeUs), firstImportUs: c.result.openUs[0], allocationBytes: MEMORY_OPEN_SIZE };
    if (c.result.poolImportUs !== undefined) details.poolImportUs = c.result.poolImportUs;
    run.figures.push(figure(run, MEMORY_FIG.import(kind), c.open.median, legacyOpen, { stats: c.open, details }));
    run.figures.push(figure(run, MEMORY_FIG.hit(kind), c.hit.median, c.open.median, { stats: c.hit }));
  }
}

function packageVersion(): string {
  try {
    const url = new URL('../../../package.json', import.meta.url); // dist/src/bench → package root
    return (JSON.parse(readFileSync(url, 'utf8')) as { version: string }).version;
  } catch {
    return 'unknown';
  }
}
