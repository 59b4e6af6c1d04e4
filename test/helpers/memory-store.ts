/**
 * The TCP store's calls (set, get that waits, add) over a Map in this
 * process: for unit tests of what meets through the store (node-layout.ts,
 * the inter-node engines) without sockets.
 */
export interface MemoryStore {
  set(key: string, value: Uint8Array | string): Promise<void>;
  get(key: string, o?: { timeoutMs?: number }): Promise<Uint8Array>;
  add(key: string, delta: number): Promise<number>;
  readonly kv: Map<string, Uint8Array>;
}

export function memoryStore(): MemoryStore {
  const kv = new Map<string, Uint8Array>();
  let waits: Array<() => void> = [];
  const wake = () => {
    const w = waits;
    waits = [];
    for (const f of w) f();
  };
  return {
    kv,
    async set(k, v) {
      kv.set(k, typeof v === 'string' ? Buffer.from(v) : v);
      wake();
    },
    async get(k) {
      while (!kv.has(k)) await new Promise<void>((r) => waits.push(r));
      return kv.get(k)!;
    },
    async add(k, d) {
      const n = Number(kv.has(k) ? Buffer.from(kv.get(k)!).toString() : '0') + d;
      kv.set(k, Buffer.from(String(n)));
      wake();
      return n;
    },
  };
}
