/** The sender's export table: reuse while the allocation lives, rebuild when its address is reused. */
import { afterEach, describe, expect, it } from 'vitest';
import { SimulatedCudaDriver } from '../../../src/cuda/sim-driver.js';
import { ExportTable } from '../../../src/exports.js';

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
