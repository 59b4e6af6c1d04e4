/**
 * One rank of `smcuda demo`, started by demo.ts under node, bun or deno. It
 * creates a Transport on its own device, listens on its socket, connects to
 * every lower rank, then runs the phases the parent orders, verifying every
 * message it receives.
 *
 * It speaks the worker protocol (worker-protocol.ts), one request at a time:
 *   ready (listening: rank, runtime, driver, device)
 *   → `connect` (to every lower rank, until every peer is there; answers its MemoryReport)
 *   → `phase` { phase, sizeIndex } (answers its PhaseResult), once per phase and size
 *   → `graph` { replays, size } instead of the phases (`smcuda demo --graph`):
 *     registers a buffer pair with every peer, makes a persistent transfer
 *     each way, captures every one of them in one CUDA graph, replays it
 *     (answers its GraphResult)
 *   → `report` (answers its endpoints' stats)
 *   → `exit` (closes the transport, frees its memory; the parent sends it only
 *     once every rank has reported, since a peer closing first would turn our
 *     endpoints BAD).
 * It exits when the parent goes away (its IPC channel closes: even a
 * SIGKILLed parent), closing its transport; the last rank to go removes the
 * job's socket folder, which the parent can no longer do.
 */
import { rmdirSync, unlinkSync } from 'node:fs';
import { join } from 'node:path';
import { allocDemoMemory, type DemoBuffer, type DemoMemory, type MemoryOption } from './demo-memory.js';
import { openDriver } from '../cuda/open-driver.js';
import type { Endpoint } from '../endpoint.js';
import { LAUNCH_BURST } from '../bench/graph-replays.js';
import { median } from '../bench/stats.js';
import { startGroup } from '../persistent/transfers.js';
import type { GpuRuntime } from '../gpu/gpu-runtime.js';
import { Transport } from '../transport.js';
import { currentRuntime } from './runtimes.js';
import { checkPattern, fillPattern, GRAPH_SAMPLED_REPLAYS, seedOf } from './demo-pattern.js';
import { serveRequests, WorkerFailedError, workerConfig } from './worker-protocol.js';

export interface WorkerConfig {
  rank: number;
  ranks: number;
  dir: string;
  sizes: number[];
  iters: number;
  driver: 'auto' | 'native' | 'sim';
  ipc: boolean;
  /** How the send and receive buffers are allocated (demo-memory.ts). */
  memory: MemoryOption;
  token: string;
  trace?: string;
}

export type Phase = 'ring' | 'alltoall';

export interface PhaseResult {
  phase: Phase;
  size: number;
  /** Seconds spent in send/recv (fill and verify excluded). */
  seconds: number;
  bytesReceived: number;
  messages: number;
  mismatches: string[];
}

/** One rank's part of `smcuda demo --graph`. */
export interface GraphResult {
  rank: number;
  /** The transfers were captured into one graph. */
  captured: boolean;
  /** Replays launched back to back, then the sampled replays (each with fresh data, checked). */
  replays: number;
  sampled: number;
  /** Host time to launch one replay of the graph (median launch call, in bursts), µs. */
  hostUsPerReplay: number;
  /** Wall time of the replays in bursts, until the stream finished them (s). */
  seconds: number;
  transfers: number;
  mismatches: string[];
}

/** What the rank's buffers are, as the driver sees them: for the report's memory section. */
export interface MemoryReport {
  rank: number;
  /** driver.memoryKind of a send buffer: how it could be shared. */
  kind: string;
  /** Why it cannot be shared, where kind is 'other'. */
  reason?: string;
  /** vmm-chunked: the chunk size, and how many chunks the largest message touches. */
  chunkSize?: number;
  chunksTouched?: number;
}

/** What a rank says with 'ready': it is listening. */
export interface DemoWorkerReady {
  rank: number;
  runtime: string;
  driver: string;
  reason: string;
  device: { index: number; name: string; uuid: string };
}

const config = workerConfig<WorkerConfig>('SMCUDA_DEMO', 'smcuda demo');

interface Commands {
  connect(): Promise<MemoryReport>;
  phase(args: { phase: Phase; sizeIndex: number }): Promise<PhaseResult>;
  graph(args: { replays: number; size: number; flags?: 'memops' | 'kernel' }): Promise<GraphResult>;
  report(): DemoReportEndpoint[];
}
export type DemoReportEndpoint = Record<string, unknown> & { rank: number; peer: number };

