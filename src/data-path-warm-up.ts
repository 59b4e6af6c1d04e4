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
 * message's way. On 2xH200, fresh processes that connect right after
 * Transport.create (the warm-up runs meanwhile), 64 KiB from a fresh buffer,
 * median of 4 pairs each, same run: the first message arrived in well under
 * half the time after `ep.negotiate()`, and in about half without it (it
 * then goes by EAGER while the negotiation runs). The warm-up takes this
 * thread tens of milliseconds there, in the turns of promise
 * callbacks after Transport.create, while the application connects.
 * Transport.create starts it only for the native driver; `warmUp: false`
 * leaves it out. The simulator it runs on is imported when it runs (not by
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

let warmed: Promise<WarmUpPaths | undefined> | undefined;

/**
 * Runs the warm-up once per process; resolves with what it moved, or
 * undefined if it failed (never rejects: a failed warm-up costs only speed).
 * `create` is Transport.create (passed in: this module sits beside it).
 */
export function warmDataPath(create: Create): Promise<WarmUpPaths | undefined> {
  warmed ??= runWarmUp(create);
  return warmed;
}

/** One warm-up (warmDataPath runs it once per process); `limitMs` for tests. */
export async function runWarmUp(create: Create, limitMs = TIME_LIMIT_MS): Promise<WarmUpPaths | undefined> {
  // Its transports ('warm-up-0', 'warm-up-1', on simulated drivers) log like any other: say what they are.
  debug('data-path warm-up: two in-memory transports on simulated drivers run the data path once');
  const t0 = performance.now();
  try {
    const paths = await run(create, limitMs);
    debug('data-path warm-up done in %d ms', Math.round(performance.now() - t0));
    return paths;
  } catch (err) {
    debug('data-path warm-up failed: %s', err instanceof Error ? err.message : String(err));
    return undefined;
  }
}

async function run(create: Create, limitMs: number): Promise<WarmUpPaths> {
  const { SimulatedCudaDriver } = await import('./cuda/sim-driver.js');
  // The user's SMCUDA_SIM settings describe their simulated world, not this one.
  const drivers = [new SimulatedCudaDriver({ env: {} }), new SimulatedCudaDriver({ env: {} })] as const;
  const transports: Transport[] = [];
  const channels: Array<{ close(): void }> = [];
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`not done within ${limitMs} ms`)), limitMs);
    timer.unref();
  });
  try {
    return await Promise.race([exchange(create, drivers, transports, channels), expired]);
  } finally {
    clearTimeout(timer);
    // Closing the transports fails whatever step was still waiting.
    for (const t of transports) await t.close().catch(() => {});
    for (const c of channels) c.close(); // closed already, unless a step before the endpoints hung
    for (const d of drivers) d.close();
  }
}

/** Two transports on `drivers` (pushed to `transports`, their channels to `channels`, as made): one message by EAGER, the negotiation, one by RGET. */
async function exchange(
  create: Create,
  drivers: readonly [SimulatedCudaDriver, SimulatedCudaDriver],
  transports: Transport[],
  channels: Array<{ close(): void }>,
): Promise<WarmUpPaths> {
  const token = randomBytes(16).toString('hex');
  // trace '': never into the application's $SMCUDA_TRACE file.
  for (const [i, driver] of drivers.entries()) transports.push(await create({ driver, device: i, id: `warm-up-${i}`, token, trace: '', warmUp: false }));
  const [a, b] = transports as [Transport, Transport];
  const [ca, cb] = createMemoryChannelPair({ names: ['warm-up-0', 'warm-up-1'] });
  const [fa, fb] = FdChannel.pair();
  channels.push(ca, cb, fa, fb);
  const [ea, eb] = await Promise.all([a.attach(ca, { descriptors: fa }), b.attach(cb, { descriptors: fb })]);
  const src: DeviceBuffer = { ptr: drivers[0].memAlloc(BYTES), length: BYTES };
  const dst: DeviceBuffer = { ptr: drivers[1].memAlloc(BYTES), length: BYTES };
  const paths: WarmUpPaths = {};
  const move = async (tag: number) => {
    const [, got] = await Promise.all([ea.send(src, { tag }), eb.recv({ tag, into: dst })]);
    paths[got.path] = (paths[got.path] ?? 0) + 1;
  };
  await move(1); // EAGER: the endpoint is not OK yet
  if ((await ea.negotiate()) !== 'OK') throw new Error(`the warm-up's negotiation ended ${ea.state}`);
  await move(2); // RGET
  return paths;
}
