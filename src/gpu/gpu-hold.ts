/**
 * GpuHold: what the GPU may be reading or writing for this endpoint, owned by
 * its GPU work (gpu-work.ts) rather than by the path that uses it: a pinned
 * staging ring, the peer's ring mapped here, or what one receive holds (its
 * lease on the peer's mapping, the peer's event it waited on, the device
 * buffer it allocated). Each copy queued into or out of it is a use
 * (GpuWork.copy / whenDone with the hold), given back by that copy's
 * completion after its callback ran; the resource is released (unregistered,
 * unmapped, freed) only when its holder let go of it and no use is in flight
 * — on every path: the path finishing or failing the operation, closing or
 * replacing a ring, or the endpoint closing (GpuWork.close lets go of every
 * hold it still has). The analogue of UCX's uct_cuda_ipc_complete_event,
 * which unmaps the peer's memory once the copy's event completed.
 */
export class GpuHold {
  private uses = 0;
  private closing = false;
  private released = false;

  constructor(
    private readonly releaseNow: () => void,
    /** The owner's set of live holds (this leaves it once released). */
    private readonly owner?: Set<GpuHold>,
  ) {
    owner?.add(this);
  }

  /** A copy into or out of the resource was queued: its completion must call `done`. */
  use(): void {
    this.uses++;
  }

  /** A use completed (or failed): the resource goes now if its holder let go of it. */
  done(): void {
    if (--this.uses === 0 && this.closing) this.release();
  }

  /** Copies queued and not completed. */
  get inUse(): number {
    return this.uses;
  }

  /** The holder is done with it: released now if no copy uses it, else by the last one's completion. Idempotent. */
  close(): void {
    this.closing = true;
    if (this.uses === 0) this.release();
  }

  private release(): void {
    if (this.released) return;
    this.released = true;
    this.owner?.delete(this);
    try {
      this.releaseNow();
    } catch {
      // the driver was closed: its registrations, mappings and memory went with it
    }
  }
}