let commands: Commands | undefined;
let cleanUp: (() => Promise<void>) | undefined;
/** This rank's control socket and its job folder, once listening (for the forced exit of an orphaned rank). */
let listening: { socket: string; dir: string } | undefined;
// Requests wait for 'ready', so `commands` is set whenever one runs.
const link = serveRequests(
  (cmd, args) => {
    const run = commands![cmd as keyof Commands] as ((args: unknown) => unknown) | undefined;
    if (!run) throw new WorkerFailedError(`unknown command ${JSON.stringify(cmd)}: a demo rank takes connect, phase, report, exit`);
    return run(args);
  },
  {
    sequential: true,
    onExit: () => cleanUp?.(),
    // An orphaned rank whose transport did not close in time still takes its sockets with it, and the
    // last rank the folder: a SIGKILLed parent leaves nothing behind (issue 23, finding 17).
    onForcedExit: () => {
      if (!listening) return;
      for (const path of [listening.socket, `${listening.socket}.fd`]) {
        try {
          unlinkSync(path);
        } catch {
          // removed by the close already, or never made
        }
      }
      removeIfEmpty(listening.dir);
    },
  },
);

async function start(cfg: WorkerConfig): Promise<DemoWorkerReady> {
  const { driver, reason } = await openDriver({ driver: cfg.driver });
  driver.init();
  let t: Transport | undefined;
  let memory: DemoMemory | undefined;
  // Once, whoever asks first (an exit, the parent's death, a failed start): the others wait for the same end.
  let closing: Promise<void> | undefined;
  cleanUp = () =>
    (closing ??= (async () => {
      await t?.close();
      memory?.freeAll();
      driver.close();
      removeIfEmpty(cfg.dir);
    })());
  const device = cfg.rank % driver.deviceCount();
  const transport = (t = await Transport.create({
    driver,
    id: `rank${cfg.rank}`,
    device,
    token: cfg.token,
    negotiation: { ipc: cfg.ipc },
    ...(cfg.trace ? { trace: cfg.trace } : {}),
  }));
  const info = driver.deviceInfo(device);
  const peers = new Map<number, Endpoint>();
  const expected = cfg.ranks - 1;
  const allConnected = new Promise<void>((resolve) => {
    transport.on('endpoint', (ep: Endpoint) => {
      peers.set(Number(ep.peerId.replace('rank', '')), ep);
      if (peers.size === expected) resolve();
    });
    if (expected === 0) resolve();
  });
  await transport.listen(join(cfg.dir, `rank${cfg.rank}.sock`));
  listening = { socket: join(cfg.dir, `rank${cfg.rank}.sock`), dir: cfg.dir };

  const maxSize = Math.max(0, ...cfg.sizes);
  let buffers: Buffers | undefined;
  const host = new Uint8Array(maxSize);
  const scratch = new Uint8Array(maxSize);
  commands = {
    async connect() {
      for (let r = 0; r < cfg.rank; r++) await transport.connect(join(cfg.dir, `rank${r}.sock`));
      await allConnected;
      memory = allocDemoMemory(driver, cfg.memory, transport.gpu);
      buffers = allocBuffers(memory, cfg.ranks, cfg.rank, maxSize);
      return { rank: cfg.rank, ...memory.describe([...buffers.send.values()][0], maxSize) };
    },
    async phase({ phase, sizeIndex }) {
      if (!buffers) throw new WorkerFailedError('phase before connect: the parent sends connect first');
      try {
        return await runPhase(cfg, transport.gpu, peers, buffers, host, scratch, phase, sizeIndex);
      } catch (err) {
        throw withHint(err, cfg.memory);
      }
    },
    async graph({ replays, size, flags }) {
      if (!buffers) throw new WorkerFailedError('graph before connect: the parent sends connect first');
      return runGraph(cfg, transport.gpu, peers, buffers, host, scratch, replays, size, flags ?? 'memops');
    },
    report() {
      return [...peers.entries()].sort((a, b) => a[0] - b[0]).map(([peer, ep]) => ({ rank: cfg.rank, peer, ...ep.stats() }));
    },
  };
  return { rank: cfg.rank, runtime: currentRuntime(), driver: driver.kind, reason, device: { index: device, name: info.name, uuid: info.uuid } };
}

/**
 * The job's socket folder, once no rank's socket is left in it: each rank
 * tries after closing its transport (which removes its own sockets), so the
 * last one to leave removes it, whether the parent ended the demo or died.
 * rmdir removes only an empty folder: nothing else is ever deleted.
 */
function removeIfEmpty(dir: string): void {
  try {
    rmdirSync(dir);
  } catch {
    // other ranks' sockets are still there (the last rank removes it), or it is gone already
  }
}

/**
 * An endpoint without the descriptor data path exports every GPU send by
 * cuIpcGetMemHandle, which VMM and pool memory refuse: the error says so, and
 * what works meanwhile (its code stays the driver's).
 */
