/**
 * The receiving half of RGET once its key is open: copy a message out of a
 * peer's mapping (of whatever kind the handle pool opened) into its receive
 * target, then FIN the sender and settle the receive.
 */
import type { Mapping } from '../../cache/index.js';
import { isDeviceBuffer } from '../buffers.js';
import type { CudaDriver, DevicePtr, EventHandle } from '../cuda/driver.js';
import { count } from '../endpoint-stats.js';
import type { RgetFrame } from '../wire/frames.js';
import type { PathContext, PendingRecv, Received } from './data-path.js';
import { receiveTarget, releaseTarget } from './receive-target.js';

/** One receive copying out of a peer's mapping, from the frame to its FIN: one object per message. */
export interface RemoteCopy {
  recv: PendingRecv;
  frame: RgetFrame;
  /** Set once the mapping is found or opened. */
  mapping: Mapping | undefined;
  /** The sender's IPC event, opened here (destroyed once done). */
  event: EventHandle | undefined;
  /** What the receive resolves to (undefined until the copy is queued). */
  result: Received | undefined;
}

/**
 * Queues the copy of `job`'s message from `src` (in the mapping) and calls
 * `done` once it completed or failed; a failure to queue it calls `done` too.
 */
export function launchRemoteCopy(ctx: PathContext, job: RemoteCopy, src: DevicePtr, path: 'rget' | 'rget-fd', done: (err?: Error) => void): void {
  const { recv, frame } = job;
  const d = ctx.driver;
  const n = frame.length;
  try {
    const gpu = ctx.gpu();
    const stream = recv.stream ?? gpu.stream;
    const data = receiveTarget(d, recv.into, n, d.isReady());
    job.result = { tag: frame.tag, length: n, path, fromDevice: true, data };
    if (isDeviceBuffer(data)) {
      if (recv.stream === undefined) {
        // Launched with the other copies of this run, in one batch (GpuWork.copy).
        gpu.copy(stream, data.ptr, src, n, done);
        return;
      }
      d.memcpyAsync(data.ptr, src, n, stream);
    } else {
      d.memcpyDtoHAsync(data, src, stream);
    }
    // On the caller's stream the receive resolves at once: the data is valid once that stream reaches the copy.
    if (recv.stream !== undefined) recv.resolve(job.result);
    gpu.whenDone(stream, n, done);
  } catch (err) {
    done(err as Error);
  }
}

/** The copy completed (or failed): FIN to the sender, the receive settles, the mapping and the event are released. */
export function finishRemoteCopy(ctx: PathContext, job: RemoteCopy, path: 'rget' | 'rget-fd', err: Error | undefined): void {
  const { recv, frame } = job;
  job.mapping?.release();
  // Not destroyed here: a receive abandoned on close or peer loss gets here
  // while the completion thread may still query the peer's event.
  if (job.event !== undefined) ctx.gpu().retireEvent(job.event);
  if (err === undefined && ctx.closed && recv.stream === undefined) {
    // The endpoint closed while the copy ran: its FIN can no longer reach the sender, whose send
    // fails with the close; so does this receive, so that both sides agree on the message.
    err = ctx.closedError();
  }
  if (err === undefined) {
    try {
      count(ctx.received, path, frame.length);
      ctx.fins.ok(frame.seq);
    } catch (e) {
      err = e as Error; // the FIN could not be sent: the channel failed
    }
    if (err === undefined) {
      if (recv.stream === undefined) recv.resolve(job.result!);
      return;
    }
  }
  releaseTarget(ctx.driver, recv.into, job.result?.data);
  ctx.failArrival(recv, frame, err);
}

export function destroyEvent(d: CudaDriver, event: EventHandle): void {
  try {
    d.eventDestroy(event);
  } catch {
    // the driver was closed meanwhile
  }
}
