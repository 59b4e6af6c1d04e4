/**
 * The memory-kind baselines of `smcuda bench --suite memory`, measured
 * between the two workers directly (not through smcuda): rank 0 allocates
 * memory of a kind and exports it (IPC handle, or descriptors over an
 * FdChannel), rank 1 imports it and times
 *  - the first import of an allocation and its undo (cuIpcOpenMemHandle;
 *    vmmImport of the chunks; memPoolImportPointer, with the pool's own
 *    one-time import timed apart), and a cache hit on a HandlePool holding it
 *    (a lease held meanwhile: a pool pointer is kept only while in use);
 *  - back-to-back cuMemcpyAsync from an open mapping of that kind into local
 *    memory (the raw copy a transfer of that kind is held to).
 * Descriptors are closed as soon as they are imported (or sent).
 */
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { HandlePool, type ImportRequest } from '../../cache/index.js';
import { FD_TOKEN_BYTES, type FdChannel, FdListener, type FdMessage } from '../channel/fd-channel.js';
import { allocDemoMemory, type DemoMemory, type MemoryOption } from '../cli/demo-memory.js';
import type { CudaDriver, DevicePtr, PoolHandle } from '../cuda/driver.js';
import type { Repeat, TimedResult } from './protocol.js';

/** One allocation of rank 0, as rank 1 needs it; its descriptors follow on the channel, in order. */
export interface KindExport {
  kind: MemoryOption;
  deviceUuid: string;
  /** Where the exported bytes start in rank 0 (a vmm-chunked buffer starts inside its first chunk). */
  ptr: bigint;
  size: number;
  bufferId: bigint;
  /** legacy: the IPC handle. */
  handle?: Uint8Array;
  /** vmm: the export's base and size, and the chunks (one descriptor each). */
  vmm?: { base: bigint; size: number; chunks: Array<{ offset: number; size: number }> };
  /** pool: the pointer's export data, its pool, and whether the pool's descriptor comes first. */
  pool?: { data: Uint8Array; poolId: string; poolFd: boolean };
}

export interface KindOpenResult {
  /** First import (and undo) of each allocation but the one kept for hits. */
  openUs: number[];
  closeUs: number[];
  /** pool: the one-time import of the peer's pool. */
  poolImportUs?: number;
  /** ns per lookupImport + release on a HandlePool holding one mapping, one sample per batch. */
  hitNs: number[];
}

// ------------------------------------------------------------------ rank 0

/** Rank 0's side: allocates, exports, frees. */
export class KindExporter {
  readonly #memories: DemoMemory[] = [];
  #listener: FdListener | undefined;
  #channel: FdChannel | undefined;
  #admitted: Promise<FdChannel> | undefined;

  constructor(
    private readonly driver: CudaDriver,
    private readonly deviceUuid: string,
  ) {}

