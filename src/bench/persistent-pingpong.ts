/**
 * smcuda's side of `smcuda bench --suite graph` (under-test.ts,
 * GRAPH_PINGPONG_UNDER_TEST): the ping-pong of memop-pingpong.ts made of
 * persistent transfers (issue 25) instead of raw stream memory operations.
 *
 * Each worker allocates a source and a destination of `size` bytes and
 * registers them with the peer (registration 1 pairs the initiator's source
 * with the responder's destination, registration 2 the other way), then
 * makes one persistent transfer each way. Per captured iteration:
 *
 *   initiator: out.start, in.start (send the ping, then receive the reply)
 *   responder: in.start, out.start (the reply leaves only once the ping is in)
 *
 * `transfers` iterations are captured once on each side — as one
 * startSequence call, so that adjacent batches merge across iterations
 * too: one batch and one copy per iteration — and the graph is replayed
 * (graph-replays.ts); the bytes are checked once after the timed replays
 * (the last round's source is in the peer's destination).
 */
import type { CudaDriver, DevicePtr, StreamHandle } from '../cuda/driver.js';
import type { Endpoint } from '../endpoint.js';
import { ArgumentRangeError } from '../errors.js';
import { GpuRuntime } from '../gpu/gpu-runtime.js';
import type { Registration } from '../persistent/registrations.js';
import { startSequence, type PersistentTransfer } from '../persistent/transfers.js';
import { timeReplays } from './graph-replays.js';
import type { MemOpGraphResult, PingPongRole } from './memop-pingpong.js';
import { withinMs } from './stuck.js';
import type { PingPongContext, PingPongUnderTest } from './under-test.js';

/** A tag of its own for the barrier before closing (the bench's other messages use small tags). */
const BARRIER_TAG = 0xffff_fe00;
const EMPTY = new Uint8Array(0);

/** The byte each side fills its source with (the peer checks its destination for it). */
export function sourceByte(role: PingPongRole): number {
  return role === 'initiator' ? 0x5a : 0xa5;
}

export class PersistentPingPong implements PingPongUnderTest {
  readonly #d: CudaDriver;
  /** Waits for the streams' work (points marked through the GPU runtime). */
  readonly #gpu: GpuRuntime;
  readonly #ep: Endpoint;
  readonly #timeoutMs: number;
  readonly #flags: 'memops' | 'kernel';

  constructor(ctx: PingPongContext, timeoutMs = 60_000) {
    this.#d = ctx.driver;
    this.#gpu = new GpuRuntime(ctx.driver);
    this.#ep = ctx.endpoint;
    this.#flags = ctx.flags ?? 'memops';
    this.#timeoutMs = timeoutMs;
  }

  async graphPingPong(args: {
    role: PingPongRole;
    size: number;
    transfers: number;
    replays: number;
    warmup: number;
    stream: StreamHandle;
  }): Promise<MemOpGraphResult> {
    const { role, size, transfers, replays, warmup, stream } = args;
    if (!Number.isSafeInteger(size) || size < 1) throw new ArgumentRangeError(`size must be a positive integer, got ${size}`);
    if (!Number.isSafeInteger(transfers) || transfers < 1) throw new ArgumentRangeError(`transfers must be a positive integer, got ${transfers}`);
    const d = this.#d;
    const initiator = role === 'initiator';
    const allocs: DevicePtr[] = [];
    const regs: Registration[] = [];
    const made: PersistentTransfer[] = [];
    try {
      const src = d.memAlloc(size);
      allocs.push(src);
      const dst = d.memAlloc(size);
      allocs.push(dst);
      d.memsetD8(src, sourceByte(role), size);
      d.memsetD8(dst, 0, size);
      // In matching order on both sides: each registration pairs a source with the peer's destination.
      for (const ptr of initiator ? [src, dst] : [dst, src]) regs.push(await this.#ep.register({ ptr, length: size }));
      // Also in matching order: registration 1's transfer first (the initiator sends on it), then registration 2's.
      const first = await this.#ep.persistent(regs[0]!, { role: initiator ? 'send' : 'recv', length: size, flags: this.#flags });
      made.push(first);
      const second = await this.#ep.persistent(regs[1]!, { role: initiator ? 'recv' : 'send', length: size, flags: this.#flags });
      made.push(second);
      const [out, into] = initiator ? [first, second] : [second, first];
      d.streamBeginCapture(stream);
      let graph: bigint;
      try {
        // All iterations in one call: adjacent batches merge across iterations too (a batch and a copy per
        // iteration), and a graph replay costs the host a fixed amount per memory-operation node (measured).
        startSequence(stream, Array.from({ length: transfers }, () => (initiator ? [out, into] : [into, out])).flat());
      } finally {
        graph = d.streamEndCapture(stream);
      }
      try {
        const exec = d.graphInstantiate(graph);
        try {
          const settle = (what: string) => this.#settle(stream, `${role}: ${what} of a graph of ${transfers} persistent ping-pongs`);
          const t = await timeReplays(d, exec, stream, replays, warmup, settle);
          for (const x of made) x.check();
          this.#checkLanded(dst, size, sourceByte(initiator ? 'responder' : 'initiator'));
          // Closing a transfer fails it on the peer too: neither side closes before both checked.
          await withinMs(
            Promise.all([this.#ep.send(EMPTY, { tag: BARRIER_TAG }), this.#ep.recv({ tag: BARRIER_TAG })]),
            this.#timeoutMs,
            'the barrier after the ping-pong',
          );
          if (!initiator) return {};
          return { halfRoundTripUs: t.streamUsPerReplay / transfers / 2, hostUsPerReplay: t.hostUs, backToBackHostUs: t.backToBackUs };
        } finally {
          d.graphExecDestroy(exec);
        }
      } finally {
        d.graphDestroy(graph);
      }
    } finally {
      await Promise.allSettled(made.map((x) => x.close()));
      // Deregistration resolves once the peer deregistered too: bounded, in case the peer is gone.
      await Promise.allSettled(regs.map((r) => withinMs(r.deregister(), this.#timeoutMs, 'deregistering the ping-pong buffers')));
      for (const p of allocs.reverse()) d.memFree(p);
    }
  }

  async close(): Promise<void> {
    // The transfers and registrations of each call are closed by that call; the endpoint is the bench session's.
    this.#gpu.close();
  }

  /** The peer's bytes are in this side's destination: a figure of transfers that moved nothing is no figure. */
  #checkLanded(dst: DevicePtr, size: number, expected: number): void {
    const n = Math.min(size, 4096);
    const got = new Uint8Array(n);
    this.#d.memcpyDtoH(got, dst + BigInt(size - n));
    const bad = got.findIndex((b) => b !== expected);
    if (bad >= 0) throw new Error(`persistent ping-pong: byte ${size - n + bad} of the destination is ${got[bad]}, not the peer's ${expected}`);
  }

  async #settle(stream: StreamHandle, what: string): Promise<void> {
    await withinMs(this.#gpu.completed(stream), this.#timeoutMs, what);
  }
}
