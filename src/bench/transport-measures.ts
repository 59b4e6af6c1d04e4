/**
 * The transport's own figures, measured between the two bench workers over
 * one endpoint: ping-pong half round trips, one-way and windowed bandwidth,
 * and the first GPU send's negotiation. Buffers are allocated before the
 * clock starts and freed after; the owner tells its peer to drop mappings
 * of them (Endpoint.invalidate) before freeing, so device memory really goes.
 */
import type { DeviceBuffer } from '../buffers.js';
import { allocDemoMemory, type DemoMemory, type MemoryOption } from '../cli/demo-memory.js';
import type { CudaDriver } from '../cuda/driver.js';
import type { Endpoint } from '../endpoint.js';
import { epochMs } from './first-send.js';
import type { BidirResult, FirstSendResult, NegotiationResult, PathCounts, ProbeResult, Repeat, SamplesResult, TimedResult } from './protocol.js';

/** Tags of the bench's messages (one per kind, so a stray message cannot match another kind). */
const TAG = { warm: 1, ping: 2, pong: 3, stream: 4, probe: 5, first: 6 } as const;

const micros = (t0: bigint): number => Number(process.hrtime.bigint() - t0) / 1000;

/** Messages this endpoint sent by each path; `rget` counts RGET of every memory kind (by IPC handle or by descriptor). */
export function sentPaths(ep: Endpoint): PathCounts {
  const s = ep.stats().sent;
  return { eager: s.eager.messages, rget: s.rget.messages + s['rget-fd'].messages, staging: s.staging.messages };
}

/** Why messages went by staging between two snapshots of `ep.stats().stagingReasons` (only reasons that grew). */
export function reasonDelta(after: Record<string, number>, before: Record<string, number>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [why, n] of Object.entries(after)) if (n > (before[why] ?? 0)) out[why] = n - (before[why] ?? 0);
  return out;
}

export function pathDelta(after: PathCounts, before: PathCounts): PathCounts {
  return { eager: after.eager - before.eager, rget: after.rget - before.rget, staging: after.staging - before.staging };
}

/**
 * Device memory for one operation: allocated now (cuMemAlloc, or of another
 * kind: demo-memory.ts), invalidated at the peer and freed by `free()`.
 */
export class OpBuffers {
  private readonly ptrs: bigint[] = [];
  private readonly memory: DemoMemory | undefined;
  constructor(
    private readonly driver: CudaDriver,
    private readonly ep: Endpoint,
    kind: MemoryOption = 'legacy',
  ) {
    if (kind !== 'legacy') this.memory = allocDemoMemory(driver, kind);
  }

  alloc(bytes: number): DeviceBuffer {
    if (this.memory) {
      const view = this.memory.alloc(bytes).view(bytes);
      this.ptrs.push(view.ptr);
      return view;
    }
    const ptr = this.driver.memAlloc(bytes);
    this.ptrs.push(ptr);
    return { ptr, length: bytes };
  }

  free(): void {
    for (const ptr of this.ptrs) {
      try {
        this.ep.invalidate(ptr);
      } catch {
        // the endpoint is closed (the peer's mappings went with it), or it never exported this memory
      }
      if (!this.memory) this.driver.memFree(ptr);
    }
    this.memory?.freeAll();
    this.ptrs.length = 0;
  }
}

const slice = (b: DeviceBuffer, index: number, size: number): DeviceBuffer => ({ ptr: b.ptr + BigInt(index * size), length: size });

/**
 * Initiator: send, then wait for the reply; sample = round trip / 2 in µs.
 * Responder: receive, send back. The initiator posts its receive first.
 */
export async function pingPong(driver: CudaDriver, ep: Endpoint, initiator: boolean, size: number, repeat: Repeat, ready = false): Promise<SamplesResult> {
  const ping = ready ? { tag: TAG.ping, ready: true } : { tag: TAG.ping };
  const pong = ready ? { tag: TAG.pong, ready: true } : { tag: TAG.pong };
  const bufs = new OpBuffers(driver, ep);
  try {
    const out = bufs.alloc(size);
    const into = bufs.alloc(size);
    const before = sentPaths(ep);
    const samples: number[] = [];
    for (let i = 0; i < repeat.warmup + repeat.iters; i++) {
      if (initiator) {
        const t0 = process.hrtime.bigint();
        const back = ep.recv({ tag: TAG.pong, into });
        await ep.send(out, ping);
        await back;
        if (i >= repeat.warmup) samples.push(micros(t0) / 2);
      } else {
        await ep.recv({ tag: TAG.ping, into });
        await ep.send(out, pong);
      }
    }
    return { samples, paths: pathDelta(sentPaths(ep), before) };
  } finally {
    bufs.free();
  }
}

/**
 * `warmup + iters` messages of `size` from the sender, at most `window`
 * outstanding (each send completes on FIN); the receiver keeps `window`
 * receives posted into distinct slices. Timed on the sender, warm-up excluded.
 */
