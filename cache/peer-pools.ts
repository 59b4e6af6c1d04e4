/**
 * The peer pools a handle pool has imported (memPoolImport), shared by the
 * 'pool' mappings of their pointers.
 *
 * A peer sends its pool's descriptor once, so the import must outlive any one
 * pointer: it is kept until it is dropped (the peer freed the pool or went
 * away: `HandlePool.dropPeerPool`, or the handle pool closed) and then
 * released (memPoolRelease) as soon as no pointer mapping, and no open in
 * flight, uses it. The driver refuses to release a pool with imported
 * pointers left, so the order matters.
 */
import type { PoolHandle } from '../src/cuda/driver.js';
import type { PeerPoolRef } from './mapping.js';

export class PeerPool {
  /** Pointer mappings open from it plus opens in flight that hold it. */
  users = 0;
  /** No longer handed to new pointers; released when `users` reaches 0. */
  dropped = false;
  released = false;
  /** Set once imported. */
  handle: PoolHandle | undefined;
  /** The import in flight, joined by concurrent opens of the same pool. */
  importing: Promise<PoolHandle> | undefined;

  constructor(readonly key: string) {}
}

export class PeerPools {
  readonly #byKey = new Map<string, PeerPool>();
  /** Successful imports, and imports released. */
  imports = 0;
  releases = 0;

  constructor(
    /** memPoolRelease; a throw is counted by the caller's `onReleaseError`. */
    private readonly release: (pool: PoolHandle) => void,
    private readonly onReleaseError: (err: unknown) => void,
  ) {}

  /** Pools imported and not released (dropped ones still in use included). */
  get held(): number {
    let n = 0;
    for (const p of this.#all) if (p.handle !== undefined && !p.released) n++;
    return n;
  }

  /** Every pool not yet released or forgotten, dropped ones still in use included. */
  readonly #all = new Set<PeerPool>();

  /**
   * A use of the pool `ref` names, imported now if it is not yet: the caller
   * must `unhold` it once (when its pointer mapping is closed, or its open failed).
   */
  async hold(ref: PeerPoolRef): Promise<PeerPool> {
    let pool = this.#byKey.get(ref.key);
    if (pool === undefined) {
      pool = new PeerPool(ref.key);
      this.#byKey.set(ref.key, pool);
      this.#all.add(pool);
    }
    pool.users++;
    try {
      if (pool.handle === undefined) {
        if (pool.importing === undefined) {
          const p = pool;
          const importing = (async () => ref.open())();
          p.importing = importing;
          // Registered before any waiter's await, so it runs first: a waiter
          // resumes with the handle set, or with `importing` cleared after a
          // failure (even one thrown synchronously by `open`).
          importing.then(
            (handle) => {
              p.importing = undefined;
              p.handle = handle;
              this.imports++;
            },
            () => {
              p.importing = undefined; // the caller counts the failure (HandlePool: openFailures)
            },
          );
        }
        await pool.importing;
      }
      return pool;
    } catch (err) {
      this.unhold(pool);
      throw err;
    }
  }

  unhold(pool: PeerPool): void {
    pool.users--;
    if (pool.handle === undefined && pool.importing === undefined && pool.users === 0) {
      // Never imported (the import failed): forget it, so the next request imports afresh.
      this.#forget(pool);
      return;
    }
    this.#releaseIfDone(pool);
  }

  /** Drops the pool named `key`: released now if unused, else when its last user goes. */
  drop(key: string): boolean {
    const pool = this.#byKey.get(key);
    if (pool === undefined) return false;
    this.#byKey.delete(key);
    pool.dropped = true;
    this.#releaseIfDone(pool);
    return true;
  }

  dropAll(): void {
    for (const key of [...this.#byKey.keys()]) this.drop(key);
  }

  #releaseIfDone(pool: PeerPool): void {
    if (!pool.dropped || pool.users !== 0 || pool.released || pool.importing !== undefined) return;
    pool.released = true;
    this.#forget(pool);
    if (pool.handle === undefined) return;
    this.releases++;
    try {
      this.release(pool.handle);
    } catch (err) {
      this.onReleaseError(err);
    }
  }

  #forget(pool: PeerPool): void {
    if (this.#byKey.get(pool.key) === pool) this.#byKey.delete(pool.key);
    this.#all.delete(pool);
  }
}
