/**
 * One rank of `smcuda soak`, forked by soak.ts. It connects to every other
 * rank, then, with each peer independently, runs rounds of SOAK_WINDOW
 * messages in each direction (soak-plan.ts) until the planned count is sent
 * and received, checking every byte. It measures itself (RSS, open mappings,
 * file descriptors) before, after, and after closing.
 *
 * It speaks the worker protocol (worker-protocol.ts): ready (listening, with
 * its driver) → `connect` (to every rank) → `run` (reporting 'progress'
 * events; answers once its own messages are done) → `close` (once every rank
 * is done: closes, answers its report) → `exit`. It exits when the parent
 * goes away.
 */
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import type { DeviceBuffer } from '../buffers.js';
import type { CudaDriver } from '../cuda/driver.js';
import { openDriver } from '../cuda/open-driver.js';
import type { Endpoint } from '../endpoint.js';
import { Transport } from '../transport.js';
import { checkPattern, fillPattern } from './demo-pattern.js';
import { parseSegmentName } from '../segment-owner.js';
import { serveRequests, workerConfig } from './worker-protocol.js';
import { pairCount, planRound, roundCount, SOAK_ARENA_BYTES, SOAK_HOST_MAX, SOAK_WINDOW } from './soak-plan.js';

export interface SoakWorkerConfig {
  rank: number;
  ranks: number;
  dir: string;
  count: number;
  driver: 'auto' | 'native' | 'sim';
  token: string;
}

export interface SoakSnapshot {
  rssBytes: number;
  /** V8 heap in use after a full GC (RSS alone also counts heap the GC has not handed back). */
  heapUsedBytes: number;
  openMappings: number;
  fds: number;
  /** Entries in /dev/shm this process owns (control and staging rings, simulated device memory: src/segment-owner.ts). */
  shmSegments: number;
}

export interface SoakRankReport {
  rank: number;
  sent: number;
  received: number;
  bytesReceived: number;
  byKind: Record<string, number>;
  seconds: number;
  start: SoakSnapshot;
  end: SoakSnapshot;
  closed: SoakSnapshot;
  mismatches: string[];
}

const DATA_TAG = 7;
const PROGRESS_MS = 2000;

const config = workerConfig<SoakWorkerConfig>('SMCUDA_SOAK', 'smcuda soak');

function snapshot(endpoints: Iterable<Endpoint>): SoakSnapshot {
  let openMappings = 0;
  for (const ep of endpoints) openMappings += ep.stats().cache.openMappings;
  (globalThis as { gc?: () => void }).gc?.(); // soak.ts starts workers with --expose-gc
  const mem = process.memoryUsage();
  return { rssBytes: mem.rss, heapUsedBytes: mem.heapUsed, openMappings, fds: readdirSync('/proc/self/fd').length, shmSegments: ownSegments() };
}

function ownSegments(): number {
  let n = 0;
  for (const name of readdirSync('/dev/shm')) if (parseSegmentName(name)?.owner.pid === process.pid) n++;
  return n;
}

interface Tally {
  sent: number;
  received: number;
  bytesReceived: number;
  byKind: Record<string, number>;
  mismatches: string[];
}

/** Every round with one peer: this side's sends and the peer's messages, then verification. */
async function pairLoop(cfg: SoakWorkerConfig, driver: CudaDriver, peer: number, ep: Endpoint, tally: Tally): Promise<void> {
  const nOut = pairCount(cfg.count, cfg.ranks, cfg.rank, peer);
  const nIn = pairCount(cfg.count, cfg.ranks, peer, cfg.rank);
  const rounds = roundCount(nOut, nIn);
  const sendArena = driver.memAlloc(SOAK_ARENA_BYTES);
  const recvArena = driver.memAlloc(SOAK_ARENA_BYTES);
  const hostIn = new Uint8Array(SOAK_WINDOW * SOAK_HOST_MAX);
  const staging = new Uint8Array(SOAK_ARENA_BYTES);
  const scratch = new Uint8Array(SOAK_ARENA_BYTES);
  try {
    for (let round = 0; round < rounds; round++) {
      const outgoing = planRound(cfg.rank, peer, round, nOut);
      const incoming = planRound(peer, cfg.rank, round, nIn);
      const recvs = incoming.map((m, k) => {
        const into =
          m.kind === 'host'
            ? hostIn.subarray(k * SOAK_HOST_MAX, k * SOAK_HOST_MAX + m.size)
            : ({ ptr: recvArena + BigInt(m.offset), length: m.size } as DeviceBuffer);
        return ep.recv({ tag: DATA_TAG, into });
      });
      const sends = outgoing.map((m) => {
        if (m.kind === 'host') {
          const bytes = new Uint8Array(m.size);
          fillPattern(bytes, m.seed);
          return ep.send(bytes, { tag: DATA_TAG });
        }
        const view = staging.subarray(m.offset, m.offset + m.size);
        fillPattern(view, m.seed);
        // Pageable: the copy may still be in flight when this returns. The send
        // (no stream) is ordered after the legacy default stream, so the peer
        // gets these bytes: that default is what this soak checks.
        driver.memcpyHtoD(sendArena + BigInt(m.offset), view);
        return ep.send({ ptr: sendArena + BigInt(m.offset), length: m.size }, { tag: DATA_TAG });
      });
      const [got] = await Promise.all([Promise.all(recvs), Promise.all(sends)]);
      tally.sent += outgoing.length;
      for (const [k, m] of incoming.entries()) {
        const r = got[k]!;
        tally.received++;
        tally.bytesReceived += r.length;
        tally.byKind[`${m.kind}/${r.path}`] = (tally.byKind[`${m.kind}/${r.path}`] ?? 0) + 1;
        if (r.length !== m.size) {
          tally.mismatches.push(`message ${m.index} from rank${peer}: ${r.length} bytes, expected ${m.size}`);
          continue;
        }
        let bytes: Uint8Array;
        if (m.kind === 'host') bytes = hostIn.subarray(k * SOAK_HOST_MAX, k * SOAK_HOST_MAX + m.size);
        else {
          bytes = staging.subarray(0, m.size);
          if (m.size > 0) driver.memcpyDtoH(bytes, recvArena + BigInt(m.offset));
        }
        const bad = checkPattern(bytes, m.seed, scratch);
        if (bad >= 0 && tally.mismatches.length < 100)
          tally.mismatches.push(`message ${m.index} (${m.kind}, ${m.size} B) from rank${peer}: byte ${bad} differs`);
      }
    }
  } finally {
    driver.memFree(sendArena);
    driver.memFree(recvArena);
  }
}

