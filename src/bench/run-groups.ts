/**
 * The suites that run in worker groups of their own (runner.ts starts and
 * closes each group): the memory kinds on one GPU or across two, the first
 * send of fresh processes, and the all-to-all among 8 processes.
 */
import { MEMORY_OPTIONS } from '../cli/demo-memory.js';
import { formatBytes } from '../cli/format.js';
import { skipped } from './figures.js';
import { breakdown, type FirstSendBreakdown } from './first-send.js';
import type { KindExport, KindOpenResult } from './memory-kinds.js';
import type { BenchCommand, BenchWorkerInfo, ExportedBuffer, FirstSendResult, PathCounts, ProbeResult, TimedResult } from './protocol.js';
import { addPaths, aggregate, both, figure, gpuOnly, type Group, negotiateSession, openSession, type Run } from './run-context.js';
import { type PairedRuns, pairedRuns, runsDetails } from './paired-runs.js';
import { gbPerSecond, median, summarize } from './stats.js';
import { FIG, MEMORY_FIG, MEMORY_OPEN_SIZE, MEMORY_TARGET_SIZE, type MemoryLayout, type ScopedSpec } from './suites.js';
// ------------------------------------------------------------- memory kinds

/**
 * Per kind, the pair of workers on one GPU ('memory') or on GPU0 and GPU1
 * ('memory-across'): the first import of an allocation and a cache hit on
 * it (raw driver calls and HandlePool, not the transport), then transfers
 * against raw copies over an open mapping of that kind. A transfer is
 * measured only where one probe message of that kind went through the
 * endpoint; otherwise the figure is skipped with the endpoint's error.
 */
