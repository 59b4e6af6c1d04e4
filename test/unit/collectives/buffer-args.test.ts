/**
 * Buffers that know their size: driver.memAllocBuffer and comm.alloc give
 * `{ ptr, length, device }` objects that every collective takes beside a
 * bare pointer; their extent is checked from the object with no driver
 * query; a freed one, one of another device, and a count past its length
 * are typed errors naming the field. close() frees comm.alloc's buffers once
 * the calls left the GPU, and closes only what the communicator made.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { offsetDevice } from '../../../src/buffers.js';
import { bufferArg } from '../../../src/collectives/buffer-arg.js';
import { Communicator } from '../../../src/collectives/communicator.js';
import { DeviceAllocation } from '../../../src/cuda/device-allocation.js';
import { SimulatedCudaDriver } from '../../../src/cuda/sim-driver.js';
import { ArgumentRangeError, ArgumentTypeError, CommunicatorAbortedError, DeviceBufferError } from '../../../src/errors.js';
import { allocationRanges } from '../../../src/paths/allocation-ranges.js';
import { makeWorld, type World } from '../../helpers/comm-world.js';

let w: World | undefined;
const drivers: SimulatedCudaDriver[] = [];
afterEach(async () => {
  await w?.close();
  w = undefined;
  for (const d of drivers.splice(0)) d.close();
});

function simDriver(): SimulatedCudaDriver {
  const d = new SimulatedCudaDriver({ env: {} });
  drivers.push(d);
  d.init();
  d.setDevice(0);
  return d;
}

const f32 = (xs: number[]) => new Uint8Array(new Float32Array(xs).buffer);
function readF32(driver: { memcpyDtoH(dst: ArrayBufferView, src: bigint): void }, buf: { ptr: bigint; length: number }): number[] {
  const out = new Uint8Array(buf.length);
  driver.memcpyDtoH(out, buf.ptr);
  return [...new Float32Array(out.buffer)];
}

async function failure(p: Promise<unknown>): Promise<CommunicatorAbortedError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(CommunicatorAbortedError);
  return err as CommunicatorAbortedError;
}

describe('driver.memAllocBuffer', () => {
  it('knows its pointer, length and device; free(), memFree(ptr) and closing the driver each leave it freed', () => {
    const d = simDriver();
    const a = d.memAllocBuffer(256);
    expect(a).toBeInstanceOf(DeviceAllocation);
    expect(a).toMatchObject({ length: 256, device: 0, freed: false });
    expect(d.memGetAddressRange(a.ptr)).toEqual({ base: a.ptr, size: 256 });
    a.free();
    expect(a.freed).toBe(true);
    expect(() => d.memGetAddressRange(a.ptr)).toThrow(/not in any allocation/);
    a.free(); // twice: nothing

    const b = d.memAllocBuffer(64);
    d.memFree(b.ptr); // freed behind the object's back: it knows
    expect(b.freed).toBe(true);

    // A new allocation (perhaps at the same address): the old object stays freed.
    const c = d.memAllocBuffer(64);
    expect(c.freed).toBe(false);
    expect(b.freed).toBe(true);
    d.setDevice(1);
    const e = d.memAllocBuffer(32);
    expect(e.device).toBe(1);
    d.close();
    expect([c.freed, e.freed]).toEqual([true, true]);
  });

  it('views share the allocation liveness, stay inside it, and cannot be freed', () => {
    const d = simDriver();
    const a = d.memAllocBuffer(1024);
    const v = a.view(256, 512);
    expect(v).toMatchObject({ ptr: a.ptr + 256n, length: 512, device: 0, viewOf: a });
    expect(a.view(1000)).toMatchObject({ ptr: a.ptr + 1000n, length: 24 });
    expect(v.view(500).viewOf).toBe(a);
    expect(() => a.view(1000, 25)).toThrow(ArgumentRangeError);
    // offsetDevice (the endpoints' way to name part of a buffer) keeps it a view.
    expect(offsetDevice(a, 256, 512)).toMatchObject({ ptr: a.ptr + 256n, length: 512, viewOf: a });
    expect(() => v.free()).toThrow(ArgumentTypeError);
    a.free();
    expect(v.freed).toBe(true);
  });
});

describe('bufferArg (every call converts its buffers with it)', () => {
  it('an own allocation is checked with no driver query; a bare pointer or a foreign object asks the driver', () => {
    const d = simDriver();
    const scope = { driver: d, device: 0, known: allocationRanges(d) };
    const a = d.memAllocBuffer(4096);
    const asked = [vi.spyOn(d, 'bufferId'), vi.spyOn(d, 'pointerAttributes'), vi.spyOn(d, 'memGetAddressRange')];
    expect(bufferArg(scope, 'send', a, 4096, 'f32')).toBe(a.ptr);
    expect(bufferArg(scope, 'send', a.view(1024), 3072, 'f64')).toBe(a.ptr + 1024n);
    expect(asked.map((s) => s.mock.calls.length)).toEqual([0, 0, 0]);
    expect(bufferArg(scope, 'send', a.ptr, 4096, 'f32')).toBe(a.ptr);
    expect(asked[0]!.mock.calls.length).toBe(1);
    expect(bufferArg(scope, 'recv', { ptr: a.ptr, length: 4096 }, 4096, 'f32')).toBe(a.ptr);
    expect(asked[0]!.mock.calls.length).toBe(2);
    for (const s of asked) s.mockRestore();
    a.free();
  });

  it('refuses, naming the field: a count past the length, a freed buffer, another device, misalignment, a non-buffer', () => {
    const d = simDriver();
    const scope = { driver: d, device: 0, known: allocationRanges(d) };
    const a = d.memAllocBuffer(1024);
    expect(() => bufferArg(scope, 'recv', a, 1028, 'f32')).toThrow(ArgumentRangeError);
    expect(() => bufferArg(scope, 'recv', a, 1028, 'f32')).toThrow(/^recv is 1024 bytes long, and the call touches 1028 bytes of it/);
    // A foreign object is held to its own length, even inside a longer allocation.
    expect(() => bufferArg(scope, 'send', { ptr: a.ptr, length: 16 }, 32, 'u8')).toThrow(/^send is 16 bytes long/);
    expect(() => bufferArg(scope, 'send', { ptr: a.ptr, length: 16, device: 1 }, 16, 'u8')).toThrow(
      expect.objectContaining({ code: 'SMCUDA_BUFFER_DEVICE', message: expect.stringMatching(/^send is memory of device 1/) }),
    );
    expect(() => bufferArg(scope, 'send', a.view(2), 8, 'f32')).toThrow(/^send: device pointers must be aligned/);
    expect(() => bufferArg(scope, 'buf', 'x', 8, 'f32')).toThrow(ArgumentTypeError);
    d.setDevice(1);
    const other = d.memAllocBuffer(64);
    d.setDevice(0);
    expect(() => bufferArg(scope, 'recv', other, 64, 'f32')).toThrow(DeviceBufferError);
    a.free();
    expect(() => bufferArg(scope, 'send', a, 4, 'f32')).toThrow(
      expect.objectContaining({ code: 'SMCUDA_BUFFER_FREED', message: expect.stringMatching(/^send \(/) }),
    );
    expect(() => bufferArg(scope, 'send', a.view(0, 8), 4, 'f32')).toThrow(expect.objectContaining({ code: 'SMCUDA_BUFFER_FREED' }));
    other.free();
  });
});

describe('Communicator calls take buffer objects', () => {
  it('every collective, on comm.alloc buffers (views for the in-place ones), mixed with bare pointers, every element checked', async () => {
    w = await makeWorld(2);
    const comms = w.comms;
    const put = (r: number, buf: { ptr: bigint }, xs: number[]) => w!.sides[r]!.driver.memcpyHtoD(buf.ptr, f32(xs));
    const get = (r: number, buf: { ptr: bigint; length: number }) => readF32(w!.sides[r]!.driver, buf);
    const send = comms.map((c) => c.alloc(16));
    const recv = comms.map((c) => c.alloc(32));
    send.forEach((b, r) => put(r, b, [1 + r, 2 + r, 3 + r, 4 + r]));

    await Promise.all(comms.map((c, r) => c.allreduce({ send: send[r]!, recv: recv[r]!.ptr, count: 4, dtype: 'f32', op: 'sum' })));
    for (const r of [0, 1]) expect(get(r, recv[r]!.view(0, 16))).toEqual([3, 5, 7, 9]);

    await Promise.all(comms.map((c, r) => c.broadcast({ send: send[r]!, recv: recv[r]!.view(16), count: 4, dtype: 'f32', root: 1 })));
    for (const r of [0, 1]) expect(get(r, recv[r]!.view(16))).toEqual([2, 3, 4, 5]);

    await Promise.all(comms.map((c, r) => c.reduce({ send: send[r]!, recv: recv[r]!, count: 4, dtype: 'f32', op: 'max', root: 0 })));
    expect(get(0, recv[0]!.view(0, 16))).toEqual([2, 3, 4, 5]);

    // In place: each rank's input is its block of recv.
    send.forEach((_, r) => put(r, recv[r]!.view(8 * r, 8), [10 * r, 10 * r + 1]));
    await Promise.all(comms.map((c, r) => c.allgather({ send: recv[r]!.view(8 * r, 8), recv: recv[r]!.view(0, 16), count: 2, dtype: 'f32' })));
    for (const r of [0, 1]) expect(get(r, recv[r]!.view(0, 16))).toEqual([0, 1, 10, 11]);

    send.forEach((b, r) => put(r, b, [1, 2, 3 + r, 4 + r]));
    await Promise.all(comms.map((c, r) => c.reduceScatter({ send: send[r]!, recv: recv[r]!.view(0, 8), count: 2, dtype: 'f32', op: 'sum' })));
    expect(get(0, recv[0]!.view(0, 8))).toEqual([2, 4]);
    expect(get(1, recv[1]!.view(0, 8))).toEqual([7, 9]);

    send.forEach((b, r) => put(r, b, [r, r, 10 + r, 10 + r]));
    await Promise.all(comms.map((c, r) => c.alltoall({ send: send[r]!, count: 2, dtype: 'f32' }))); // in place
    expect(get(0, send[0]!)).toEqual([0, 0, 1, 1]);
    expect(get(1, send[1]!)).toEqual([10, 10, 11, 11]);
  });

  it('a count past a buffer object is an ArgumentRangeError naming the field, thrown at once; every rank aborts with its code', async () => {
    w = await makeWorld(2);
    const [c0, c1] = w.comms as [Communicator, Communicator];
    const other = c1.allgather({ send: c1.alloc(16), recv: c1.alloc(32), count: 4, dtype: 'f32' });
    expect(() => c0.allgather({ send: c0.alloc(16), recv: c0.alloc(24), count: 4, dtype: 'f32' })).toThrow(
      expect.objectContaining({ code: 'SMCUDA_OUT_OF_RANGE', message: expect.stringMatching(/^recv is 24 bytes long, and the call touches 32 bytes/) }),
    );
    const e = await failure(other);
    expect(e.causeCode).toBe('SMCUDA_OUT_OF_RANGE');
    expect(e.failedRank).toBe(0);
  });

  it('a freed buffer, or one of another device, fails the call with DeviceBufferError before anything is queued', async () => {
    w = await makeWorld(2);
    const [c0, c1] = w.comms as [Communicator, Communicator];
    const gone = c0.alloc(64);
    gone.free();
    const other = c1.allreduce({ send: c1.alloc(64), count: 16, dtype: 'f32', op: 'sum' });
    expect(() => c0.allreduce({ send: gone, count: 16, dtype: 'f32', op: 'sum' })).toThrow(expect.objectContaining({ code: 'SMCUDA_BUFFER_FREED' }));
    expect((await failure(other)).causeCode).toBe('SMCUDA_BUFFER_FREED');
    await w.close();

    w = await makeWorld(2, { devices: 2 }); // rank 0 on device 0
    const d0 = w.sides[0]!.driver;
    d0.setDevice(1);
    const elsewhere = d0.memAllocBuffer(64);
    d0.setDevice(0);
    const [e0, e1] = w.comms as [Communicator, Communicator];
    const pending = e1.broadcast({ recv: e1.alloc(64), count: 16, dtype: 'f32', root: 1 });
    expect(() => e0.broadcast({ recv: elsewhere, count: 16, dtype: 'f32', root: 1 })).toThrow(
      expect.objectContaining({
        code: 'SMCUDA_BUFFER_DEVICE',
        message: expect.stringMatching(/^recv is memory of device 1, and this communicator runs on device 0/),
      }),
    );
    expect((await failure(pending)).causeCode).toBe('SMCUDA_BUFFER_DEVICE');
    elsewhere.free();
  });

  it('comm.alloc allocates on the communicator device, whatever device is current', async () => {
    w = await makeWorld(2, { devices: 2 });
    const d1 = w.sides[1]!.driver;
    d1.setDevice(0);
    const b = w.comms[1]!.alloc(128);
    expect(b.device).toBe(1);
    expect(d1.currentDevice()).toBe(0); // restored
    d1.setDevice(1);
    expect(d1.pointerAttributes(b.ptr).device).toBe(1);
  });
});

describe('close() and the buffers', () => {
  it("frees comm.alloc's buffers after the calls in flight completed; the driver passed in and its own buffers stay the caller's", async () => {
    w = await makeWorld(2);
    const bufs = w.comms.map((c) => c.alloc(4096));
    const mine = w.sides.map((s) => s.driver.memAllocBuffer(64));
    // Closed with a call in flight on every rank: the call completes, then the buffers go.
    const calls = w.comms.map((c, r) => c.allreduce({ send: bufs[r]!, count: 1024, dtype: 'f32', op: 'sum' }));
    await Promise.all(w.comms.map((c) => c.close()));
    for (const r of await Promise.all(calls)) expect(r.op).toBe('allreduce');
    for (const [r, s] of w.sides.entries()) {
      expect(bufs[r]!.freed).toBe(true);
      expect(() => s.driver.memGetAddressRange(bufs[r]!.ptr)).toThrow(/not in any allocation/);
      expect(mine[r]!.freed).toBe(false);
      expect(s.driver.memGetAddressRange(mine[r]!.ptr).size).toBe(64);
      expect(s.driver.lifetimeViolations).toEqual([]); // nothing was freed under GPU work
      mine[r]!.free();
    }
    expect(() => w!.comms[0]!.alloc(8)).toThrow(expect.objectContaining({ code: 'SMCUDA_CLOSED' }));
  });

  it('an abort frees nothing of alloc() (the data stays readable); close() then does', async () => {
    w = await makeWorld(2);
    const b = w.comms[0]!.alloc(16);
    w.sides[0]!.driver.memcpyHtoD(b.ptr, f32([1, 2, 3, 4]));
    w.comms[1]!.abort(new Error('stop'));
    await failure(w.comms[0]!.barrier());
    await new Promise((r) => setTimeout(r, 50)); // the abort's clean-up runs
    expect(readF32(w.sides[0]!.driver, b)).toEqual([1, 2, 3, 4]);
    await w.comms[0]!.close();
    expect(b.freed).toBe(true);
  });

  it('create({ driver }): close() closes the Transport it made, not the driver; create() without one closes the driver it opened', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'smcuda-buffers-'));
    try {
      const given = [simDriver(), simDriver()];
      const comms = await Promise.all([0, 1].map((rank) => Communicator.create({ rank, size: 2, dir, driver: given[rank]!, token: 'buffers' })));
      const kept = given.map((d) => d.memAllocBuffer(32));
      const made = comms.map((c) => c.alloc(32));
      await Promise.all(comms.map((c) => c.close()));
      for (const [r, d] of given.entries()) {
        expect(made[r]!.freed).toBe(true);
        expect(kept[r]!.freed).toBe(false);
        expect(d.isReady()).toBe(true);
        d.memcpyHtoD(kept[r]!.ptr, new Uint8Array(32)); // still usable
        kept[r]!.free();
      }

      const owned = await Promise.all([0, 1].map((rank) => Communicator.create({ rank, size: 2, dir, driver: 'sim', token: 'buffers2' })));
      const theirs = owned.map((c) => c.driver.memAllocBuffer(32));
      await Promise.all(owned.map((c) => c.close()));
      for (const [r, c] of owned.entries()) {
        expect(c.driver.isReady()).toBe(false);
        expect(theirs[r]!.freed).toBe(true); // the driver closed: the object says so instead of pointing at nothing
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
