/**
 * GpuHold (src/progress/gpu-hold.ts) and GpuWork.hold: a resource copies use
 * is released only once its holder let go and the last copy using it
 * completed — also when the endpoint's GPU work closes first.
 */
import { describe, expect, it } from 'vitest';
import { SimulatedCudaDriver } from '../../../src/cuda/sim-driver.js';
import { GpuWork } from '../../../src/gpu/gpu-work.js';
import { GpuHold } from '../../../src/gpu/gpu-hold.js';

describe('GpuHold', () => {
  it('released at close when idle; else by the last use, exactly once', () => {
    let released = 0;
    const idle = new GpuHold(() => released++);
    idle.close();
    idle.close();
    expect(released).toBe(1);
    released = 0;
    const busy = new GpuHold(() => released++);
    busy.use();
    busy.use();
    busy.close();
    expect(released).toBe(0);
    busy.done();
    expect(released).toBe(0);
    busy.done();
    expect(released).toBe(1);
  });

  it('a release that throws (the driver closed) is swallowed, and leaves its owner', () => {
    const owner = new Set<GpuHold>();
    const h = new GpuHold(() => {
      throw new Error('driver closed');
    }, owner);
    expect(owner.size).toBe(1);
    expect(() => h.close()).not.toThrow();
    expect(owner.size).toBe(0);
  });

  it('GpuWork.close lets go of its holds: a pinned buffer with a copy in flight is unregistered only after that copy completed', async () => {
    const d = new SimulatedCudaDriver({ env: {} });
    d.init();
    d.setDevice(0);
    try {
      const g = new GpuWork(d, 0);
      const host = new Uint8Array(4096);
      const unregister = d.hostRegister(host);
      const hold = g.hold(unregister);
      const src = d.memAlloc(4096);
      d.inject({ copyDelayMs: 50 });
      d.memcpyDtoHAsync(host, src, g.stream);
      hold.use();
      let completed = false;
      g.whenDone(g.stream, Infinity, () => {
        completed = true;
        hold.done();
      });
      g.close(new Error('endpoint closed'));
      expect(hold.inUse).toBe(1); // not released under the copy
      await new Promise<void>((resolve) => {
        const t = setInterval(() => completed && (clearInterval(t), resolve()), 5);
      });
      expect(d.lifetimeViolations).toEqual([]);
    } finally {
      d.close();
    }
  });

  it('a copy given the holds it uses takes a use of each until its callback ran; a release waits for it, and runs after the callback', async () => {
    const d = new SimulatedCudaDriver({ env: {} });
    d.init();
    d.setDevice(0);
    try {
      const g = new GpuWork(d, 0);
      const order: string[] = [];
      const a = g.hold(() => order.push('a released'));
      const b = g.hold(() => order.push('b released'));
      const src = d.memAlloc(4096);
      const dst = d.memAlloc(4096);
      d.inject({ copyDelayMs: 20 });
      let done!: () => void;
      const completed = new Promise<void>((r) => (done = r));
      g.copy(
        g.stream,
        dst,
        src,
        4096,
        () => {
          order.push(`copied (a in use ${a.inUse}, b in use ${b.inUse})`);
          a.close(); // the holder lets go inside the completion: released only after it ran
          done();
        },
        [a, b],
      );
      expect([a.inUse, b.inUse]).toEqual([1, 1]);
      b.close();
      expect(order).toEqual([]); // b is in use: not released under the copy
      await completed;
      expect(order).toEqual(['copied (a in use 1, b in use 1)', 'a released', 'b released']);
      // A large copy whose launch fails takes no use (it throws; nothing completes to give one back).
      const c = g.hold(() => order.push('c released'));
      expect(() => g.copy(g.stream, dst, 0xdeadn, 8 << 20, () => {}, c)).toThrow();
      c.close();
      expect(order.at(-1)).toBe('c released');
      expect(d.lifetimeViolations).toEqual([]);
      g.close();
    } finally {
      d.close();
    }
  });
});
