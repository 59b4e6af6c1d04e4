/**
 * Compiles the data path's code before a real endpoint needs it: once per
 * process, two transports on two simulated drivers, joined in memory (and a
 * descriptor socketpair, so their control rings are set up as between
 * processes), exchange one 64 KiB device message by EAGER, negotiate, and
 * exchange one by RGET, then close. Nothing crosses a real socket or touches
 * the GPU.
 *
 * Why: a fresh process runs send, the codec, the rings, matching, the RGET
 * receive, the copy batcher and the FIN for the first time on its first
 * message's way. Transport.create starts it in a setImmediate, only for the
 * native driver (`warmUp: false` leaves it out); it takes this thread tens
 * of milliseconds, in the turns of promise callbacks after create.
 *
 * It pays only when it is done before the real work needs the thread: a
 * first message sent as soon as the endpoint was up arrived later with it
 * than without (docs/benchmarks.md, "The data path's warm-up on the first
 * message"). So it gives way to real work (src/warm-up-yield.ts): once a
 * real endpoint starts device work (a device send or receive,
 * `negotiate()`, `register()`, the peer's negotiation, a device message
 * arriving), it stops at its next step boundary — the step in flight
 * completes, it begins no other — and closes what it opened CLOSE_DELAY_MS
 * later, off the real message's way; when real work came before it began,
 * it does not start. Its report (WarmUpReport) and the debug log
 * (NODE_DEBUG=smcuda) say which, and how far it had got.
 * The simulator it runs on is imported when it runs (not by
 * `import 'smcuda'`), so a process that leaves it out never loads it.
 */
import { randomBytes } from 'node:crypto';
import { createMemoryChannelPair } from './channel/memory-channel.js';
import { FdChannel } from './channel/fd-channel.js';
import type { DeviceBuffer } from './buffers.js';
import type { SimulatedCudaDriver } from './cuda/sim-driver.js';
import { debug } from './debug.js';
import type { PathKind } from './paths/data-path.js';
import type { Transport, TransportCreateOptions } from './transport.js';
import { firstRealWork, isYielding, markWarmUpDriver } from './warm-up-yield.js';

/** The message each way: above the device eager limit, within the negotiation's eager limit (as a fresh pair's first message often is). */
const BYTES = 64 << 10;

/** What the warm-up moved, by path (the receiving side's count). */
export type WarmUpPaths = Partial<Record<PathKind, number>>;

type Create = (options: TransportCreateOptions) => Promise<Transport>;

/**
 * How long the warm-up may take before it gives up and closes what it
 * opened (it takes tens of milliseconds): a step left hanging, by a runtime or a bug,
 * must not hold its sockets, rings and simulated memory for the life of
 * the process.
 */
const TIME_LIMIT_MS = 10_000;

/**
 * After it gave way to real work, how long it waits before it closes what it
 * opened (closing takes this thread too): past the real first message, in
 * the usual case, and short enough not to hold its rings and simulated
 * memory for long. An unref'd timer: it keeps no process alive.
 */
export const CLOSE_DELAY_MS = 50;

/** Its steps, in order: each ends at a point where it may stop. */
export type WarmUpStep = 'simulator' | 'transport-0' | 'transport-1' | 'attached' | 'eager' | 'negotiated' | 'rget';

/** What one warm-up did. */
export interface WarmUpReport {
  /**
   * 'done': both messages moved; 'yielded': real work started while it ran,
   * and it stopped after its last step in `steps`; 'skipped': real work had
   * started before it began, so it did not; 'failed': a step failed, or it
   * ran out of time (`error` says which).
   */
  outcome: 'done' | 'yielded' | 'skipped' | 'failed';
  /** The steps it finished, in order: how far it got. */
  steps: WarmUpStep[];
  /** What it moved, by path (the receiving side's count). */
  paths: WarmUpPaths;
  /** Why it failed (outcome 'failed'). */
  error?: string;
  /**
   * Resolves once everything it opened is closed (never rejects): already
   * when the report comes, unless real work had started by then; then
   * CLOSE_DELAY_MS later.
   */
  closed: Promise<void>;
}

let warmed: Promise<WarmUpReport> | undefined;

/**
 * Runs the warm-up once per process; resolves with what it did (never
 * rejects: a failed warm-up costs only speed). `create` is Transport.create
 * (passed in: this module sits beside it).
 */
export function warmDataPath(create: Create): Promise<WarmUpReport> {
  warmed ??= runWarmUp(create);
  return warmed;
}

/** What it opened, closed in this order: transports, channels, drivers. */
interface Opened {
  drivers: SimulatedCudaDriver[];
  transports: Transport[];
  channels: Array<{ close(): void }>;
}

/** Thrown at a step boundary once real work started. */
class Yielded extends Error {}

