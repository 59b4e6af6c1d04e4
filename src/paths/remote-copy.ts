/**
 * The receiving half of RGET once its key is open: copy a message out of a
 * peer's mapping (of whatever kind the handle pool opened) into its receive
 * target, then FIN the sender and settle the receive.
 *
 * What the receive holds — its lease on the peer's mapping, the peer's
 * event it waits on, a device buffer allocated for it — is one GpuHold of the
 * endpoint's GPU work (`holdFor`), taken as soon as it holds the lease: the
 * copy uses it, the receive lets go of it when it settles (finishRemoteCopy),
 * and it is released (releaseHeld) only then and after the copy's completion
 * ran — at once when no copy was queued (the event or the range failed).
 */
import type { Mapping } from '../../cache/index.js';
import { isDeviceBuffer } from '../buffers.js';
import type { DevicePtr, EventHandle } from '../cuda/driver.js';
import { count } from '../endpoint-stats.js';
import type { GpuHold } from '../gpu/gpu-hold.js';
import type { FinBatcher } from '../fin-batcher.js';
import type { RgetFrame } from '../wire/frames.js';
import type { PathContext, PendingRecv, Received } from './data-path.js';
import { receiveTarget } from './receive-target.js';

/** One receive copying out of a peer's mapping, from the frame to its FIN: one object per message. */
export interface RemoteCopy {
  recv: PendingRecv;
  frame: RgetFrame;
  /** The lease on the peer's mapping, once found or opened. */
  mapping: Mapping | undefined;
  /** The sender's IPC event, opened here (retired once done). */
  event: EventHandle | undefined;
  /** A device buffer allocated for this receive: freed unless the receive resolved with it. */
  target: DevicePtr | undefined;
  /** What the receive holds, from its lease on (GpuWork's: holdFor). */
  held: GpuHold | undefined;
  /** What the receive resolves to (undefined until the copy is queued). */
  result: Received | undefined;
}

/** The receive holds its lease on the peer's mapping (found or opened): from now on that, and what it takes later, is the GPU work's. */
export function holdFor(ctx: PathContext, job: RemoteCopy): void {
  job.held = ctx.gpu().hold(() => releaseHeld(ctx, job));
}

/**
 * Queues the copy of `job`'s message from `src` (in the mapping; `holdFor`
 * came first) and calls `done` once it completed or failed; a failure to
 * queue it calls `done` too.
 */
export function launchRemoteCopy(ctx: PathContext, job: RemoteCopy, src: DevicePtr, path: 'rget' | 'rget-fd', done: (err?: Error) => void): void {
  const { recv, frame } = job;
  const d = ctx.driver;
  const n = frame.length;
  const gpu = ctx.gpu();
  const held = job.held!;
  try {
    const stream = recv.stream ?? gpu.stream;
    const data = receiveTarget(d, recv.into, n, d.isReady());
    if (recv.into === undefined && isDeviceBuffer(data)) job.target = data.ptr;
    job.result = { tag: frame.tag, length: n, path, fromDevice: true, data };
    if (isDeviceBuffer(data)) {
      if (recv.stream === undefined) {
        // Launched with the other copies of this run, in one batch (GpuWork.copy); the destination's
        // device is told where the message lies on the GPU shared with the peer (the copy kernel may take it).
        const dstDevice = gpu.isSameGpu(frame.deviceUuid) ? (recv.into === undefined ? data.device : recv.intoDevice) : undefined;
        gpu.copy(stream, data.ptr, src, n, done, held, dstDevice);
        return;
      }
      d.memcpyAsync(data.ptr, src, n, stream);
    } else {
      d.memcpyDtoHAsync(data, src, stream);
    }
    if (recv.stream !== undefined) {
      // On the caller's stream the receive resolves at once: the data is valid
      // once that stream reaches the copy, and the buffer is the caller's now.
      job.target = undefined;
      recv.resolve(job.result);
    }
    gpu.whenDone(stream, n, done, held);
  } catch (err) {
    done(err as Error);
  }
}

/**
 * The copy completed (or failed, or none was queued): FIN to the sender
 * (batched by `fins`), the receive settles and lets go of what it holds —
 * released now if no copy uses it, else once the completion that called
 * this has run.
 */
export function finishRemoteCopy(ctx: PathContext, fins: FinBatcher, job: RemoteCopy, path: 'rget' | 'rget-fd', err: Error | undefined): void {
  try {
    settle(ctx, fins, job, path, err);
  } finally {
    job.held?.close();
  }
}

function settle(ctx: PathContext, fins: FinBatcher, job: RemoteCopy, path: 'rget' | 'rget-fd', err: Error | undefined): void {
  const { recv, frame } = job;
  if (err === undefined && ctx.closed && recv.stream === undefined) {
    // The endpoint closed while the copy ran: its FIN can no longer reach the sender, whose send
    // fails with the close; so does this receive, so that both sides agree on the message.
    err = ctx.closedError();
  }
  if (err === undefined) {
    try {
      count(ctx.received, path, frame.length);
      fins.ok(frame.seq);
    } catch (e) {
      err = e as Error; // the FIN could not be sent: the channel failed
    }
    if (err === undefined) {
      if (recv.stream === undefined) {
        job.target = undefined; // the caller's now
        recv.resolve(job.result!);
      }
      return;
    }
  }
  ctx.failArrival(recv, frame, err);
}

/**
 * Releases what the receive holds: the lease on the peer's mapping (the pool
 * closes a detached entry on its last release), the peer's event (destroyed
 * once no completion wait queries it), and a buffer allocated for it that
 * the receive did not resolve with. Each exactly once.
 */
function releaseHeld(ctx: PathContext, job: RemoteCopy): void {
  const { mapping, event, target } = job;
  job.mapping = undefined;
  job.event = undefined;
  job.target = undefined;
  mapping?.release();
  if (event !== undefined) ctx.gpu().retireEvent(event);
  if (target !== undefined) {
    try {
      ctx.driver.memFree(target);
    } catch {
      // the context is gone: nothing left to free
    }
  }
}