  /** Listens for rank 1's descriptor channel; returns where and with which token to connect. */
  listen(dir: string): { path: string; token: Uint8Array } {
    if (this.#listener) throw new Error('the descriptor channel is listening already');
    const path = join(dir, 'fd.sock');
    const token = randomBytes(FD_TOKEN_BYTES);
    this.#listener = new FdListener(path);
    this.#admitted = this.#listener.expect(token);
    return { path, token };
  }

  async accept(): Promise<void> {
    if (!this.#admitted) throw new Error('fd-listen first');
    this.#channel = await this.#admitted;
  }

  async export(kind: MemoryOption, size: number, count: number): Promise<KindExport[]> {
    const d = this.driver;
    const memory = allocDemoMemory(d, kind);
    this.#memories.push(memory);
    const poolsSent = new Set<PoolHandle>();
    const out: KindExport[] = [];
    for (let i = 0; i < count; i++) {
      const { ptr } = memory.alloc(size).view(size);
      const info = d.memoryKind(ptr);
      const e: KindExport = { kind, deviceUuid: this.deviceUuid, ptr, size, bufferId: info.bufferId };
      if (kind === 'legacy') {
        e.handle = d.ipcGetMemHandle(ptr);
      } else if (kind === 'pool') {
        const pool = info.pool!;
        const poolFd = !poolsSent.has(pool);
        if (poolFd) {
          await this.#send(d.memPoolExport(pool));
          poolsSent.add(pool);
        }
        e.pool = { data: d.memPoolExportPointer(ptr), poolId: `pool-${pool}`, poolFd };
      } else {
        const ex = d.vmmExport(ptr, size);
        for (const c of ex.chunks) await this.#send(c.fd);
        e.vmm = { base: ex.base, size: ex.size, chunks: ex.chunks.map((c) => ({ offset: c.offset, size: c.size })) };
      }
      out.push(e);
    }
    return out;
  }

  /** Frees everything exported (rank 1 has released its imports by then). */
  unexport(): void {
    for (const m of this.#memories.splice(0)) m.freeAll();
  }

  close(): void {
    this.unexport();
    this.#channel?.close();
    this.#listener?.close();
  }

  /** Sends `fd` and closes this process's copy (the peer holds its own once sent). */
  async #send(fd: number): Promise<void> {
    try {
      if (!this.#channel) throw new Error('no descriptor channel: fd-listen and fd-accept first');
      await this.#channel.send(fd, Uint8Array.of(1));
    } finally {
      this.driver.closeFd(fd);
    }
  }
}

// ------------------------------------------------------------------ rank 1

/** Rank 1's side: receives descriptors, imports, measures, undoes. */
export class KindImporter {
  #channel: FdChannel | undefined;
  readonly #inbox: FdMessage[] = [];
  readonly #waiting: Array<(m: FdMessage) => void> = [];

  constructor(
    private readonly driver: CudaDriver,
    private readonly device: number,
  ) {}

  async connect(path: string, token: Uint8Array): Promise<void> {
    const { FdChannel } = await import('../channel/fd-channel.js');
    this.#channel = await FdChannel.connect(path, token);
    this.#channel.start({
      message: (m) => {
        const w = this.#waiting.shift();
        if (w) w(m);
        else this.#inbox.push(m);
      },
    });
  }

  close(): void {
    for (const m of this.#inbox.splice(0)) if (m.fd !== undefined) this.driver.closeFd(m.fd);
    this.#channel?.close();
  }

  /** Imports every export, timing all but the first; hits on a HandlePool holding the first. */
  async open(exports: KindExport[], batches: number, perBatch: number): Promise<KindOpenResult> {
    const d = this.driver;
    const pools = new Map<string, PoolHandle>();
    const result: KindOpenResult = { openUs: [], closeUs: [], hitNs: [] };
    const handlePool = new HandlePool(d);
    /** Pool imports the handle pool took over (it releases them on close). */
    const handedOver = new Set<string>();
    try {
      for (const [i, e] of exports.entries()) {
        const fds = await this.#descriptors(e);
        try {
          if (e.pool?.poolFd) {
            const t0 = process.hrtime.bigint();
            pools.set(e.pool.poolId, d.memPoolImport(fds.shift()!, { device: this.ordinalOf(e.deviceUuid) }));
            result.poolImportUs = micros(t0);
          }
          if (i === 0) {
            const req = this.#request(e, fds, pools, handedOver);
            // Hits while a lease is held, as for a message in flight beside another: the handle pool keeps a
            // pool pointer only while it is in use (HandlePool.releaseEntry), the other kinds after their use too.
            const held = await handlePool.acquireImport(req);
            try {
              for (let b = 0; b <= batches; b++) {
                const t0 = process.hrtime.bigint();
                for (let k = 0; k < perBatch; k++) handlePool.lookupImport(req)!.release();
                if (b > 0) result.hitNs.push(Number(process.hrtime.bigint() - t0) / perBatch); // the first batch warms the JIT
              }
            } finally {
              held.release();
            }
            continue;
          }
          let t0 = process.hrtime.bigint();
          const undo = this.#import(e, fds, pools);
          result.openUs.push(micros(t0));
          t0 = process.hrtime.bigint();
          undo.release();
          result.closeUs.push(micros(t0));
        } finally {
          for (const fd of fds) d.closeFd(fd);
        }
      }
    } finally {
      handlePool.close(); // undoes the mapping kept for the hits, and the pool import it took over
      for (const [id, p] of pools) if (!handedOver.has(id)) d.memPoolRelease(p);
    }
    return result;
  }

  /** Back-to-back cuMemcpyAsync from an open mapping of `e` into local memory, timed by CUDA events. */
  async rawCopy(e: KindExport, repeat: Repeat): Promise<TimedResult> {
    const d = this.driver;
    const pools = new Map<string, PoolHandle>();
    const fds = await this.#descriptors(e);
    let mapping: { ptr: DevicePtr; release(): void };
    try {
      if (e.pool?.poolFd) pools.set(e.pool.poolId, d.memPoolImport(fds.shift()!, { device: this.ordinalOf(e.deviceUuid) }));
      mapping = this.#import(e, fds, pools);
    } finally {
      for (const fd of fds) d.closeFd(fd);
    }
    const stream = d.streamCreate();
    const start = d.eventCreate();
    const end = d.eventCreate();
    const dst = d.memAlloc(e.size);
    try {
      const src = mapping.ptr;
      for (let i = 0; i < repeat.warmup; i++) d.memcpyAsync(dst, src, e.size, stream);
      d.streamSynchronize(stream);
      d.eventRecord(start, stream);
      for (let i = 0; i < repeat.iters; i++) d.memcpyAsync(dst, src, e.size, stream);
      d.eventRecord(end, stream);
      d.eventSynchronize(end);
      return { seconds: d.eventElapsedTime(start, end) / 1000, bytes: e.size * repeat.iters };
    } finally {
      d.memFree(dst);
      d.eventDestroy(start);
      d.eventDestroy(end);
      d.streamDestroy(stream);
      mapping.release();
      for (const p of pools.values()) d.memPoolRelease(p);
    }
  }

  /** The descriptors `e` comes with, in order (pool descriptor first). */
  async #descriptors(e: KindExport): Promise<number[]> {
    const n = e.vmm ? e.vmm.chunks.length : e.pool?.poolFd ? 1 : 0;
    const fds: number[] = [];
    for (let i = 0; i < n; i++) {
      const m = this.#inbox.shift() ?? (await new Promise<FdMessage>((resolve) => this.#waiting.push(resolve)));
      if (m.fd === undefined) {
        for (const fd of fds) this.driver.closeFd(fd);
        throw m.lost ?? new Error('a descriptor message came without its descriptor');
      }
      fds.push(m.fd);
    }
    return fds;
  }

  /** The driver import of `e`; `ptr` is where e.ptr is mapped here. */
  #import(e: KindExport, fds: number[], pools: Map<string, PoolHandle>): { ptr: DevicePtr; release(): void } {
    const d = this.driver;
    if (e.handle) {
      const ptr = d.ipcOpenMemHandle(e.handle);
      return { ptr, release: () => d.ipcCloseMemHandle(ptr) };
    }
    if (e.pool) {
      const ptr = d.memPoolImportPointer(pools.get(e.pool.poolId)!, e.pool.data);
      return { ptr, release: () => d.memPoolReleasePointer(ptr) };
    }
    const v = e.vmm!;
    const im = d.vmmImport(
      v.chunks.map((c, k) => ({ fd: fds[k]!, offset: c.offset, size: c.size })),
      { device: this.ordinalOf(e.deviceUuid) },
    );
    return { ptr: im.ptr + (e.ptr - v.base), release: () => d.vmmRelease(im.ptr) };
  }