/** One warm-up (warmDataPath runs it once per process); `limitMs` for tests. */
export async function runWarmUp(create: Create, limitMs = TIME_LIMIT_MS): Promise<WarmUpReport> {
  if (isYielding()) {
    debug('data-path warm-up: not started: real work came first (%s)', realWork());
    return { outcome: 'skipped', steps: [], paths: {}, closed: Promise.resolve() };
  }
  // Its transports ('warm-up-0', 'warm-up-1', on simulated drivers) log like any other: say what they are.
  debug('data-path warm-up: two in-memory transports on simulated drivers run the data path once');
  const t0 = performance.now();
  const opened: Opened = { drivers: [], transports: [], channels: [] };
  const report: Omit<WarmUpReport, 'outcome' | 'closed'> = { steps: [], paths: {} };
  let outcome: WarmUpReport['outcome'];
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`not done within ${limitMs} ms`)), limitMs);
    timer.unref();
  });
  try {
    await Promise.race([exchange(create, opened, report), expired]);
    outcome = 'done';
    debug('data-path warm-up done in %d ms', Math.round(performance.now() - t0));
  } catch (err) {
    if (err instanceof Yielded) {
      outcome = 'yielded';
      debug(
        'data-path warm-up yielded to real work (%s) after %d ms, having done %s (moved %j); it closes what it opened in %d ms',
        realWork(),
        Math.round(performance.now() - t0),
        report.steps.join(', ') || 'nothing',
        report.paths,
        CLOSE_DELAY_MS,
      );
    } else {
      outcome = 'failed';
      report.error = err instanceof Error ? err.message : String(err);
      debug('data-path warm-up failed: %s', report.error);
    }
  } finally {
    clearTimeout(timer);
  }
  // Closing the transports fails whatever step was still waiting (one that hung). Once real work runs, closing waits.
  if (!isYielding()) {
    await closeAll(opened);
    return { ...report, outcome, closed: Promise.resolve() };
  }
  return { ...report, outcome, closed: closeLater(opened) };
}

/** What started real work, for the debug log. */
function realWork(): string {
  const w = firstRealWork();
  return w ? `endpoint to ${w.peerId}: ${w.what}` : 'unknown';
}

async function closeAll(o: Opened): Promise<void> {
  for (const t of o.transports) await t.close().catch(() => {});
  for (const c of o.channels) c.close(); // closed already, unless a step before the endpoints hung
  for (const d of o.drivers) d.close();
}

/** closeAll, CLOSE_DELAY_MS from now, off the real work's way. */
function closeLater(o: Opened): Promise<void> {
  return new Promise<void>((resolve) => {
    const close = () =>
      closeAll(o)
        .catch((err: unknown) => debug('data-path warm-up: closing failed: %s', err instanceof Error ? err.message : String(err)))
        .then(() => {
          debug('data-path warm-up: closed what it opened');
          resolve();
        });
    setTimeout(close, CLOSE_DELAY_MS).unref();
  });
}

/**
 * Simulated drivers and two transports on them (each pushed to `opened` as
 * made), one message by EAGER, the negotiation, one by RGET; the steps done
 * and what moved go to `report`. Between steps, it stops (Yielded) once
 * real work started.
 */
async function exchange(create: Create, opened: Opened, report: Omit<WarmUpReport, 'outcome' | 'closed'>): Promise<void> {
  const done = (step: WarmUpStep) => {
    report.steps.push(step);
    if (isYielding()) throw new Yielded(step);
  };
  const { SimulatedCudaDriver } = await import('./cuda/sim-driver.js');
  // The user's SMCUDA_SIM settings describe their simulated world, not this one.
  for (let i = 0; i < 2; i++) {
    const driver = new SimulatedCudaDriver({ env: {} });
    markWarmUpDriver(driver); // its endpoints are no real work
    opened.drivers.push(driver);
  }
  done('simulator');
  const token = randomBytes(16).toString('hex');
  // trace '': never into the application's $SMCUDA_TRACE file.
  for (const [i, driver] of opened.drivers.entries()) {
    opened.transports.push(await create({ driver, device: i, id: `warm-up-${i}`, token, trace: '', warmUp: false }));
    done(i === 0 ? 'transport-0' : 'transport-1');
  }
  const [a, b] = opened.transports as [Transport, Transport];
  const [ca, cb] = createMemoryChannelPair({ names: ['warm-up-0', 'warm-up-1'] });
  const [fa, fb] = FdChannel.pair();
  opened.channels.push(ca, cb, fa, fb);
  const [ea, eb] = await Promise.all([a.attach(ca, { descriptors: fa }), b.attach(cb, { descriptors: fb })]);
  done('attached');
  const [d0, d1] = opened.drivers as [SimulatedCudaDriver, SimulatedCudaDriver];
  const src: DeviceBuffer = { ptr: d0.memAlloc(BYTES), length: BYTES };
  const dst: DeviceBuffer = { ptr: d1.memAlloc(BYTES), length: BYTES };
  const paths = report.paths;
  const move = async (tag: number) => {
    const [, got] = await Promise.all([ea.send(src, { tag }), eb.recv({ tag, into: dst })]);
    paths[got.path] = (paths[got.path] ?? 0) + 1;
  };
  await move(1); // EAGER: the endpoint is not OK yet
  done('eager');
  if ((await ea.negotiate()) !== 'OK') throw new Error(`the warm-up's negotiation ended ${ea.state}`);
  done('negotiated');
  await move(2); // RGET
  report.steps.push('rget');
}