export async function runMemory(run: Run, g: Group, layout: MemoryLayout): Promise<void> {
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
  // Each kind's figures are listed as soon as they are measured: a worker lost later in the suite keeps them.
  let legacyOpen: number | undefined;
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
    const hit = summarize(result.hitNs.map((ns) => ns / 1000));
    legacyOpen ??= open.median; // legacy is measured first: the baseline of every kind's import
    const details: Record<string, unknown> = { close: summarize(result.closeUs), firstImportUs: result.openUs[0], allocationBytes: MEMORY_OPEN_SIZE };
    if (result.poolImportUs !== undefined) details.poolImportUs = result.poolImportUs;
    run.figures.push(figure(run, MEMORY_FIG.import(kind, layout), open.median, legacyOpen, { stats: open, details }));
    run.figures.push(figure(run, MEMORY_FIG.hit(kind, layout), hit.median, open.median, { stats: hit }));

    for (const size of sizes) {
      const spec = across ? MEMORY_FIG.transfer(kind, layout, size) : MEMORY_FIG.transfer(kind);
      // A transfer figure moves with the machine (pool memory at 1 GiB across GPUs read 90-99 % of raw over runs
      // of one build): on a GPU it is the median of several runs, each right after a raw run (paired-runs.ts).
      const runsHere = run.sim ? 1 : plan.throughputRuns;
      progress(`${layout} ${kind}: ${formatBytes(size)} (raw, then smcuda${runsHere > 1 ? `, ${runsHere} runs` : ''})`);
      const repeat = plan.bandwidth(size);
      const rawRun = async (): Promise<number> => {
        const [exp] = await g.call<KindExport[]>(0, { op: 'kind-export', kind, size, count: 1 });
        try {
          const raw = await g.call<TimedResult>(1, { op: 'kind-raw-copy', export: exp!, ...repeat });
          return gbPerSecond(raw.bytes, raw.seconds);
        } finally {
          await g.call(0, { op: 'kind-unexport' });
        }
      };
      const firstRaw = await rawRun();
      await g.call(1, { op: 'probe-recv', session, size, memory: kind });
      const sent = await g.call<ProbeResult>(0, { op: 'probe-send', session, size, memory: kind });
      const got = await g.call<ProbeResult>(1, { op: 'probe-finish', session, abort: !sent.ok });
      if (!sent.ok || !got.ok) {
        run.series.push({
          plot: 'bandwidth',
          series: `raw cuMemcpyAsync, ${kind} memory (${label})`,
          size,
          value: firstRaw,
          unit: 'GB/s',
          iterations: repeat.iters,
        });
        run.figures.push(skipped(spec, `smcuda could not send ${kind} memory here: ${sent.error ?? got.error}`));
        continue;
      }
      // A transfer that fails (the endpoint closes) is reported with both ranks' errors; the next gets a fresh session.
      const cmd: BenchCommand = { op: 'oneway', session, size, window: run.opts.window, ...repeat, memory: kind };
      let paths: PathCounts | undefined;
      let stagingReasons: Record<string, number> | undefined;
      let runs: PairedRuns;
      try {
        let first = true;
        runs = await pairedRuns(
          runsHere,
          async () => {
            if (!first) return rawRun();
            first = false; // the raw run before the probe is the first run's baseline
            return firstRaw;
          },
          async () => {
            const [s0, s1] = await Promise.allSettled([g.call<TimedResult>(0, cmd), g.call<TimedResult>(1, cmd)]);
            if (s0.status === 'rejected' || s1.status === 'rejected') {
              throw new Error(
                [s0, s1]
                  .map((x, rank) => (x.status === 'rejected' ? `rank ${rank}: ${(x.reason as Error).message}` : ''))
                  .filter(Boolean)
                  .join('; '),
              );
            }
            paths = addPaths(paths, s0.value.paths!);
            for (const [why, n] of Object.entries(s0.value.stagingReasons ?? {})) (stagingReasons ??= {})[why] = (stagingReasons[why] ?? 0) + n;
            return gbPerSecond(s0.value.bytes, s0.value.seconds);
          },
        );
      } catch (err) {
        run.figures.push(skipped(spec, `the ${kind} transfer failed: ${(err as Error).message}`));
        await both(g, { op: 'close', session }, { op: 'close', session }).catch(() => {});
        session = `memory-${++fresh}`;
        await openSession(g, session, { ipc: true, cache: true });
        await negotiateSession(g, session);
        continue;
      }
      const gbs = runs.value.median;
      const rawGBs = runs.baseline.median;
      run.series.push({
        plot: 'bandwidth',
        series: `raw cuMemcpyAsync, ${kind} memory (${label})`,
        size,
        value: rawGBs,
        unit: 'GB/s',
        iterations: repeat.iters * runsHere,
      });
      run.series.push({
        plot: 'bandwidth',
        series: `smcuda, ${kind} memory (${label})`,
        size,
        value: gbs,
        unit: 'GB/s',
        iterations: repeat.iters * runsHere,
        paths: paths!,
      });
      if (run.sim) run.figures.push(skipped(spec, gpuOnly()));
      else if (!across && size !== MEMORY_TARGET_SIZE) run.figures.push(skipped(spec, `${formatBytes(MEMORY_TARGET_SIZE)} was not measured (device memory)`));
      else {
        const details = { size, iterations: repeat.iters, ...runsDetails(runs), ...(stagingReasons ? { stagingReasons } : {}) };
        run.figures.push(figure(run, spec, gbs, rawGBs, { stats: runs.value, paths: paths!, details }));
      }
    }
  }
  await both(g, { op: 'close', session }, { op: 'close', session });
}

/** Every figure of a memory suite (those not listed when it ends early are listed as skipped). */
export function memorySpecs(run: Pick<Run, 'plan'>, layout: MemoryLayout): ScopedSpec[] {
  const sizes = layout === 'memory-across' ? run.plan.memoryAcrossSizes : [run.plan.memorySize];
  return MEMORY_OPTIONS.flatMap((kind) => [
    MEMORY_FIG.import(kind, layout),
    MEMORY_FIG.hit(kind, layout),
    ...sizes.map((size) => (layout === 'memory-across' ? MEMORY_FIG.transfer(kind, layout, size) : MEMORY_FIG.transfer(kind))),
  ]);
}

// ------------------------------------------------------------- first send