function withHint(err: unknown, memory: MemoryOption): unknown {
  const e = err as Error & { call?: string };
  if (memory !== 'legacy' && e?.call === 'cuIpcGetMemHandle') {
    e.message += ` (sending ${memory} memory: this endpoint cannot export it for RGET; --ipc off moves it by staging)`;
  }
  return err;
}

interface Buffers {
  send: Map<number, DemoBuffer>;
  recv: Map<number, DemoBuffer>;
}

/** One send and one receive buffer per peer, each for messages up to the largest size. */
function allocBuffers(memory: DemoMemory, ranks: number, rank: number, size: number): Buffers {
  const send = new Map<number, DemoBuffer>();
  const recv = new Map<number, DemoBuffer>();
  for (let r = 0; r < ranks; r++) {
    if (r === rank) continue;
    send.set(r, memory.alloc(size));
    recv.set(r, memory.alloc(size));
  }
  return { send, recv };
}

async function runPhase(
  cfg: WorkerConfig,
  gpu: GpuRuntime,
  peers: Map<number, Endpoint>,
  buffers: Buffers,
  host: Uint8Array,
  scratch: Uint8Array,
  phase: Phase,
  sizeIndex: number,
): Promise<PhaseResult> {
  const driver = gpu.driver;
  const size = cfg.sizes[sizeIndex]!;
  const phaseNo = phase === 'ring' ? 1 : 2;
  const n = cfg.ranks;
  const targets = phase === 'ring' ? [(cfg.rank + 1) % n] : [...peers.keys()];
  const sources = phase === 'ring' ? [(cfg.rank - 1 + n) % n] : [...peers.keys()];
  const tag = phaseNo * 1000 + sizeIndex;
  const result: PhaseResult = { phase, size, seconds: 0, bytesReceived: 0, messages: 0, mismatches: [] };
  for (let iter = 0; iter < cfg.iters; iter++) {
    for (const dst of targets) {
      if (size === 0) continue;
      const view = host.subarray(0, size);
      fillPattern(view, seedOf(phaseNo, sizeIndex, iter, cfg.rank, dst));
      driver.memcpyHtoD(buffers.send.get(dst)!.view(size).ptr, view);
    }
    // cuMemcpyHtoD from pageable memory may return before the bytes reach the
    // device; a send without a stream promises they are there, so wait for the
    // default stream (found on 2×H200: a peer read the previous iteration's bytes).
    if (size > 0) gpu.synchronize(0n);
    await barrier(peers);
    const start = performance.now();
    const recvs = sources.map((src) =>
      peers
        .get(src)!
        .recv({ tag, into: buffers.recv.get(src)!.view(size) })
        .then((r) => ({ src, r })),
    );
    const sends = targets.map((dst) => peers.get(dst)!.send(buffers.send.get(dst)!.view(size), { tag }));
    const [received] = await Promise.all([Promise.all(recvs), Promise.all(sends)]);
    result.seconds += (performance.now() - start) / 1000;
    for (const { src, r } of received) {
      result.messages++;
      result.bytesReceived += r.length;
      if (r.length !== size) {
        result.mismatches.push(`${phase} ${size} B iter ${iter} from rank${src}: got ${r.length} bytes`);
        continue;
      }
      if (size === 0) continue;
      const got = host.subarray(0, size);
      driver.memcpyDtoH(got, buffers.recv.get(src)!.view(size).ptr);
      const bad = checkPattern(got, seedOf(phaseNo, sizeIndex, iter, src, cfg.rank), scratch);
      if (bad >= 0) result.mismatches.push(`${phase} ${size} B iter ${iter} from rank${src}: byte ${bad} differs`);
    }
  }
  return result;
}

/**
 * `--graph`: with every peer, two registrations (each pairs one side's
 * source with the other's destination: the lower rank registers its send
 * buffer first, the higher its receive buffer) and a persistent transfer
 * each way; all of them captured in one graph (startGroup), replayed
 * `replays` times in bursts of LAUNCH_BURST — host time per replay is the
 * median launch call — then GRAPH_SAMPLED_REPLAYS more, each with fresh
 * data, every byte checked.
 */
