/**
 * One rank of the all-to-all suite: n worker processes (8 on 2 GPUs), each
 * with one Transport and an endpoint to every other rank. Rank r listens on
 * `a2a-r.sock` and connects to every rank below it; endpoints are told apart
 * by the peer's transport id (`bench-a2a-rank<k>`).
 *
 * A round: every rank posts a receive from each peer into its own slice,
 * sends its buffer to each peer, and waits for all of them. `run` times
 * `iters` rounds after `warmup` (the first rounds negotiate every pair and
 * open the peers' buffers); the runner adds the bytes every rank sent over
 * the longest rank's time.
 */
import { join } from 'node:path';
import type { CudaDriver } from '../cuda/driver.js';
import type { Endpoint } from '../endpoint.js';
import { Transport } from '../transport.js';
import type { BenchWorkerConfig, PathCounts, Repeat, TimedResult } from './protocol.js';
import { pathDelta, sentPaths } from './transport-measures.js';

const TAG = 7;
const ID = (rank: number) => `bench-a2a-rank${rank}`;
const SOCKET = (dir: string, rank: number) => join(dir, `a2a-${rank}.sock`);

export class AllToAll {
  private transport: Transport | undefined;
  private readonly peers = new Map<number, Endpoint>();
  private readonly arrived: Array<(ep: Endpoint) => void> = [];

  constructor(
    private readonly driver: CudaDriver,
    private readonly cfg: BenchWorkerConfig,
  ) {}

  async listen(): Promise<null> {
    const t = (this.transport = await Transport.create({ driver: this.driver, id: ID(this.cfg.rank), device: this.cfg.device, token: this.cfg.token }));
    t.on('endpoint', (ep: Endpoint) => {
      const rank = rankOf(ep.peerId);
      this.peers.set(rank, ep);
      for (const f of this.arrived.splice(0)) f(ep);
    });
    await t.listen(SOCKET(this.cfg.dir, this.cfg.rank));
    return null;
  }

  /** Connects to every rank below this one, then waits for the ranks above to connect (`ranks` in all). */
  async connect(ranks: number, timeoutMs = 30_000): Promise<null> {
    const t = this.transportOrThrow();
    const me = this.cfg.rank;
    await Promise.all(
      Array.from({ length: me }, async (_, k) => {
        this.peers.set(k, await t.connect(SOCKET(this.cfg.dir, k)));
      }),
    );
    const deadline = Date.now() + timeoutMs;
    while (this.peers.size < ranks - 1) {
      if (Date.now() > deadline) throw new Error(`rank ${me}: ${this.peers.size} of ${ranks - 1} peers connected within ${timeoutMs / 1000} s`);
      await new Promise<void>((resolve) => {
        this.arrived.push(() => resolve());
        setTimeout(resolve, 100);
      });
    }
    return null;
  }

  async run(size: number, repeat: Repeat): Promise<TimedResult> {
    const d = this.driver;
    const peers = [...this.peers.entries()].sort((a, b) => a[0] - b[0]).map(([, ep]) => ep);
    const out = d.memAlloc(size);
    const into = d.memAlloc(size * peers.length);
    const before = sum(peers.map(sentPaths));
    try {
      const recvOpts = peers.map((_, k) => ({ tag: TAG, into: { ptr: into + BigInt(k * size), length: size } }));
      const send = { ptr: out, length: size };
      const sendOpts = { tag: TAG };
      const round = () => Promise.all([...peers.map((ep, k) => ep.recv(recvOpts[k]!)), ...peers.map((ep) => ep.send(send, sendOpts))]);
      for (let i = 0; i < repeat.warmup; i++) await round();
      await settled(peers);
      const t0 = process.hrtime.bigint();
      for (let i = 0; i < repeat.iters; i++) await round();
      const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
      return { seconds, bytes: size * peers.length * repeat.iters, paths: pathDelta(sum(peers.map(sentPaths)), before) };
    } finally {
      for (const ep of peers) {
        for (const p of [out, into]) {
          try {
            ep.invalidate(p);
          } catch {
            // the endpoint never exported it, or it is closed
          }
        }
      }
      d.memFree(out);
      d.memFree(into);
    }
  }

  async close(): Promise<void> {
    const t = this.transport;
    this.transport = undefined;
    this.peers.clear();
    await t?.close();
  }

  private transportOrThrow(): Transport {
    if (!this.transport) throw new Error('a2a-listen first');
    return this.transport;
  }
}

/** Waits until every pair's negotiation has settled (OK or BAD): the timed rounds then take one path throughout. */
async function settled(peers: Endpoint[], timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (peers.some((ep) => ep.state !== 'OK' && ep.state !== 'BAD')) {
    if (Date.now() > deadline) throw new Error(`all-to-all: negotiations not settled within ${timeoutMs / 1000} s: ${peers.map((ep) => ep.state).join(', ')}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

function rankOf(peerId: string): number {
  const m = /^bench-a2a-rank(\d+)$/.exec(peerId);
  if (!m) throw new Error(`an all-to-all peer with an unexpected id: ${peerId}`);
  return Number(m[1]);
}

function sum(counts: PathCounts[]): PathCounts {
  return counts.reduce((a, c) => ({ eager: a.eager + c.eager, rget: a.rget + c.rget, staging: a.staging + c.staging }), { eager: 0, rget: 0, staging: 0 });
}
