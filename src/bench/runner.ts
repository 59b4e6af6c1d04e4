/**
 * Runs the suites: forks workers per layout ("across": devices 0 and 1;
 * "same": both on device 0; the groups of run-groups.ts: memory kinds,
 * fresh pairs for the first send, 8 workers for the all-to-all), drives the
 * measurements of protocol.ts, and turns results into figures (each beside
 * its baseline, and latencies beside the native floor, from this same run)
 * and plot series. The graph and collectives suites run on the across
 * workers (graph-suite.ts, collectives-suite.ts; --ranks N gives the
 * collectives a group of N workers of their own).
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { cpus, hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { formatBytes } from '../cli/format.js';
import { type Figure, type FigureSpec, skipped, withFloor } from './figures.js';
import type { FirstSendBreakdown } from './first-send.js';
import type { HitPatternResult } from './cache-hits.js';
import { type BenchOptions, makePlan, shmFreeBytes } from './plan.js';
import {
  BENCH_WORKER_ENV,
  type BenchCommand,
  type BenchWorkerConfig,
  type BenchWorkerInfo,
  type BidirResult,
  type ExportedBuffer,
  type FramesResult,
  type IpcOpenResult,
  type NegotiationResult,
  type PathCounts,
  type Repeat,
  type SamplesResult,
  type TimedResult,
} from './protocol.js';
import type { BenchReport, MachineInfo, SeriesPoint } from './report.js';
import { gbPerSecond, median, summarize } from './stats.js';
import {
  A2A_RANKS,
  ACROSS_SUITES,
  BANDWIDTH_TARGETS,
  CACHE_RANDOM_BUFFERS,
  CACHE_SIZE,
  CACHE_WINDOW,
  FLOOR_LARGE_SIZE,
  SAME_GPU_MID_SIZES,
  FIG,
  HEADLINE_SIZE,
  SAME_GPU_TARGET_SIZE,
  STAGING_TARGET_SIZE,
  type SuiteName,
} from './suites.js';
import { addPaths, aggregate, both, figure, gpuOnly, type Group, negotiateSession, oneway, openSession, type Progress, type Run } from './run-context.js';
import { type PairedRuns, pairedRuns, runsDetails } from './paired-runs.js';
import { firstSendFigure, firstSendOnce, memorySpecs, runAllToAll, runMemory } from './run-groups.js';
import { guarded } from './suite-context.js';
import { WorkerFailedError, WorkerGroup } from './worker-group.js';
import { NATIVE_FLOOR, runGraphSuite } from './graph-suite.js';
import { runCollectivesSuite } from './collectives-suite.js';
import { cleanUpOnInterrupt } from '../cli/interrupt.js';

export type { Progress } from './run-context.js';

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
    const g = await WorkerGroup.start<BenchCommand, BenchWorkerInfo>(fileURLToPath(new URL('./worker.js', import.meta.url)), configs, {
      envVar: BENCH_WORKER_ENV,
    });
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
    if (wants('graph')) await runGraphSuite(run, across, { twoDevices, driverKind: first.driver });
    const ranks = opts.ranks ?? 2;
    if (wants('collectives') && ranks === 2)
      await runCollectivesSuite(run, across, { devices: twoDevices ? 2 : 1, dir: join(dir, 'across'), startGroup: start });
    await across.close();
    if (wants('collectives') && ranks !== 2) {
      // --ranks N: a group of its own, rank r on device r mod (visible devices).
      const visible = first.deviceCount;
      const group = await start(
        'collectives',
        Array.from({ length: ranks }, (_, r) => r % visible),
      );
      await runCollectivesSuite(run, group, {
        devices: new Set(group.infos.map((i) => i.device.uuid)).size,
        dir: join(dir, 'collectives'),
        startGroup: start,
      });
      await group.close();
    }
    // The suites below run in groups of their own: one whose worker is lost (a crash in a driver
    // call, a timeout) lists what it measured, the rest of its figures as skipped, and the run goes on.
    const inGroup = (what: string, specs: readonly FigureSpec[], layout: string, devs: number[], body: (g: Group) => Promise<void>) =>
      guarded(run!, what, specs, async () => {
        const g = await start(layout, devs);
        try {
          await body(g);
        } finally {
          await g.close();
        }
      });
    if (wants('same-gpu')) {
      if (sim) figures.push(skipped(FIG.sameGpu, gpuOnly()));
      else await inGroup('same-gpu', [FIG.sameGpuMid, FIG.sameGpu], 'same', [0, 0], (g) => runSameGpu(run!, g));
    }
    if (wants('memory')) await inGroup('memory', memorySpecs(run, 'memory'), 'memory', [0, 0], (g) => runMemory(run!, g, 'memory'));
    if (wants('memory-across'))
      await inGroup('memory-across', memorySpecs(run, 'memory-across'), 'memory-across', [0, 1], (g) => runMemory(run!, g, 'memory-across'));
    if (wants('first-send')) {
      for (const prepared of [false, true]) {
        const reps: FirstSendBreakdown[] = [];
        for (let i = 0; i < plan.firstSend.reps; i++) {
          progress(`first send${prepared ? ', negotiated at connect' : ''}: fresh processes ${i + 1}/${plan.firstSend.reps}`);
          await inGroup(
            `first send, fresh processes ${i + 1}`,
            [],
            `first${prepared ? 'p' : ''}${i}`,
            [0, 1],
            async (g) => void reps.push(await firstSendOnce(run!, g, prepared)),
          );
        }
        const spec = prepared ? FIG.firstSendPrepared : FIG.firstSend;
        if (reps.length > 0) firstSendFigure(run, reps, prepared);
        else figures.push(skipped(spec, 'every repetition failed (notes)'));
      }
    }
    if (wants('all-to-all')) {
      progress(`all-to-all: starting ${A2A_RANKS} workers on 2 devices`);
      await inGroup(
        'all-to-all',
        [FIG.allToAll],
        'a2a',
        Array.from({ length: A2A_RANKS }, (_, r) => r % 2),
        (g) => runAllToAll(run!, g),
      );
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

// ------------------------------------------------------------ across GPUs

async function pingpong(g: Group, session: string, size: number, repeat: { iters: number; warmup: number }, ready = false): Promise<SamplesResult> {
  const cmd: BenchCommand = { op: 'pingpong', session, size, ...repeat, ...(ready ? { ready: true } : {}) };
  const [, r1] = await both<SamplesResult, SamplesResult>(g, cmd, cmd);
  return r1; // rank 1 initiates and times
}

/**
 * `runs` runs (paired-runs.ts) of back-to-back raw copies on rank 1, each followed by rank 0's one-way
 * stream of as many messages with `window` outstanding: each side's GB/s, and the paths smcuda's
 * messages took over all runs.
 */
