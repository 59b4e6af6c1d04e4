/**
 * GpuHold: a resource the GPU may be reading or writing (a pinned staging
 * ring, the peer's ring mapped here), owned by the endpoint's GPU work
 * rather than by the path that uses it. Each copy queued into or out of it
 * is a use, given back by that copy's completion; the resource is released
 * (unregistered, unmapped) only when its holder let go of it and no use is
 * in flight — on every path: the path closing it, replacing it, or the
 * endpoint closing (GpuWork.close lets go of every hold it still has).
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
      // the driver was closed: its registrations and mappings went with it
    }
  }
}