export async function oneWay(
  driver: CudaDriver,
  ep: Endpoint,
  sender: boolean,
  size: number,
  window: number,
  repeat: Repeat,
  memory: MemoryOption = 'legacy',
): Promise<TimedResult> {
  const bufs = new OpBuffers(driver, ep, memory);
  try {
    const before = sentPaths(ep);
    const reasonsBefore = { ...ep.stats().stagingReasons };
    // Only the `window` operations in flight are held, and their buffers are
    // made once: keeping every message's promise to the end made each
    // young-generation collection copy thousands of live promises (1+ ms
    // pauses), a cost of this loop, not of the transport.
    // Pool memory: one allocation a slot, not slices of one: a 1 GiB window of 8 in one pool allocation
    // would be staged (pool allocations over 5 GiB are not shared: exports.ts).
    const buf = memory === 'pool' ? undefined : bufs.alloc(size * window);
    const slices = Array.from({ length: window }, (_, k) => (buf ? slice(buf, k, size) : bufs.alloc(size)));
    const sendOpts = { tag: TAG.stream };
    const recvOpts = slices.map((into) => ({ tag: TAG.stream, into }));
    const run = async (count: number) => {
      const inflight: Promise<unknown>[] = [];
      for (let i = 0; i < count; i++) {
        const k = i % window;
        if (i >= window) await inflight[k];
        inflight[k] = sender ? ep.send(slices[k]!, sendOpts) : ep.recv(recvOpts[k]!);
      }
      await Promise.all(inflight);
    };
    await run(repeat.warmup);
    const t0 = process.hrtime.bigint();
    await run(repeat.iters);
    const seconds = micros(t0) / 1e6;
    const stagingReasons = reasonDelta(ep.stats().stagingReasons, reasonsBefore);
    return {
      seconds,
      bytes: size * repeat.iters,
      paths: pathDelta(sentPaths(ep), before),
      ...(Object.keys(stagingReasons).length > 0 ? { stagingReasons } : {}),
    };
  } finally {
    bufs.free();
  }
}

/**
 * Both directions at once on one endpoint (as osu_bibw): this rank sends
 * `size` to its peer with `window` outstanding while it receives as much
 * from it. Each direction is timed on its own; the runner adds the bytes of
 * both ranks' sends over the longer of their times.
 */
export async function bidirectional(driver: CudaDriver, ep: Endpoint, size: number, window: number, repeat: Repeat): Promise<BidirResult> {
  const [sent, received] = await Promise.all([oneWay(driver, ep, true, size, window, repeat), oneWay(driver, ep, false, size, window, repeat)]);
  return { sent, received };
}

/**
 * A fresh endpoint's first device message: rank 1 (initiator) sends `size`
 * bytes, rank 0 receives; each side says when (epochMs): rank 1 when it
 * called send(), rank 0 when the message was delivered.
 */
export async function firstSend(driver: CudaDriver, ep: Endpoint, initiator: boolean, size: number): Promise<Omit<FirstSendResult, 'states' | 'calls'>> {
  const bufs = new OpBuffers(driver, ep);
  try {
    const b = bufs.alloc(size);
    const before = sentPaths(ep);
    let at: number;
    if (initiator) {
      at = epochMs();
      await ep.send(b, { tag: TAG.first });
    } else {
      await ep.recv({ tag: TAG.first, into: b });
      at = epochMs();
    }
    const settleMs = ep.stats().negotiation.settleMs;
    return { at, paths: pathDelta(sentPaths(ep), before), ...(settleMs !== undefined ? { settleMs } : {}) };
  } finally {
    bufs.free();
  }
}

/** Rank 1 sends one device message (above the eager limit) to rank 0; both wait for OK or BAD. */
export async function negotiate(driver: CudaDriver, ep: Endpoint, initiator: boolean, timeoutMs = 30_000): Promise<NegotiationResult> {
  const settled = new Promise<void>((resolve, reject) => {
    const check = () => {
      if (ep.state === 'OK' || ep.state === 'BAD') {
        clearTimeout(timer);
        ep.off('state', check);
        resolve();
      }
    };
    const timer = setTimeout(() => {
      ep.off('state', check);
      reject(new Error(`negotiation did not settle within ${timeoutMs / 1000} s (state ${ep.state})`));
    }, timeoutMs);
    ep.on('state', check);
    check();
  });
  const bufs = new OpBuffers(driver, ep);
  try {
    const size = 64 << 10;
    const b = bufs.alloc(size);
    if (initiator) await ep.send(b, { tag: TAG.warm });
    else await ep.recv({ tag: TAG.warm, into: b });
    await settled;
  } finally {
    bufs.free();
  }
  const n = ep.stats().negotiation;
  return { state: n.state, path: n.path, tries: n.tries, ...(n.settleMs !== undefined ? { settleMs: n.settleMs } : {}) };
}

/**
 * Whether the endpoint can send one `size`-byte message from `memory` of a
 * kind at all, without leaving either side waiting: the receiver posts its
 * receive (`postProbe`), the sender sends (`probeSend`), and the receiver
 * then waits for the message, or cancels its receive where the send failed
 * (`finish`).
 */
export function postProbe(driver: CudaDriver, ep: Endpoint, size: number, memory: MemoryOption): { finish(abort: boolean): Promise<ProbeResult> } {
  const bufs = new OpBuffers(driver, ep, memory);
  const controller = new AbortController();
  const received = ep.recv({ tag: TAG.probe, into: bufs.alloc(size), signal: controller.signal });
  received.catch(() => {}); // settled in finish()
  return {
    async finish(abort) {
      try {
        if (abort) controller.abort();
        await received;
        return { ok: true };
      } catch (err) {
        return { ok: false, error: describe(err) };
      } finally {
        bufs.free();
      }
    },
  };
}

export async function probeSend(driver: CudaDriver, ep: Endpoint, size: number, memory: MemoryOption): Promise<ProbeResult> {
  const bufs = new OpBuffers(driver, ep, memory);
  try {
    const before = sentPaths(ep);
    await ep.send(bufs.alloc(size), { tag: TAG.probe });
    return { ok: true, paths: pathDelta(sentPaths(ep), before) };
  } catch (err) {
    return { ok: false, error: describe(err) };
  } finally {
    bufs.free();
  }
}

function describe(err: unknown): string {
  const e = err as Error & { code?: string };
  return `${e.code ? `[${e.code}] ` : ''}${e.message ?? String(err)}`;
}
