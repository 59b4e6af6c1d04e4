/**
 * What the inspector's HTTP server lets a client hold: at most `max`
 * connections, and a connection that has not asked for a URL holding the
 * run's secret within `idleMs` is closed. Another local user, who can reach
 * 127.0.0.1 but not the secret, held 3,000 idle connections and ran the
 * process out of descriptors; now a new connection past the cap evicts the
 * oldest one not proven (never a page that showed the secret), so a flood
 * cannot keep an honest client out either.
 */
import type { Socket } from 'node:net';
import { debug } from '../debug.js';
import { ConfigError } from '../errors.js';

/** Connections the inspector keeps at most (a page holds one for its events, a few while loading). */
export const INSPECT_MAX_CONNECTIONS = 64;
/** A connection that has not shown the secret is closed after this long. */
export const INSPECT_IDLE_MS = 5_000;

export class ConnectionGuard {
  /** Connections that have not shown the secret, oldest first, with their idle timers. */
  readonly #unproven = new Map<Socket, NodeJS.Timeout>();
  readonly #proven = new Set<Socket>();

  constructor(
    private readonly max = INSPECT_MAX_CONNECTIONS,
    private readonly idleMs = INSPECT_IDLE_MS,
  ) {
    if (!Number.isInteger(max) || max < 1) throw new ConfigError(`inspector maxConnections must be an integer ≥ 1, got ${String(max)}`);
    if (!Number.isInteger(idleMs) || idleMs < 1) throw new ConfigError(`inspector idleMs must be an integer ≥ 1 (milliseconds), got ${String(idleMs)}`);
  }

  /** Connections open now. */
  get size(): number {
    return this.#unproven.size + this.#proven.size;
  }

  /** A new connection: kept (with an idle timer), after evicting the oldest unproven one if full; or closed. */
  admit(socket: Socket): void {
    while (this.size >= this.max) {
      const [oldest] = this.#unproven.keys();
      if (oldest === undefined) {
        debug('inspector: %d connections that showed the secret are open: a new one is closed', this.size);
        socket.destroy();
        return;
      }
      this.#forget(oldest);
      oldest.destroy();
    }
    const timer = setTimeout(() => {
      this.#forget(socket);
      socket.destroy();
    }, this.idleMs);
    timer.unref();
    this.#unproven.set(socket, timer);
    socket.once('close', () => this.#forget(socket));
  }

  /** The connection asked for a URL with the secret: no longer timed or evicted. */
  prove(socket: Socket): void {
    const timer = this.#unproven.get(socket);
    if (timer === undefined) return;
    clearTimeout(timer);
    this.#unproven.delete(socket);
    this.#proven.add(socket);
  }

  close(): void {
    for (const timer of this.#unproven.values()) clearTimeout(timer);
    this.#unproven.clear();
    this.#proven.clear();
  }

  #forget(socket: Socket): void {
    const timer = this.#unproven.get(socket);
    if (timer !== undefined) clearTimeout(timer);
    this.#unproven.delete(socket);
    this.#proven.delete(socket);
  }
}
