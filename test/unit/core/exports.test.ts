/** The sender's export table: reuse while the allocation lives, rebuild when its address is reused. */
import { afterEach, describe, expect, it } from 'vitest';
import { SimulatedCudaDriver } from '../../../src/cuda/sim-driver.js';
import { ExportTable, poolAllocationRange } from '../../../src/exports.js';

let d: SimulatedCudaDriver;
afterEach(() => d.close());

describe('ExportTable', () => {
  it('reuses the entry for the same pointer while the allocation lives', () => {
    d = new SimulatedCudaDriver();
    d.init();
    d.setDevice(0);
    const p = d.memAlloc(1 << 20);
    const t = new ExportTable(d);
    const a = t.lookup(p + 4096n);
    expect(a.base).toBe(p);
    expect(a.size).toBe(1 << 20);
    expect(t.lookup(p + 4096n)).toBe(a);
  });

  it('a free and a new allocation at the same address: new buffer id and handle, never the old entry', () => {
    d = new SimulatedCudaDriver();
    d.init();
    d.setDevice(0);
    const t = new ExportTable(d);
    const p = d.memAlloc(1 << 20);
    const before = t.lookup(p);
    d.memFree(p);
    const q = d.memAlloc(1 << 20);
    expect(q).toBe(p); // the simulator reuses addresses, as the real driver tends to
    const after = t.lookup(q);
    expect(after).not.toBe(before);
    expect(after.bufferId).not.toBe(before.bufferId);
    expect(Buffer.from(after.handle).equals(Buffer.from(before.handle))).toBe(false);
  });

  it('a pool allocation over the bound is staged, with why; one within it is shared by descriptor', () => {
    d = new SimulatedCudaDriver();
    d.init();
    d.setDevice(0);
    const t = new ExportTable(d, 256, 2 << 20);
    const s = d.streamCreate();
    const pool = d.memPoolCreate();
    const small = d.memAllocFromPoolAsync(2 << 20, pool, s);
    const large = d.memAllocFromPoolAsync(4 << 20, pool, s);
    d.streamSynchronize(s);
    expect(t.lookup(small)).toMatchObject({ kind: 'pool', base: small, size: 2 << 20, pool });
    const big = t.lookup(large + 4096n);
    expect(big).toMatchObject({ kind: 'other', base: large, size: 4 << 20 });
    expect(big.reason).toMatch(/pool allocation over 5 GiB.*killed the importing process/);
    expect(big.pool).toBeUndefined();
    d.memFreeAsync(small, s);
    d.memFreeAsync(large, s);
    d.streamSynchronize(s);
    d.memPoolDestroy(pool);
    d.streamDestroy(s);
  });

  it('keeps at most `limit` pointers, dropping the least recently used', () => {
    d = new SimulatedCudaDriver();
    d.init();
    d.setDevice(0);
    const t = new ExportTable(d, 2);
    const p = d.memAlloc(1 << 20);
    const e0 = t.lookup(p);
    t.lookup(p + 1n);
    t.lookup(p); // p is now the most recent
    t.lookup(p + 2n); // evicts p + 1n
    expect(t.lookup(p)).toBe(e0);
    t.forget(p);
    expect(t.lookup(p)).not.toBe(e0);
  });
});

describe('poolAllocationRange: the allocation of pool memory, whatever segment cuMemGetAddressRange names', () => {
  // A pool's segments of 1 MiB at 0x10_0000_0000, holding allocations (by buffer
  // id) that start and end inside segments and span several of them.
  const SEG = 1 << 20;
  const BASE = 0x10_0000_0000n;
  const allocs = [
    { id: 1n, start: BASE + 0n, end: BASE + 300_000n },
    { id: 2n, start: BASE + 300_032n, end: BASE + BigInt(3 * SEG + 12_345) }, // from inside segment 0 to inside segment 3
    { id: 3n, start: BASE + BigInt(3 * SEG + 12_800), end: BASE + BigInt(4 * SEG) },
  ];
  // Probes outside any allocation go through pointerAttributes, as the native
  // driver's cuPointerGetAttributes: the singular bufferId call must not be
  // used for them (a failed driver call per probe under compute-sanitizer).
  const driver = {
    bufferId: () => {
      throw new Error('poolAllocationRange probes with pointerAttributes');
    },
    pointerAttributes: (p: bigint) => {
      const a = allocs.find((x) => x.start <= p && p < x.end);
      if (!a) throw new Error('not device memory');
      return { bufferId: a.id, device: 0, memoryType: 'device' };
    },
    memGetAddressRange: (p: bigint) => {
      if (p < BASE || p >= BASE + BigInt(4 * SEG)) throw new Error('CUDA_ERROR_NOT_FOUND');
      return { base: BASE + ((p - BASE) / BigInt(SEG)) * BigInt(SEG), size: SEG };
    },
  } as unknown as SimulatedCudaDriver;

  it.each([
    ['inside its first segment', allocs[1]!.start + 10n],
    ['two segments on', BASE + BigInt(2 * SEG + 77)],
    ['its last byte', allocs[1]!.end - 1n],
    ['its first byte', allocs[1]!.start],
  ])('from a pointer %s', (_what, ptr) => {
    const seg = driver.memGetAddressRange(ptr);
    expect(poolAllocationRange(driver, ptr, 2n, seg)).toEqual({ base: allocs[1]!.start, size: Number(allocs[1]!.end - allocs[1]!.start) });
  });

  it('an allocation that fills segments whole, and one at the start of the space', () => {
    expect(poolAllocationRange(driver, BASE + BigInt(3 * SEG + 20_000), 3n, driver.memGetAddressRange(BASE + BigInt(3 * SEG + 20_000)))).toEqual({
      base: allocs[2]!.start,
      size: Number(allocs[2]!.end - allocs[2]!.start),
    });
    expect(poolAllocationRange(driver, BASE + 5n, 1n, driver.memGetAddressRange(BASE))).toEqual({ base: BASE, size: 300_000 });
  });
});
