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
import { type Figure, measured, skipped, withFloor } from './figures.js';
import { breakdown, type FirstSendBreakdown } from './first-send.js';
import { type BenchOptions, makePlan, type Plan, shmFreeBytes } from './plan.js';
import {
  BENCH_WORKER_ENV,
  type BenchCommand,
  type BenchWorkerConfig,
  type BenchWorkerInfo,
  type BidirResult,
  type ExportedBuffer,
  type FirstSendResult,
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
  A2A_RANKS,
  ACROSS_SUITES,
  BANDWIDTH_TARGETS,
  CACHE_SIZE,
  FLOOR_LARGE_SIZE,
  type MemoryLayout,
  SAME_GPU_MID_SIZES,
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

type Group = WorkerGroup<BenchCommand, BenchWorkerInfo>;
export type Progress = (line: string) => void;

/** One run's state, passed to each suite. */
interface Run {
  opts: BenchOptions;
  plan: Plan;
  sim: boolean;
  figures: Figure[];
  series: SeriesPoint[];
  notes: string[];
  progress: Progress;
  /** The native floor's median half round trip by size, measured in this run (µs). */
  floor: Map<number, number>;
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
  const start = async (layout: string, devs: number[]) => {
    const configs: BenchWorkerConfig[] = devs.map((device, rank) => ({ rank, device, driver: opts.driver, dir: join(dir, layout), token }));
    mkdirSync(join(dir, layout), { mode: 0o700 });
    const g = await WorkerGroup.start<BenchCommand, BenchWorkerInfo>(fileURLToPath(new URL('./worker.js', import.meta.url)), configs, { envVar: BENCH_WORKER_ENV });
    groups.push(g);
    for (const i of g.infos) devices.push({ layout, rank: i.rank, ...i.device });
    return g;
  };
  try {
    const needAcross = ACROSS_SUITES.some(wants);
    progress(`starting workers (driver ${opts.driver})`);
    const across = await start('across', [0, 1]);
    first = across.infos[0]!;
    const sim = first.driver === 'sim';
    const deviceBytes = Math.min(...across.infos.map((i) => i.device.totalMemory));
    const plan = makePlan(opts, first.driver, { deviceBytes, ...(sim ? { shmBytes: shmFreeBytes() } : {}) });
    run = { opts, plan, sim, figures, series, notes: [...plan.notes], progress, floor: new Map() };
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
      await runMemory(run, mem, 'memory');
      await mem.close();
    }
    if (wants('memory-across')) {
      const mem = await start('memory-across', [0, 1]);
      await runMemory(run, mem, 'memory-across');
      await mem.close();
    }
    if (wants('first-send')) {
      for (const prepared of [false, true]) {
        const reps: FirstSendBreakdown[] = [];
        for (let i = 0; i < plan.firstSend.reps; i++) {
          progress(`first send${prepared ? ', negotiated at connect' : ''}: fresh processes ${i + 1}/${plan.firstSend.reps}`);
          const g = await start(`first${prepared ? 'p' : ''}${i}`, [0, 1]);
          reps.push(await firstSendOnce(run, g, prepared));
          await g.close();
        }
        firstSendFigure(run, reps, prepared);
      }
    }
    if (wants('all-to-all')) {
      progress(`all-to-all: starting ${A2A_RANKS} workers on 2 devices`);
      const g = await start('a2a', Array.from({ length: A2A_RANKS }, (_, r) => r % 2));
      await runAllToAll(run, g);
      await g.close();
    }
  } finally {
    clearTimeout(timer);
    for (const g of groups) g.abort(new WorkerFailedError('bench ended'));
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
  // 'gpu-target': measured anywhere, held to its target only on a GPU.
  if ((spec.scope === 'sim' && !run.sim) || (spec.scope === 'gpu-target' && run.sim)) {
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

  if (wants('latency') || wants('cache')) {
    for (const size of [HEADLINE_SIZE, CACHE_SIZE, FLOOR_LARGE_SIZE]) {
      progress(`native floor: ${formatBytes(size)} (C++ ping-pong on shared host flags)`);
      const f = summarize(await floor(g, size, plan.floor(size), run.sim));
      run.floor.set(size, f.median);
      run.series.push({ plot: 'latency', series: `native floor, no JS (${label})`, size, value: f.median, unit: 'µs', p10: f.p10, p90: f.p90, iterations: f.n });
      if (size !== CACHE_SIZE) run.figures.push(figure(run, FIG.floor(size), f.median, null, { stats: f, details: { what: run.sim ? 'simulated driver: two processes spinning on shared host flags plus a host memcpy (no device, no CUDA)' : 'cuMemcpyAsync over an open IPC mapping + cuEventRecord, spinning on cuEventQuery' } }));
    }
  }

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
    const floor8 = run.floor.get(HEADLINE_SIZE);
    const extra = { stats: h, paths: headline.paths!, details: { socketHalfRoundTrip: socket, copyWithCompletion: copy, socketPlusCopy: socket.median + copy.median } };
    run.figures.push(withFloor(figure(run, FIG.overhead8, h.median, socket.median, extra), floor8));
    if (run.sim) run.figures.push(skipped(FIG.latency8, gpuOnly()));
    else run.figures.push(withFloor(figure(run, FIG.latency8, h.median, floor8 ?? null, extra), floor8));
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
      run.figures.push(withFloor(figure(run, FIG.cacheOnOff, on.median, off.median, { stats: on, paths: offRun.paths!, details: { cacheOff: off } }), run.floor.get(CACHE_SIZE)));
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

  if (wants('bidirectional')) {
    const { size, repeat } = plan.bidir;
    progress(`bidirectional: ${formatBytes(size)} both ways (raw, then smcuda)`);
    const [b0, b1] = await Promise.all([0, 1].map((r) => g.call<ExportedBuffer[]>(r, { op: 'export', size, count: 1 })));
    let raw: [TimedResult, TimedResult];
    try {
      raw = await both<TimedResult, TimedResult>(g, { op: 'raw-copy', buffer: b1![0]!, size, ...repeat }, { op: 'raw-copy', buffer: b0![0]!, size, ...repeat });
    } finally {
      await Promise.all([0, 1].map((r) => g.call(r, { op: 'unexport' })));
    }
    const cmd: BenchCommand = { op: 'bidir', session: 'default', size, window: opts.window, ...repeat };
    const [r0, r1] = await both<BidirResult, BidirResult>(g, cmd, cmd);
    const rawGBs = aggregate(raw);
    const gbs = aggregate([r0.sent, r1.sent]);
    const paths = { eager: r0.sent.paths!.eager + r1.sent.paths!.eager, rget: r0.sent.paths!.rget + r1.sent.paths!.rget, staging: r0.sent.paths!.staging + r1.sent.paths!.staging };
    const details = { size, window: opts.window, iterationsEachWay: repeat.iters, eachWay: { '0→1': gbPerSecond(r0.sent.bytes, r0.sent.seconds), '1→0': gbPerSecond(r1.sent.bytes, r1.sent.seconds) }, rawEachWay: raw.map((x) => gbPerSecond(x.bytes, x.seconds)) };
    run.figures.push(figure(run, FIG.bidirectional, gbs, rawGBs, { paths, details }));
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

/** Bytes of every part over the longest part's time, in GB/s: parts that ran at once. */
function aggregate(parts: readonly TimedResult[]): number {
  return gbPerSecond(
    parts.reduce((a, p) => a + p.bytes, 0),
    Math.max(...parts.map((p) => p.seconds)),
  );
}

/** The native floor between the pair's two ranks (native-floor.ts): rank 1's half round trips, µs. */
async function floor(g: Group, size: number, repeat: { iters: number; warmup: number }, sim: boolean): Promise<number[]> {
  const segment = `/smcuda-floor-${process.pid}-${randomBytes(4).toString('hex')}`;
  try {
    const [p0, p1] = await both<{ handle?: Uint8Array }, { handle?: Uint8Array }>(g, { op: 'floor-prepare', segment, size }, { op: 'floor-prepare', segment, size });
    const base = { op: 'floor-run' as const, segment, size, timeoutMs: 20_000, ...repeat };
    const [, r1] = await both<SamplesResult, SamplesResult>(
      g,
      { ...base, ...(sim ? {} : { peerHandle: p1.handle! }) },
      { ...base, ...(sim ? {} : { peerHandle: p0.handle! }) },
    );
    return r1.samples;
  } finally {
    await both(g, { op: 'floor-finish' }, { op: 'floor-finish' });
  }
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
  const mid: Array<{ size: number; gbs: number; raw: number; paths: Record<string, number> }> = [];
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
    if (SAME_GPU_MID_SIZES.includes(size)) mid.push({ size, gbs, raw: rawGBs, paths: r.paths! });
  }
  await both(g, { op: 'close', session: 'default' }, { op: 'close', session: 'default' });
  if (mid.length === 0) run.figures.push(skipped(FIG.sameGpuMid, '1, 4 and 16 MiB were not measured (--sizes)'));
  else {
    const worst = mid.reduce((a, m) => (m.gbs / m.raw < a.gbs / a.raw ? m : a));
    const byRatio = Object.fromEntries(mid.map((m) => [formatBytes(m.size), m.gbs / m.raw]));
    run.figures.push(figure(run, FIG.sameGpuMid, worst.gbs, worst.raw, { paths: worst.paths, details: { worstSize: worst.size, ratioBySize: byRatio } }));
  }
  if (!target) run.figures.push(skipped(FIG.sameGpu, `${formatBytes(SAME_GPU_TARGET_SIZE)} was not measured (--sizes, or device memory)`));
  else run.figures.push(figure(run, FIG.sameGpu, target.gbs, target.raw, { paths: target.paths, details: { size: SAME_GPU_TARGET_SIZE, iterations: target.iterations } }));
}

// ------------------------------------------------------------- memory kinds

/**
 * Per kind, the pair of workers on one GPU ('memory') or on GPU0 and GPU1
 * ('memory-across'): the first import of an allocation and a cache hit on
 * it (raw driver calls and HandlePool, not the transport), then transfers
 * against raw copies over an open mapping of that kind. A transfer is
 * measured only where one probe message of that kind went through the
 * endpoint; otherwise the figure is skipped with the endpoint's error.
 */
async function runMemory(run: Run, g: Group, layout: MemoryLayout): Promise<void> {
  const { plan, progress } = run;
  const across = layout === 'memory-across';
  const label = across ? 'GPU0→GPU1' : 'one GPU';
  const { path, token } = await g.call<{ path: string; token: Uint8Array }>(0, { op: 'fd-listen' });
  await g.call(1, { op: 'fd-connect', path, token });
  await g.call(0, { op: 'fd-accept' });
  let session = 'memory';
  let fresh = 0;
  await openSession(g, session, { ipc: true, cache: true });
  await negotiateSession(g, session);
  const sizes = across ? plan.memoryAcrossSizes : [plan.memorySize];
  const costs = new Map<MemoryOption, { open: ReturnType<typeof summarize>; hit: ReturnType<typeof summarize>; result: KindOpenResult }>();
  for (const kind of MEMORY_OPTIONS) {
    progress(`${layout} ${kind}: first imports, then cache hits`);
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

    for (const size of sizes) {
      progress(`${layout} ${kind}: ${formatBytes(size)} (raw, then smcuda)`);
      const repeat = plan.bandwidth(size);
      const [exp] = await g.call<KindExport[]>(0, { op: 'kind-export', kind, size, count: 1 });
      let raw: TimedResult;
      try {
        raw = await g.call<TimedResult>(1, { op: 'kind-raw-copy', export: exp!, ...repeat });
      } finally {
        await g.call(0, { op: 'kind-unexport' });
      }
      const rawGBs = gbPerSecond(raw.bytes, raw.seconds);
      run.series.push({ plot: 'bandwidth', series: `raw cuMemcpyAsync, ${kind} memory (${label})`, size, value: rawGBs, unit: 'GB/s', iterations: repeat.iters });
      await g.call(1, { op: 'probe-recv', session, size, memory: kind });
      const sent = await g.call<ProbeResult>(0, { op: 'probe-send', session, size, memory: kind });
      const got = await g.call<ProbeResult>(1, { op: 'probe-finish', session, abort: !sent.ok });
      const spec = across ? MEMORY_FIG.transfer(kind, layout, size) : MEMORY_FIG.transfer(kind);
      if (!sent.ok || !got.ok) {
        run.figures.push(skipped(spec, `smcuda could not send ${kind} memory here: ${sent.error ?? got.error}`));
        continue;
      }
      // A transfer that fails (the endpoint closes) is reported with both ranks' errors; the next gets a fresh session.
      const cmd: BenchCommand = { op: 'oneway', session, size, window: run.opts.window, ...repeat, memory: kind };
      const [s0, s1] = await Promise.allSettled([g.call<TimedResult>(0, cmd), g.call<TimedResult>(1, cmd)]);
      if (s0.status === 'rejected' || s1.status === 'rejected') {
        const why = [s0, s1].map((x, rank) => (x.status === 'rejected' ? `rank ${rank}: ${(x.reason as Error).message}` : '')).filter(Boolean).join('; ');
        run.figures.push(skipped(spec, `the ${kind} transfer failed: ${why}`));
        await both(g, { op: 'close', session }, { op: 'close', session }).catch(() => {});
        session = `memory-${++fresh}`;
        await openSession(g, session, { ipc: true, cache: true });
        await negotiateSession(g, session);
        continue;
      }
      const r = s0.value;
      const gbs = gbPerSecond(r.bytes, r.seconds);
      run.series.push({ plot: 'bandwidth', series: `smcuda, ${kind} memory (${label})`, size, value: gbs, unit: 'GB/s', iterations: repeat.iters, paths: r.paths! });
      if (run.sim) run.figures.push(skipped(spec, gpuOnly()));
      else if (!across && size !== MEMORY_TARGET_SIZE) run.figures.push(skipped(spec, `${formatBytes(MEMORY_TARGET_SIZE)} was not measured (device memory)`));
      else run.figures.push(figure(run, spec, gbs, rawGBs, { paths: r.paths!, details: { size, iterations: repeat.iters } }));
    }
  }
  await both(g, { op: 'close', session }, { op: 'close', session });
  const legacyOpen = costs.get('legacy')!.open.median;
  for (const [kind, c] of costs) {
    const details: Record<string, unknown> = { close: summarize(c.result.closeUs), firstImportUs: c.result.openUs[0], allocationBytes: MEMORY_OPEN_SIZE };
    if (c.result.poolImportUs !== undefined) details.poolImportUs = c.result.poolImportUs;
    run.figures.push(figure(run, MEMORY_FIG.import(kind, layout), c.open.median, legacyOpen, { stats: c.open, details }));
    run.figures.push(figure(run, MEMORY_FIG.hit(kind, layout), c.hit.median, c.open.median, { stats: c.hit }));
  }
}

// ------------------------------------------------------------- first send

/** One fresh pair of processes: rank 1's first device message to rank 0, and where its time went. */
async function firstSendOnce(run: Run, g: Group, negotiateFirst: boolean): Promise<FirstSendBreakdown> {
  await openSession(g, 'first', { ipc: true, cache: true, timeCalls: true });
  const cmd: BenchCommand = { op: 'first-send', session: 'first', size: run.plan.firstSend.size, negotiateFirst };
  const [responder, initiator] = await both<FirstSendResult, FirstSendResult>(g, cmd, cmd);
  await both(g, { op: 'close', session: 'first' }, { op: 'close', session: 'first' });
  return breakdown(initiator, responder);
}

function firstSendFigure(run: Run, reps: FirstSendBreakdown[], prepared: boolean): void {
  const total = summarize(reps.map((r) => r.totalMs));
  const med = (f: (r: FirstSendBreakdown) => number) => median(reps.map(f));
  const details = {
    size: run.plan.firstSend.size,
    repetitions: reps.length,
    medianMs: {
      firstPeerOpenInitiator: med((r) => r.firstOpenMs.initiator),
      firstPeerOpenResponder: med((r) => r.firstOpenMs.responder),
      driverCallsOnTheWay: med((r) => r.driverMs),
      stateAtSend: reps.map((r) => r.stateAtSend).join(','),
      controlHopsAndJs: med((r) => r.otherMs),
      ...(prepared ? { negotiateAfterConnect: med((r) => r.negotiateMs ?? NaN) } : {}),
    },
    each: reps,
  };
  run.figures.push(figure(run, prepared ? FIG.firstSendPrepared : FIG.firstSend, total.median, null, { stats: total, details }));
}

// ------------------------------------------------------------- all-to-all

/** n workers on 2 devices (rank r on device r % 2): raw copies between every pair at once, then smcuda. */
async function runAllToAll(run: Run, g: Group): Promise<void> {
  const { plan, progress } = run;
  const { size, repeat } = plan.allToAll;
  const ranks = Array.from({ length: g.size }, (_, r) => r);
  const devices = new Set((g.infos as BenchWorkerInfo[]).map((i) => i.device.uuid));
  if (devices.size < 2) run.notes.push('all-to-all: one device visible: every rank ran on it');
  progress(`all-to-all: raw copies, ${formatBytes(size)} between ${g.size} processes`);
  const exported = await Promise.all(ranks.map((r) => g.call<ExportedBuffer[]>(r, { op: 'export', size, count: 1 })));
  let raw: TimedResult[];
  try {
    raw = await Promise.all(
      ranks.map((r) => g.call<TimedResult>(r, { op: 'raw-copy-many', buffers: exported.filter((_, k) => k !== r).map((b) => b[0]!), size, ...repeat })),
    );
  } finally {
    await Promise.all(ranks.map((r) => g.call(r, { op: 'unexport' })));
  }
  progress(`all-to-all: smcuda, ${formatBytes(size)} between ${g.size} processes`);
  await Promise.all(ranks.map((r) => g.call(r, { op: 'a2a-listen' })));
  await Promise.all(ranks.map((r) => g.call(r, { op: 'a2a-connect', ranks: g.size })));
  const r = await Promise.all(ranks.map((k) => g.call<TimedResult>(k, { op: 'a2a-run', size, ...repeat })));
  await Promise.all(ranks.map((k) => g.call(k, { op: 'a2a-close' })));
  const paths = r.reduce((a, x) => ({ eager: a.eager + x.paths!.eager, rget: a.rget + x.paths!.rget, staging: a.staging + x.paths!.staging }), { eager: 0, rget: 0, staging: 0 });
  const details = { ranks: g.size, devices: devices.size, size, rounds: repeat.iters, warmup: repeat.warmup, perRank: r.map((x) => gbPerSecond(x.bytes, x.seconds)), rawPerRank: raw.map((x) => gbPerSecond(x.bytes, x.seconds)) };
  run.figures.push(figure(run, FIG.allToAll, aggregate(r), aggregate(raw), { paths, details }));
}

function packageVersion(): string {
  try {
    const url = new URL('../../../package.json', import.meta.url); // dist/src/bench → package root
    return (JSON.parse(readFileSync(url, 'utf8')) as { version: string }).version;
  } catch {
    return 'unknown';
  }
}
