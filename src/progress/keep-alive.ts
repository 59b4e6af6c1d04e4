/**
 * Whether a transport keeps the process alive. Its handles (control
 * sockets, listeners) are ref'd while an operation is pending — a send
 * waiting for its FIN, a receive, a negotiation, a copy, a handshake — and
 * unref'd once nothing is, as well-behaved libraries do: a job that forgets
 * close() still exits when its work is done (its shared memory goes with it,
 * exit-hooks.ts), and one that waits for a message does not exit under it.
 *
 * Pending is asked, not counted: each source (an endpoint, the transport)
 * answers `pending()`; a call that starts work says `busy()` (the handles
 * are ref'd at once, so the process cannot exit before it settles), and an
 * unref'd interval asks the sources every IDLE_CHECK_MS while ref'd: the
 * settle points need no bookkeeping, and an idle transport has no timer.
 */

/** A libuv handle (net.Socket, net.Server, a timer): ref'd keeps the event loop alive. */
export interface Refable {
  ref(): unknown;
  unref(): unknown;
}

/** How often, while ref'd, the sources are asked whether anything is pending (ms). */
export const IDLE_CHECK_MS = 100;

export class KeepAlive {
  private readonly handles = new Set<Refable>();
  private readonly sources = new Set<() => boolean>();
  /** The handles' state: ref'd (while busy) or not. The idle check runs exactly while ref'd. */
  private refd = false;
  private timer: ReturnType<typeof setInterval> | undefined;
  private closed = false;

  constructor(private readonly checkMs = IDLE_CHECK_MS) {}

  /** Whether the handles keep the process alive now (tests, stats). */
  get holding(): boolean {
    return this.refd;
  }

  /** A handle ref'd with the others while busy, unref'd while idle; returns its removal. */
  add(h: Refable): () => void {
    if (this.closed) return noop;
    this.handles.add(h);
    if (!this.refd) h.unref();
    return () => this.handles.delete(h);
  }

  /** A source of pending work (an endpoint, the transport); returns its removal. */
  addSource(pending: () => boolean): () => void {
    if (this.closed) return noop;
    this.sources.add(pending);
    return () => this.sources.delete(pending);
  }

  /** Work starts: the handles are ref'd now, until a check finds no source pending. */
  busy(): void {
    if (this.refd || this.closed) return;
    this.refd = true;
    for (const h of this.handles) h.ref();
    this.timer = setInterval(this.check, this.checkMs);
    this.timer.unref();
  }

  /** Asks every source; none pending: the handles are unref'd (tests call it to skip the wait). */
  readonly check = (): void => {
    if (!this.refd) return;
    for (const pending of this.sources) {
      try {
        if (pending()) return;
      } catch {
        return; // a source that cannot tell keeps the process alive: never exit under pending work
      }
    }
    this.refd = false;
    clearInterval(this.timer);
    this.timer = undefined;
    for (const h of this.handles) h.unref();
  };

  /** The transport closed: no more checks; its handles are closing anyway. */
  close(): void {
    this.closed = true;
    clearInterval(this.timer);
    this.timer = undefined;
    this.handles.clear();
    this.sources.clear();
  }
}

function noop(): void {}
