/**
 * Entries in recency order, for the handle pool: a Map whose insertion
 * order is the order of last use (a touch re-inserts). The pool needs no
 * more than this — recency, iteration from either end, and one callback on
 * every way out — and its own bounds (it evicts only entries not in use),
 * so this replaces lru-cache, whose 3 MB of builds every consumer installed.
 */
export class RecencyMap<K, V> {
  readonly #map = new Map<K, V>();

  /** `dispose` runs once for every value that leaves (delete, or replaced by set), after it has left. */
  constructor(private readonly dispose: (value: V) => void) {}

  get size(): number {
    return this.#map.size;
  }

  /** The value, made the most recently used. */
  get(key: K): V | undefined {
    const v = this.#map.get(key);
    if (v !== undefined) {
      this.#map.delete(key);
      this.#map.set(key, v);
    }
    return v;
  }

  /** Sets it as the most recently used; a different value it replaces is disposed. */
  set(key: K, value: V): void {
    const old = this.#map.get(key);
    this.#map.delete(key);
    this.#map.set(key, value);
    if (old !== undefined && old !== value) this.dispose(old);
  }

  /** Removes and disposes it; false if absent. */
  delete(key: K): boolean {
    const v = this.#map.get(key);
    if (v === undefined) return false;
    this.#map.delete(key);
    this.dispose(v);
    return true;
  }

  /** Most recently used first. */
  *values(): IterableIterator<V> {
    const all = [...this.#map.values()];
    for (let i = all.length - 1; i >= 0; i--) yield all[i]!;
  }

  /** Least recently used first (entries deleted meanwhile are skipped). */
  rvalues(): IterableIterator<V> {
    return this.#map.values();
  }
}