async function rawThenOneway(
  g: Group,
  size: number,
  window: number,
  repeat: Repeat,
  runs: number,
  /** Also raw copies over `window` slices before each run (as the stream's sends and receives use them): `rawOverSlices`, else empty. */
  overSlices = false,
): Promise<{ runs: PairedRuns; paths: PathCounts; rawOverSlices: number[] }> {
  let paths: PathCounts | undefined;
  const rawOverSlices: number[] = [];
  const r = await pairedRuns(
    runs,
    async () => {
      if (overSlices) {
        const sliced = await rawCopy(g, size, repeat, window);
        rawOverSlices.push(gbPerSecond(sliced.bytes, sliced.seconds));
      }
      const raw = await rawCopy(g, size, repeat);
      return gbPerSecond(raw.bytes, raw.seconds);
    },
    async () => {
      const x = await oneway(g, 'default', size, window, repeat);
      paths = addPaths(paths, x.paths!);
      return gbPerSecond(x.bytes, x.seconds);
    },
  );
  return { runs: r, paths: paths!, rawOverSlices };
}

/** Back-to-back copies of `size` from rank 0's memory into rank 1's, over one pair of buffers or over `slices` pairs in turn. */
async function rawCopy(g: Group, size: number, repeat: { iters: number; warmup: number }, slices = 1): Promise<TimedResult> {
  const [buffer] = await g.call<ExportedBuffer[]>(0, { op: 'export', size: size * slices, count: 1 });
  try {
    return await g.call<TimedResult>(1, { op: 'raw-copy', buffer: buffer!, size, ...repeat, ...(slices > 1 ? { slices } : {}) });
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
  if (neg.state !== 'OK')
    run.notes.push(
      `the default endpoint negotiated ${neg.path.join('→')}: RGET figures measure ${neg.state === 'BAD' ? 'staging' : 'whatever path was taken'}`,
    );

  if (wants('latency') || wants('cache')) {
    for (const size of [HEADLINE_SIZE, CACHE_SIZE, FLOOR_LARGE_SIZE]) {
      progress(`native floor: ${formatBytes(size)} (C++ ping-pong on shared host flags)`);
      const f = summarize(await floor(g, size, plan.floor(size), run.sim));
      run.floor.set(size, f.median);
      run.series.push({
        plot: 'latency',
        series: `native floor, no JS (${label})`,
        size,
        value: f.median,
        unit: 'µs',
        p10: f.p10,
        p90: f.p90,
        iterations: f.n,
      });
      if (size !== CACHE_SIZE)
        run.figures.push(
          figure(run, FIG.floor(size), f.median, null, {
            stats: f,
            details: {
              what: run.sim
                ? 'simulated driver: two processes spinning on shared host flags plus a host memcpy (no device, no CUDA)'
                : 'cuMemcpyAsync over an open IPC mapping + cuEventRecord, spinning on cuEventQuery',
            },
          }),
        );
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
      run.series.push({
        plot: 'latency',
        series: `smcuda ping-pong (${label})`,
        size,
        value: s.median,
        unit: 'µs',
        p10: s.p10,
        p90: s.p90,
        iterations: s.n,
        paths: r.paths!,
      });
      if (size === HEADLINE_SIZE) headline = r;
    }
    headline ??= await pingpong(g, 'default', HEADLINE_SIZE, plan.latency(HEADLINE_SIZE));
    const h = summarize(headline.samples);
    const floor8 = run.floor.get(HEADLINE_SIZE);
    const extra = {
      stats: h,
      paths: headline.paths!,
      details: { socketHalfRoundTrip: socket, copyWithCompletion: copy, socketPlusCopy: socket.median + copy.median },
    };
    run.figures.push(withFloor(figure(run, FIG.overhead8, h.median, socket.median, extra), floor8));
    let headlineUs = h.median;
    if (run.sim) run.figures.push(skipped(FIG.latency8, gpuOnly()));
    else {
      // The headline moves with the host (by a third over full runs of one build on 2 × H200): the median of
      // several runs, each the median of its half round trips, each right after a run of the floor (paired-runs.ts).
      progress(`latency: 8 B against the native floor, ${plan.throughputRuns} runs`);
      let paths: PathCounts | undefined;
      const runs = await pairedRuns(
        plan.throughputRuns,
        async () => median(await floor(g, HEADLINE_SIZE, plan.floor(HEADLINE_SIZE), run.sim)),
        async () => {
          const r = await pingpong(g, 'default', HEADLINE_SIZE, plan.latency(HEADLINE_SIZE));
          paths = addPaths(paths, r.paths!);
          return median(r.samples);
        },
      );
      const details = {
        ...extra.details,
        runs: plan.throughputRuns,
        runsUs: runs.values,
        floorRunsUs: runs.baselines,
        floorStats: runs.baseline,
        firstRunSamples: h,
      };
      run.figures.push(
        withFloor(figure(run, FIG.latency8, runs.value.median, runs.baseline.median, { stats: runs.value, paths: paths!, details }), runs.baseline.median),
      );
      headlineUs = runs.value.median;
    }
    // What the safe default costs: a send without stream first checks the legacy default stream (an event record and query).
    progress('latency: ping-pong 8 B with ready: true');
    const ready = await pingpong(g, 'default', HEADLINE_SIZE, plan.latency(HEADLINE_SIZE), true);
    const r = summarize(ready.samples);
    if (run.sim) run.figures.push(skipped(FIG.latency8Ready, gpuOnly()));
    else run.figures.push(figure(run, FIG.latency8Ready, r.median, headlineUs, { stats: r, paths: ready.paths! }));
  }

  if (wants('bandwidth')) {
    const byTarget = new Map(BANDWIDTH_TARGETS.map((t) => [t.size, t.spec]));
    const done = new Set<number>();
    for (const size of plan.sizes) {
      progress(`bandwidth: ${formatBytes(size)} (raw, then smcuda)`);
      const repeat = plan.bandwidth(size);
      // As osu_bw does: a window of outstanding sends, against back-to-back raw copies.
      // A target size is a figure: the median of several runs (paired-runs.ts); the other sizes are plot points.
      const spec = byTarget.get(size);
      const runsHere = spec !== undefined && !run.sim && twoDevices ? plan.throughputRuns : 1;
      const { runs, paths } = await rawThenOneway(g, size, opts.window, repeat, runsHere);
      const rawGBs = runs.baseline.median;
      const gbs = runs.value.median;
      run.series.push({ plot: 'bandwidth', series: `raw cuMemcpyAsync (${label})`, size, value: rawGBs, unit: 'GB/s', iterations: repeat.iters });
      run.series.push({ plot: 'bandwidth', series: `smcuda (${label})`, size, value: gbs, unit: 'GB/s', iterations: repeat.iters, paths });
      if (spec) {
        done.add(size);
        if (run.sim) run.figures.push(skipped(spec, gpuOnly()));
        else if (!twoDevices) run.figures.push(skipped(spec, 'needs two GPUs; one is visible'));
        else run.figures.push(figure(run, spec, gbs, rawGBs, { stats: runs.value, paths, details: { size, iterations: repeat.iters, ...runsDetails(runs) } }));
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
      const { runs, paths } = await rawThenOneway(g, size, opts.window, repeat, plan.throughputRuns);
      const details = { size, window: opts.window, iterations: repeat.iters, warmup: repeat.warmup, ...runsDetails(runs) };
      run.figures.push(figure(run, spec, runs.value.median, runs.baseline.median, { stats: runs.value, paths, details }));
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
        figure(run, FIG.cacheHit, hitUs.median, open.median, {
          stats: hitUs,
          details: { open, close: summarize(opens.closeUs), firstOpenUs: opens.openUs[0] },
        }),
      );
      progress(`cache: hits over ${CACHE_WINDOW} buffers in turn and ${CACHE_RANDOM_BUFFERS} in random order`);
      const many = await g.call<ExportedBuffer[]>(0, { op: 'export', size: 2 << 20, count: CACHE_RANDOM_BUFFERS });
      for (const [spec, pattern, buffers] of [
        [FIG.cacheHitWindow, 'window', many.slice(0, CACHE_WINDOW)],
        [FIG.cacheHitRandom, 'random', many],
      ] as const) {
        const r = await g.call<HitPatternResult>(1, { op: 'cache-hit-pattern', buffers, pattern, ...plan.cacheHit });
        const us = summarize(r.cpuNs.map((ns) => ns / 1000));
        const same = summarize(r.sameCpuNs.map((ns) => ns / 1000));
        const wall = summarize(r.wallNs.map((ns) => ns / 1000));
        run.figures.push(
          figure(run, spec, us.median, same.median, {
            stats: us,
            details: { buffers: buffers.length, cpuNsPerHit: us.median * 1000, wallNsPerHit: wall.median * 1000, wall },
          }),
        );
      }
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
      run.figures.push(
        withFloor(
          figure(run, FIG.cacheOnOff, on.median, off.median, { stats: on, paths: offRun.paths!, details: { cacheOff: off } }),
          run.floor.get(CACHE_SIZE),
        ),
      );
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
    else
      run.figures.push(
        figure(run, FIG.staging, target.gbs, target.base, { paths: target.paths, details: { size: STAGING_TARGET_SIZE, iterations: target.iterations } }),
      );
  }

  if (wants('bidirectional')) {
    const { size, repeat } = plan.bidir;
    progress(`bidirectional: ${formatBytes(size)} both ways (raw, then smcuda)`);
    const [b0, b1] = await Promise.all([0, 1].map((r) => g.call<ExportedBuffer[]>(r, { op: 'export', size, count: 1 })));
    const cmd: BenchCommand = { op: 'bidir', session: 'default', size, window: opts.window, ...repeat };
    let paths: PathCounts | undefined;
    const eachWay: Array<{ '0→1': number; '1→0': number }> = [];
    const rawEachWay: number[][] = [];
    let runs: PairedRuns;
    try {
      runs = await pairedRuns(
        plan.throughputRuns,
        async () => {
          const raw = await both<TimedResult, TimedResult>(
            g,
            { op: 'raw-copy', buffer: b1![0]!, size, ...repeat },
            { op: 'raw-copy', buffer: b0![0]!, size, ...repeat },
          );
          rawEachWay.push(raw.map((x) => gbPerSecond(x.bytes, x.seconds)));
          return aggregate(raw);
        },
        async () => {
          const [r0, r1] = await both<BidirResult, BidirResult>(g, cmd, cmd);
          paths = addPaths(addPaths(paths, r0.sent.paths!), r1.sent.paths!);
          eachWay.push({ '0→1': gbPerSecond(r0.sent.bytes, r0.sent.seconds), '1→0': gbPerSecond(r1.sent.bytes, r1.sent.seconds) });
          return aggregate([r0.sent, r1.sent]);
        },
      );
    } finally {
      await Promise.all([0, 1].map((r) => g.call(r, { op: 'unexport' })));
    }
    const details = { size, window: opts.window, iterationsEachWay: repeat.iters, ...runsDetails(runs), eachWay, rawEachWay };
    run.figures.push(figure(run, FIG.bidirectional, runs.value.median, runs.baseline.median, { stats: runs.value, paths: paths!, details }));
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

/** The native floor between the pair's two ranks (native-floor.ts): rank 1's half round trips, µs. */
// The graph suite's 8 B native floor: the same C++ ping-pong, measured again in the graph suite's part of the run.
NATIVE_FLOOR.measure = async (run, g) => summarize(await floor(g, HEADLINE_SIZE, run.plan.floor(HEADLINE_SIZE), run.sim));

async function floor(g: Group, size: number, repeat: { iters: number; warmup: number }, sim: boolean): Promise<number[]> {
  const segment = `/smcuda-floor-${process.pid}-${randomBytes(4).toString('hex')}`;
  try {
    const [p0, p1] = await both<{ handle?: Uint8Array }, { handle?: Uint8Array }>(
      g,
      { op: 'floor-prepare', segment, size },
      { op: 'floor-prepare', segment, size },
    );
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
    run.series.push({
      plot: 'latency',
      series: 'raw Unix-socket ping-pong (64 B frames)',
      size,
      value: socket.median,
      unit: 'µs',
      p10: socket.p10,
      p90: socket.p90,
      iterations: socket.n,
    });
  }
}

// ------------------------------------------------------------- same GPU

async function runSameGpu(run: Run, g: Group): Promise<void> {
  const { plan, progress } = run;
  await openSession(g, 'default', { ipc: true, cache: true });
  await negotiateSession(g, 'default');
  let target: { gbs: number; raw: number; paths: Record<string, number>; iterations: number; runs: PairedRuns } | undefined;
  const mid: Array<{ size: number; gbs: number; raw: number; paths: Record<string, number>; runs: PairedRuns; rawOverSlices: number[] }> = [];
  for (const size of plan.sizes.filter((s) => s >= 64 << 10)) {
    // The figures move with the machine (256 MiB read 84.9 % of raw in one run, 100.3 % in the next):
    // their sizes are the median of several runs (paired-runs.ts).
    const runsHere = SAME_GPU_MID_SIZES.includes(size) || size === SAME_GPU_TARGET_SIZE ? plan.throughputRuns : 1;
    progress(`same GPU: ${formatBytes(size)} (raw, then smcuda${runsHere > 1 ? `, ${runsHere} runs` : ''})`);
    const repeat = plan.bandwidth(size);
    // At 1-16 MiB, one pair of buffers (32 MiB at most) stays in the GPU's L2 cache from copy to copy, while the
    // stream's window of slices on each side does not: raw copies over the same slices are measured beside it.
    const isMid = SAME_GPU_MID_SIZES.includes(size);
    const { runs, paths, rawOverSlices } = await rawThenOneway(g, size, run.opts.window, repeat, runsHere, isMid);
    const gbs = runs.value.median;
    const rawGBs = runs.baseline.median;
    run.series.push({ plot: 'bandwidth', series: 'raw cuMemcpyAsync (same GPU)', size, value: rawGBs, unit: 'GB/s', iterations: repeat.iters * runsHere });
    run.series.push({ plot: 'bandwidth', series: 'smcuda (same GPU)', size, value: gbs, unit: 'GB/s', iterations: repeat.iters * runsHere, paths });
    if (size === SAME_GPU_TARGET_SIZE) target = { gbs, raw: rawGBs, paths, iterations: repeat.iters, runs };
    if (isMid) mid.push({ size, gbs, raw: rawGBs, paths, runs, rawOverSlices });
  }
  await both(g, { op: 'close', session: 'default' }, { op: 'close', session: 'default' });
  if (mid.length === 0) run.figures.push(skipped(FIG.sameGpuMid, '1, 4 and 16 MiB were not measured (--sizes)'));
  else {
    const worst = mid.reduce((a, m) => (m.gbs / m.raw < a.gbs / a.raw ? m : a));
    const byRatio = Object.fromEntries(mid.map((m) => [formatBytes(m.size), m.gbs / m.raw]));
    const runsBySize = Object.fromEntries(
      mid.map((m) => [formatBytes(m.size), { runsGBs: m.runs.values, rawRunsGBs: m.runs.baselines, rawOverSlicesRunsGBs: m.rawOverSlices }]),
    );
    // The figure's ratio stays against one pair of buffers (the target's baseline); this one is beside it.
    const byRatioOverSlices = Object.fromEntries(mid.map((m) => [formatBytes(m.size), m.gbs / summarize(m.rawOverSlices).median]));
    run.figures.push(
      figure(run, FIG.sameGpuMid, worst.gbs, worst.raw, {
        stats: worst.runs.value,
        paths: worst.paths,
        details: {
          worstSize: worst.size,
          ratioBySize: byRatio,
          window: run.opts.window,
          ratioToRawOverSlicesBySize: byRatioOverSlices,
          runs: plan.throughputRuns,
          runsBySize,
          rawStats: worst.runs.baseline,
        },
      }),
    );
  }
  if (!target) run.figures.push(skipped(FIG.sameGpu, `${formatBytes(SAME_GPU_TARGET_SIZE)} was not measured (--sizes, or device memory)`));
  else {
    const r = target.runs;
    run.figures.push(
      figure(run, FIG.sameGpu, target.gbs, target.raw, {
        stats: r.value,
        paths: target.paths,
        details: { size: SAME_GPU_TARGET_SIZE, iterations: target.iterations, ...runsDetails(r) },
      }),
    );
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
