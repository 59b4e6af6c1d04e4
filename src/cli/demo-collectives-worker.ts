/**
 * One rank of `smcuda demo --collectives` (demo-collectives.ts): joins the
 * communicator through the demo's rendezvous directory, then answers `case`
 * commands: runs one collective on device buffers and checks its own output
 * against the host reference (collective-cases.ts).
 *
 *   ready (rank, driver, reason, device)
 *   case CollectiveCase → { algorithm, verified, mismatch? }
 *   bench BenchCase → { samples (µs per call), algorithm }   (smcuda bench --suite collectives)
 *   exit
 */
import { Communicator } from '../collectives/communicator.js';
import type { DriverKind } from '../cuda/driver.js';
import { DTYPE_BYTES } from '../kernels/dtypes.js';
import { caseInput, expectedOutput, inputCount, outputCount, type CollectiveCase } from './collective-cases.js';
import { serveRequests, workerConfig } from './worker-protocol.js';

export interface CollectivesWorkerConfig {
  rank: number;
  ranks: number;
  dir: string;
  token: string;
  driver: 'auto' | 'native' | 'sim';
  timeoutMs: number;
}

export interface CollectivesWorkerReady {
  rank: number;
  driver: DriverKind;
  reason: string;
  device: { index: number; name: string; uuid: string };
}

export interface CaseResult {
  algorithm: string;
  verified: boolean;
  mismatch?: string;
}

const cfg = workerConfig<CollectivesWorkerConfig>('SMCUDA_DEMO_COLLECTIVES', 'smcuda demo --collectives');
let comm: Communicator | undefined;
/** One stream for every case: the communicator synchronises the streams it used when it closes. */
let stream: bigint | undefined;

async function runCase(c: CollectiveCase): Promise<CaseResult> {
  const d = comm!.driver;
  const { rank, size } = comm!;
  const es = DTYPE_BYTES[c.dtype];
  const inBytes = inputCount(c, size) * es;
  const outBytes = outputCount(c, size) * es;
  const send = d.memAlloc(Math.max(inBytes, 1));
  const recv = d.memAlloc(Math.max(outBytes, 1));
  stream ??= d.streamCreate();
  try {
    if (inBytes > 0) d.memcpyHtoDAsync(send, caseInput(c, rank, size), stream);
    const a = { send, recv, count: c.count, dtype: c.dtype, stream };
    let res;
    switch (c.op) {
      case 'allreduce':
        res = await comm!.allreduce({ ...a, op: c.reduce! });
        break;
      case 'reduce':
        res = await comm!.reduce({ ...a, op: c.reduce!, root: c.root! });
        break;
      case 'reduce-scatter':
        res = await comm!.reduceScatter({ ...a, op: c.reduce! });
        break;
      case 'broadcast':
        res = await comm!.broadcast({ ...a, root: c.root! });
        break;
      case 'allgather':
        res = await comm!.allgather(a);
        break;
      case 'alltoall':
        res = await comm!.alltoall(a);
        break;
    }
    const want = expectedOutput(c, rank, size);
    if (!want || outBytes === 0) return { algorithm: res.algorithm, verified: true };
    const got = new Uint8Array(outBytes);
    d.memcpyDtoH(got, recv);
    for (let i = 0; i < outBytes; i++) {
      if (got[i] !== want[i]) return { algorithm: res.algorithm, verified: false, mismatch: `rank ${rank}: ${c.op}${c.reduce ? ` ${c.reduce}` : ''} ${c.dtype} ×${c.count}: byte ${i} is ${got[i]}, expected ${want[i]}` };
    }
    return { algorithm: res.algorithm, verified: true };
  } finally {
    d.memFree(send);
    d.memFree(recv);
  }
}

/** One timed allreduce of f32 per sample: smcuda's, or the host staging of seed 003 (device → host, every rank's buffer to every rank, summed on the host, host → device). */
export interface BenchCase {
  mode: 'smcuda' | 'host-pageable' | 'host-pinned';
  count: number;
  iters: number;
  warmup: number;
}

const BENCH_TAG = 0x5eed;

async function runBench(b: BenchCase): Promise<{ samples: number[]; algorithm: string }> {
  const c = comm!;
  const d = c.driver;
  const bytes = b.count * 4;
  const buf = d.memAlloc(Math.max(bytes, 4));
  stream ??= d.streamCreate();
  const pinned = b.mode === 'host-pinned' ? d.hostAlloc(Math.max(bytes, 4)) : undefined;
  const host = pinned ? pinned.bytes.subarray(0, bytes) : new Uint8Array(bytes);
  const peers = [...Array(c.size).keys()].filter((k) => k !== c.rank);
  const incoming = peers.map(() => new Uint8Array(bytes));
  const samples: number[] = [];
  let algorithm = 'host staging';
  try {
    d.memsetD8(buf, 0, Math.max(bytes, 4));
    await c.barrier();
    for (let i = 0; i < b.warmup + b.iters; i++) {
      const t0 = performance.now();
      if (b.mode === 'smcuda') {
        algorithm = (await c.allreduce({ send: buf, count: b.count, dtype: 'f32', op: 'avg', stream })).algorithm;
      } else {
        if (pinned) {
          d.memcpyDtoHAsync(host, buf, stream);
          d.streamSynchronize(stream);
        } else d.memcpyDtoH(host, buf);
        // In 4 MiB host messages (host data goes inline, as MPI's eager and rendezvous pieces would).
        const piece = 4 << 20;
        const parts = (fn: (at: number, n: number) => Promise<unknown>) => {
          const ps = [];
          for (let at = 0; at < bytes; at += piece) ps.push(fn(at, Math.min(piece, bytes - at)));
          return ps;
        };
        await Promise.all([
          ...peers.flatMap((k) => parts((at, n) => c.endpoint(k).send(host.subarray(at, at + n), { tag: BENCH_TAG }))),
          ...peers.flatMap((k, j) => parts((at, n) => c.endpoint(k).recv({ tag: BENCH_TAG, into: incoming[j]!.subarray(at, at + n) }))),
        ]);
        const sum = new Float32Array(host.buffer, host.byteOffset, b.count);
        for (const inc of incoming) {
          const x = new Float32Array(inc.buffer, inc.byteOffset, b.count);
          for (let e = 0; e < b.count; e++) sum[e] = sum[e]! + x[e]!;
        }
        for (let e = 0; e < b.count; e++) sum[e] = sum[e]! / c.size;
        if (pinned) {
          d.memcpyHtoDAsync(buf, host, stream);
          d.streamSynchronize(stream);
        } else d.memcpyHtoD(buf, host);
        await c.barrier(); // as MPI_Allreduce returns on every rank together
      }
      if (i >= b.warmup) samples.push((performance.now() - t0) * 1000);
    }
    return { samples, algorithm };
  } finally {
    pinned?.free();
    d.memFree(buf);
  }
}

const link = serveRequests({ case: (c: CollectiveCase) => runCase(c), bench: (b: BenchCase) => runBench(b) }, { sequential: true, onExit: () => comm?.close() });

Communicator.create({ rank: cfg.rank, size: cfg.ranks, dir: cfg.dir, token: cfg.token, driver: cfg.driver, timeoutMs: cfg.timeoutMs }).then(
  (c) => {
    comm = c;
    const index = c.driver.currentDevice();
    const info = c.driver.deviceInfo(index);
    const ready: CollectivesWorkerReady = { rank: c.rank, driver: c.driver.kind, reason: c.transport.driverReason, device: { index, name: info.name, uuid: info.uuid } };
    link.ready(ready);
  },
  (err: unknown) => link.startFailed(err),
);