/** One fresh pair of processes: rank 1's first device message to rank 0, and where its time went. */
export async function firstSendOnce(run: Run, g: Group, negotiateFirst: boolean): Promise<FirstSendBreakdown> {
  await openSession(g, 'first', { ipc: true, cache: true, timeCalls: true });
  const cmd: BenchCommand = { op: 'first-send', session: 'first', size: run.plan.firstSend.size, negotiateFirst };
  const [responder, initiator] = await both<FirstSendResult, FirstSendResult>(g, cmd, cmd);
  await both(g, { op: 'close', session: 'first' }, { op: 'close', session: 'first' });
  return breakdown(initiator, responder);
}

export function firstSendFigure(run: Run, reps: FirstSendBreakdown[], prepared: boolean): void {
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

/**
 * n workers on 2 devices (rank r on device r % 2): raw copies between every pair at once, then smcuda's
 * all-to-all, run after run (paired-runs.ts).
 */
export async function runAllToAll(run: Run, g: Group): Promise<void> {
  const { plan, progress } = run;
  const { size, repeat } = plan.allToAll;
  const ranks = Array.from({ length: g.size }, (_, r) => r);
  const devices = new Set((g.infos as BenchWorkerInfo[]).map((i) => i.device.uuid));
  if (devices.size < 2) run.notes.push('all-to-all: one device visible: every rank ran on it');
  const exported = await Promise.all(ranks.map((r) => g.call<ExportedBuffer[]>(r, { op: 'export', size, count: 1 })));
  let paths: PathCounts | undefined;
  const perRank: number[][] = [];
  const rawPerRank: number[][] = [];
  const gbs = (x: TimedResult) => gbPerSecond(x.bytes, x.seconds);
  let runs: PairedRuns;
  let warmupRun: number;
  let k = 0;
  try {
    await Promise.all(ranks.map((r) => g.call(r, { op: 'a2a-listen' })));
    await Promise.all(ranks.map((r) => g.call(r, { op: 'a2a-connect', ranks: g.size })));
    // One run of smcuda first, not counted: in two full runs on 2 × H200 the five runs after a
    // fresh start climbed by a third while the raw runs beside them stayed level: eight fresh processes' code and caches warming up.
    progress(`all-to-all: smcuda, ${formatBytes(size)} between ${g.size} processes, a warm-up run`);
    warmupRun = aggregate(await Promise.all(ranks.map((j) => g.call<TimedResult>(j, { op: 'a2a-run', size, ...repeat }))));
    runs = await pairedRuns(
      plan.throughputRuns,
      async () => {
        progress(`all-to-all: raw copies, ${formatBytes(size)} between ${g.size} processes, run ${++k} of ${plan.throughputRuns}`);
        const raw = await Promise.all(
          ranks.map((r) => g.call<TimedResult>(r, { op: 'raw-copy-many', buffers: exported.filter((_, j) => j !== r).map((b) => b[0]!), size, ...repeat })),
        );
        rawPerRank.push(raw.map(gbs));
        return aggregate(raw);
      },
      async () => {
        progress(`all-to-all: smcuda, ${formatBytes(size)} between ${g.size} processes, run ${k} of ${plan.throughputRuns}`);
        const r = await Promise.all(ranks.map((j) => g.call<TimedResult>(j, { op: 'a2a-run', size, ...repeat })));
        for (const x of r) paths = addPaths(paths, x.paths!);
        perRank.push(r.map(gbs));
        return aggregate(r);
      },
    );
    await Promise.all(ranks.map((j) => g.call(j, { op: 'a2a-close' })));
  } finally {
    await Promise.all(ranks.map((r) => g.call(r, { op: 'unexport' })));
  }
  const details = {
    ranks: g.size,
    devices: devices.size,
    size,
    rounds: repeat.iters,
    warmup: repeat.warmup,
    warmupRunGBs: warmupRun,
    ...runsDetails(runs),
    perRank,
    rawPerRank,
  };
  run.figures.push(figure(run, FIG.allToAll, runs.value.median, runs.baseline.median, { stats: runs.value, paths: paths!, details }));
}