/** What a rank says when it is listening. */
export interface SoakWorkerReady {
  rank: number;
  driver: string;
}

type Commands = Record<'connect' | 'run' | 'close', (args: unknown) => Promise<unknown>>;

let commands: Commands | undefined;
let closeAll: (() => Promise<void>) | undefined;
// Requests wait for 'ready', so `commands` is set whenever one runs.
const link = serveRequests(
  (cmd, args) => {
    const run = commands![cmd as keyof Commands];
    if (!run) throw new Error(`unknown command ${JSON.stringify(cmd)}: a soak rank takes connect, run, close, exit`);
    return run(args);
  },
  { onExit: () => closeAll?.() },
);

async function start(cfg: SoakWorkerConfig): Promise<SoakWorkerReady> {
  const { driver } = await openDriver({ driver: cfg.driver });
  driver.init();
  const device = cfg.rank % driver.deviceCount();
  const t = await Transport.create({ driver, id: `rank${cfg.rank}`, device, token: cfg.token });
  const peers = new Map<number, Endpoint>();
  const allConnected = new Promise<void>((resolve) => {
    t.on('endpoint', (ep) => {
      peers.set(Number(ep.peerId.replace('rank', '')), ep);
      if (peers.size === cfg.ranks - 1) resolve();
    });
  });
  await t.listen(join(cfg.dir, `rank${cfg.rank}.sock`));

  const tally: Tally = { sent: 0, received: 0, bytesReceived: 0, byKind: {}, mismatches: [] };
  let ran: { seconds: number; start: SoakSnapshot; end: SoakSnapshot } | undefined;
  let transportClosed: Promise<void> | undefined;
  let driverClosed = false;
  const closeTransport = () => (transportClosed ??= t.close());
  const closeDriver = () => {
    if (!driverClosed) driver.close();
    driverClosed = true;
  };
  closeAll = async () => {
    await closeTransport();
    closeDriver();
  };
  commands = {
    async connect() {
      for (let r = 0; r < cfg.rank; r++) await t.connect(join(cfg.dir, `rank${r}.sock`));
      await allConnected;
    },
    async run() {
      const begin = snapshot(peers.values());
      const t0 = performance.now();
      const progress = setInterval(
        () => link.emit('progress', { rank: cfg.rank, received: tally.received, sent: tally.sent, seconds: (performance.now() - t0) / 1000 }),
        PROGRESS_MS,
      );
      try {
        await Promise.all([...peers.entries()].map(([peer, ep]) => pairLoop(cfg, driver, peer, ep, tally)));
      } finally {
        clearInterval(progress);
      }
      ran = { seconds: (performance.now() - t0) / 1000, start: begin, end: snapshot(peers.values()) };
    },
    // Only once every rank is done: a peer closing first would fail our receives.
    async close(): Promise<SoakRankReport> {
      if (!ran) throw new Error('close before run: nothing to report');
      await closeTransport();
      const after = snapshot(peers.values()); // closed endpoints: every mapping released
      closeDriver();
      return { rank: cfg.rank, ...tally, ...ran, closed: after };
    },
  };
  return { rank: cfg.rank, driver: driver.kind };
}

start(config).then(
  (ready) => link.ready(ready),
  (err: unknown) => link.startFailed(err),
);
