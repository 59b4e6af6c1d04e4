/**
 * One rank of `smcuda demo`, forked by demo.ts. It creates a Transport on its
 * own device, listens on its socket, connects to every lower rank, then runs
 * the phases the parent orders, verifying every message it receives.
 *
 * Parent ⇄ worker messages (process.send):
 *   worker → parent: listening | connected | phase-done | report | failed
 *   parent → worker: connect | phase | finish (report your stats) | exit (close)
 * The worker exits when the parent goes away (IPC 'disconnect').
 */
import { join } from 'node:path';
import { parentLink, workerConfig } from './parent-link.js';
import type { CudaDriver } from '../cuda/driver.js';
import { allocDemoMemory, type DemoBuffer, type DemoMemory, type MemoryOption } from './demo-memory.js';
import { openDriver } from '../cuda/open-driver.js';
import type { Endpoint } from '../endpoint.js';
import { Transport } from '../transport.js';
import { currentRuntime } from './runtimes.js';
import { checkPattern, fillPattern, seedOf } from './demo-pattern.js';

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

type ParentMessage = { type: 'connect' } | { type: 'phase'; phase: Phase; sizeIndex: number } | { type: 'finish' } | { type: 'exit' };

const config = workerConfig<WorkerConfig>('SMCUDA_DEMO', 'smcuda demo');
const { next, tell, release } = parentLink<ParentMessage>();

async function main(cfg: WorkerConfig): Promise<void> {
  const { driver, reason } = await openDriver({ driver: cfg.driver });
  driver.init();
  const device = cfg.rank % driver.deviceCount();
  const t = await Transport.create({
    driver,
    id: `rank${cfg.rank}`,
    device,
    token: cfg.token,
    negotiation: { ipc: cfg.ipc },
    ...(cfg.trace ? { trace: cfg.trace } : {}),
  });
  const info = driver.deviceInfo(device);
  const peers = new Map<number, Endpoint>();
  const expected = cfg.ranks - 1;
  const allConnected = new Promise<void>((resolve) => {
    const add = (ep: Endpoint) => {
      peers.set(Number(ep.peerId.replace('rank', '')), ep);
      if (peers.size === expected) resolve();
    };
    t.on('endpoint', add);
    if (expected === 0) resolve();
  });
  await t.listen(join(cfg.dir, `rank${cfg.rank}.sock`));
  tell({ type: 'listening', rank: cfg.rank, runtime: currentRuntime(), driver: driver.kind, reason, device: { index: device, name: info.name, uuid: info.uuid } });

  const m = await next();
  if (m.type !== 'connect') throw new Error(`expected connect, got ${m.type}`);
  for (let r = 0; r < cfg.rank; r++) await t.connect(join(cfg.dir, `rank${r}.sock`));
  await allConnected;
  tell({ type: 'connected', rank: cfg.rank });

  const maxSize = Math.max(0, ...cfg.sizes);
  const memory = allocDemoMemory(driver, cfg.memory);
  const buffers = allocBuffers(memory, cfg.ranks, cfg.rank, maxSize);
  tell({ type: 'memory', rank: cfg.rank, memory: { rank: cfg.rank, ...memory.describe([...buffers.send.values()][0], maxSize) } });
  const host = new Uint8Array(maxSize);
  const scratch = new Uint8Array(maxSize);
  try {
    for (;;) {
      const msg = await next();
      if (msg.type === 'finish') break;
      if (msg.type !== 'phase') continue;
      const result = await runPhase(cfg, driver, peers, buffers, host, scratch, msg.phase, msg.sizeIndex);
      tell({ type: 'phase-done', rank: cfg.rank, result });
    }
    const endpoints = [...peers.entries()]
      .sort((a, b) => a[0] - b[0])
      .map(([peer, ep]) => ({ rank: cfg.rank, peer, ...ep.stats() }));
    tell({ type: 'report', rank: cfg.rank, endpoints });
    // Close only once every rank has reported: a peer closing first would turn our endpoints BAD.
    while ((await next()).type !== 'exit');
  } finally {
    await t.close();
    memory.freeAll();
    driver.close();
  }
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
  driver: CudaDriver,
  peers: Map<number, Endpoint>,
  buffers: Buffers,
  host: Uint8Array,
  scratch: Uint8Array,
  phase: Phase,
  sizeIndex: number,
): Promise<PhaseResult> {
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
    if (size > 0) driver.streamSynchronize(0n);
    await barrier(peers);
    const start = performance.now();
    const recvs = sources.map((src) => peers.get(src)!.recv({ tag, into: buffers.recv.get(src)!.view(size) }).then((r) => ({ src, r })));
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

main(config).then(
  () => {
    release();
  },
  (err: Error & { code?: string; call?: string }) => {
    // An endpoint without the descriptor data path exports every GPU send by cuIpcGetMemHandle,
    // which VMM and pool memory refuse: say so, and what works meanwhile.
    const hint =
      config.memory !== 'legacy' && err.call === 'cuIpcGetMemHandle'
        ? ` (sending ${config.memory} memory: this endpoint cannot export it for RGET; --ipc off moves it by staging)`
        : '';
    tell({ type: 'failed', rank: config.rank, message: `${err.code ? `[${err.code}] ` : ''}${err.message}${hint}`, stack: err.stack });
    setTimeout(() => process.exit(1), 100);
  },
);