  /** The exporter's device as an ordinal of this process (it may differ from ours: the memory-across suite). */
  ordinalOf(uuid: string): number {
    const d = this.driver;
    for (let i = 0; i < d.deviceCount(); i++) if (d.deviceInfo(i).uuid === uuid) return i;
    return this.device;
  }

  /** What a data path would give the handle pool for `e`. */
  #request(e: KindExport, fds: number[], pools: Map<string, PoolHandle>, handedOver: Set<string>): ImportRequest {
    const d = this.driver;
    if (e.handle) {
      const handle = e.handle;
      return {
        kind: 'legacy-ipc',
        deviceUuid: e.deviceUuid,
        base: e.ptr,
        size: e.size,
        bufferId: e.bufferId,
        identity: handle,
        open: () => d.ipcOpenMemHandle(handle),
      };
    }
    if (e.pool) {
      const { data, poolId } = e.pool;
      return {
        kind: 'pool',
        deviceUuid: e.deviceUuid,
        base: e.ptr,
        size: e.size,
        bufferId: e.bufferId,
        identity: data,
        // The pool was imported above (its descriptor came once): the handle pool shares that import.
        peerPool: {
          key: poolId,
          open: () => {
            handedOver.add(poolId);
            return pools.get(poolId)!;
          },
        },
        open: (pool) => d.memPoolImportPointer(pool!, data),
      };
    }
    const v = e.vmm!;
    const chunks = v.chunks.map((c, k) => ({ fd: fds[k]!, offset: c.offset, size: c.size }));
    return {
      kind: 'vmm',
      deviceUuid: e.deviceUuid,
      base: v.base,
      size: v.size,
      bufferId: e.bufferId,
      open: () => d.vmmImport(chunks, { device: this.ordinalOf(e.deviceUuid) }).ptr,
    };
  }
}

const micros = (t0: bigint): number => Number(process.hrtime.bigint() - t0) / 1000;