async function runGraph(
  cfg: WorkerConfig,
  gpu: GpuRuntime,
  peers: Map<number, Endpoint>,
  buffers: Buffers,
  host: Uint8Array,
  scratch: Uint8Array,
  replays: number,
  size: number,
  flags: 'memops' | 'kernel',
): Promise<GraphResult> {
  const driver = gpu.driver;
  const me = cfg.rank;
  const order = [...peers.keys()].sort((a, b) => a - b);
  const made = await Promise.all(
    order.map(async (peer) => {
      const ep = peers.get(peer)!;
      const low = me < peer;
      const send = buffers.send.get(peer)!.view(size);
      const recv = buffers.recv.get(peer)!.view(size);
      const first = await ep.register(low ? send : recv);
      const second = await ep.register(low ? recv : send);
      const t1 = await ep.persistent(first, { role: low ? 'send' : 'recv', length: size, flags });
      const t2 = await ep.persistent(second, { role: low ? 'recv' : 'send', length: size, flags });
      return { peer, ep, regs: [first, second], transfers: [t1, t2] };
    }),
  );
  const all = made.flatMap((m) => m.transfers);
  const fill = (iter: number) => {
    for (const peer of order) {
      const view = host.subarray(0, size);
      fillPattern(view, seedOf(3, 0, iter, me, peer));
      driver.memcpyHtoD(buffers.send.get(peer)!.view(size).ptr, view);
    }
    gpu.synchronize(0n);
  };
  const check = (iter: number, mismatches: string[]) => {
    for (const peer of order) {
      const got = host.subarray(0, size);
      driver.memcpyDtoH(got, buffers.recv.get(peer)!.view(size).ptr);
      const bad = checkPattern(got, seedOf(3, 0, iter, peer, me), scratch);
      if (bad >= 0) mismatches.push(`graph replay ${iter} from rank${peer}: byte ${bad} differs`);
    }
  };
  const stream = driver.streamCreate();
  const capture = driver.streamCreate();
  const settle = () => gpu.completed(stream);
  const mismatches: string[] = [];
  let hostUs = 0;
  let seconds = 0;
  try {
    driver.streamBeginCapture(capture);
    startGroup(capture, all);
    const graph = driver.streamEndCapture(capture);
    const exec = driver.graphInstantiate(graph);
    try {
      fill(0);
      await barrier(peers);
      // In bursts, the host waiting for each: the launch call's own time is the host work of a replay.
      // Back to back, launches outrun the GPU, fill the stream's queue and then block on it, and their
      // time is the GPU's per replay (what was first reported here for 2 transfers); bench/graph-replays.ts.
      const launchUs: number[] = [];
      const t0 = performance.now();
      for (let k = 0; k < replays; k += LAUNCH_BURST) {
        for (let j = k; j < Math.min(replays, k + LAUNCH_BURST); j++) {
          const l0 = process.hrtime.bigint();
          driver.graphLaunch(exec, stream);
          launchUs.push(Number(process.hrtime.bigint() - l0) / 1000);
        }
        await settle();
      }
      seconds = (performance.now() - t0) / 1000;
      hostUs = median(launchUs);
      check(0, mismatches);
      for (let iter = 1; iter <= GRAPH_SAMPLED_REPLAYS; iter++) {
        await barrier(peers); // every rank checked the previous replay before any overwrites its source
        fill(iter);
        driver.graphLaunch(exec, stream);
        await settle();
        check(iter, mismatches);
      }
      for (const t of all) t.check();
    } finally {
      driver.graphExecDestroy(exec);
      driver.graphDestroy(graph);
    }
    await barrier(peers);
    await Promise.all(all.map((t) => t.close()));
    await Promise.all(made.flatMap((m) => m.regs.map((r) => r.deregister())));
  } finally {
    driver.streamDestroy(capture);
    driver.streamDestroy(stream);
  }
  return {
    rank: me,
    captured: true,
    replays: replays + GRAPH_SAMPLED_REPLAYS,
    sampled: GRAPH_SAMPLED_REPLAYS,
    hostUsPerReplay: hostUs,
    seconds,
    transfers: all.length,
    mismatches,
  };
}

/** Tag reserved for the demo's barrier (outside the phases' tags). */
const BARRIER_TAG = 0xffff_ff00;
const EMPTY = new Uint8Array(0);

/**
 * Every rank fills its buffers at its own pace; a barrier through the
 * transport itself (an empty host message to and from every peer) keeps that
 * out of the timed exchange.
 */
async function barrier(peers: Map<number, Endpoint>): Promise<void> {
  const eps = [...peers.values()];
  await Promise.all([...eps.map((ep) => ep.send(EMPTY, { tag: BARRIER_TAG })), ...eps.map((ep) => ep.recv({ tag: BARRIER_TAG }))]);
}

start(config).then(
  (ready) => link.ready(ready),
  async (err: unknown) => {
    await cleanUp?.().catch(() => {}); // the start failure is the error to report
    link.startFailed(err);
  },
);
