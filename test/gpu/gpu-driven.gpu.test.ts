/**
 * GPU-driven work on the native driver (issue 25 item 1), on a real GPU:
 *  - stream waits and writes, 32 and 64 bit: a stream blocked on a word is
 *    released by a write from another stream (and, across processes, by a
 *    peer that opened the memory by IPC handle);
 *  - batches of memory operations;
 *  - capture of write-value + memcpyAsync + kernel launch into a graph,
 *    replayed 1000 times, each replay's bytes checked;
 *  - the shipped PTX loaded and launched; each kernel argument type arriving
 *    as the PTX declares it; what the first load costs, with an empty and a
 *    warm JIT cache (CUDA_CACHE_PATH), in child processes.
 * Skipped, visibly, where no GPU is usable. Timings are printed, not asserted.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CudaDriver, DevicePtr, StreamHandle } from '../../src/cuda/driver.js';
import { FILL_PTX } from '../../src/kernels/fill.ptx.js';
import { ARGS_PROBE_PTX } from '../fixtures/kernels/args-probe.ptx.js';
import { probeNative } from './native-probe.js';

const p = await probeNative();
const run = promisify(execFile);
const root = fileURLToPath(new URL('../..', import.meta.url));
const peer = join(root, 'test', 'fixtures', 'gpu-driven-peer.mjs');

/** Bytes of device memory, read back. */
function read(d: CudaDriver, ptr: DevicePtr, bytes: number): DataView {
  const b = new Uint8Array(bytes);
  d.memcpyDtoH(b, ptr);
  return new DataView(b.buffer);
}

/** Files (recursively) and bytes under a folder. */
function folderSize(dir: string): { files: number; bytes: number } {
  let files = 0;
  let bytes = 0;
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    const s = statSync(path);
    if (s.isDirectory()) {
      const inner = folderSize(path);
      files += inner.files;
      bytes += inner.bytes;
    } else {
      files += 1;
      bytes += s.size;
    }
  }
  return { files, bytes };
}

describe.skipIf(p.skip !== false)(`GPU-driven work on the native driver${p.skip ? ` (skipped: ${p.skip})` : ''}`, () => {
  let d: CudaDriver;
  let mem: DevicePtr;
  let s1: StreamHandle;
  let s2: StreamHandle;

  beforeAll(() => {
    d = p.make!();
    d.init();
    d.setDevice(0);
    mem = d.memAlloc(1 << 20);
    s1 = d.streamCreate();
    s2 = d.streamCreate();
  });
  afterAll(() => {
    d.streamDestroy(s2);
    d.streamDestroy(s1);
    d.memFree(mem);
    d.close();
  });

  /**
   * Resolves when `stream`'s work so far is done; if it is not within `ms`,
   * writes `release` from the host (so no stream stays stuck) and fails.
   */
  async function doneWithin(stream: StreamHandle, ms: number, release: () => void): Promise<void> {
    const ev = d.eventCreate({ disableTiming: true });
    d.eventRecord(ev, stream);
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([
        d.whenComplete(ev),
        new Promise((_, reject) => {
          timer = setTimeout(() => {
            release();
            reject(new Error(`stream still blocked after ${ms} ms`));
          }, ms);
        }),
      ]);
    } finally {
      clearTimeout(timer);
      d.streamSynchronize(stream);
      d.eventDestroy(ev);
    }
  }

  it('gpuDrivenStatus: every group there on this driver', () => {
    const s = d.gpuDrivenStatus();
    console.log('gpuDrivenStatus', JSON.stringify(s), 'driver', d.status().driverVersion, d.deviceInfo(0).name);
    expect(s).toMatchObject({ streamMemOps: true, memOps64: true, graphs: true, modules: true });
  });

  it('a stream waiting on a 32-bit word is released by a write from another stream', async () => {
    d.memsetD8(mem, 0, 64);
    d.streamWaitValue32(s1, mem, 7, 'geq');
    d.streamWriteValue32(s1, mem + 4n, 0xa11ce); // runs only once the wait is over
    const ev = d.eventCreate({ disableTiming: true });
    d.eventRecord(ev, s1);
    await new Promise((r) => setTimeout(r, 50));
    expect(d.eventQuery(ev)).toBe(false); // still held by the wait
    expect(read(d, mem, 8).getUint32(4, true)).toBe(0);
    d.streamWriteValue32(s2, mem, 6); // not enough for geq 7
    d.streamSynchronize(s2);
    await new Promise((r) => setTimeout(r, 20));
    expect(d.eventQuery(ev)).toBe(false);
    d.streamWriteValue32(s2, mem, 9);
    await doneWithin(s1, 10_000, () => d.memcpyHtoD(mem, Uint8Array.of(9, 0, 0, 0)));
    expect(read(d, mem, 8).getUint32(4, true)).toBe(0xa11ce);
    d.eventDestroy(ev);
  });

  it('64-bit: a wait for a value above 2^32 (eq) and the and/nor conditions', async () => {
    d.memsetD8(mem, 0, 64);
    const big = 0x1_0000_0005n;
    d.streamWaitValue64(s1, mem + 8n, big, 'eq');
    d.streamWriteValue64(s1, mem + 16n, 0xfeedn);
    d.streamWriteValue64(s2, mem + 8n, 5n); // low word alone is not the value
    d.streamSynchronize(s2);
    await new Promise((r) => setTimeout(r, 30));
    expect(read(d, mem, 24).getBigUint64(16, true)).toBe(0n);
    d.streamWriteValue64(s2, mem + 8n, big);
    await doneWithin(s1, 10_000, () => {
      const b = new Uint8Array(8);
      new DataView(b.buffer).setBigUint64(0, big, true);
      d.memcpyHtoD(mem + 8n, b);
    });
    expect(read(d, mem, 24).getBigUint64(16, true)).toBe(0xfeedn);

    // and: (*addr & value) != 0; nor: ~(*addr | value) != 0
    d.streamWriteValue32(s2, mem + 24n, 0b1010);
    d.streamSynchronize(s2);
    d.streamWaitValue32(s1, mem + 24n, 0b0010, 'and');
    if (d.gpuDrivenStatus().waitValueNor) d.streamWaitValue32(s1, mem + 24n, 0xffff0000, 'nor');
    d.streamWriteValue32(s1, mem + 28n, 1);
    await doneWithin(s1, 10_000, () => d.memcpyHtoD(mem + 24n, Uint8Array.of(2, 0, 0, 0)));
    expect(read(d, mem, 32).getUint32(28, true)).toBe(1);
  });

  it('a batch: wait, writes 32 and 64, barrier, in order, as one stream item', async () => {
    d.memsetD8(mem, 0, 64);
    d.streamBatchMemOp(s1, [
      { op: 'wait32', addr: mem, value: 2, condition: 'eq' },
      { op: 'write32', addr: mem + 8n, value: 5 },
      { op: 'write64', addr: mem + 16n, value: 0xabcdef0123456789n },
      { op: 'barrier' },
      { op: 'write32', addr: mem + 12n, value: 6 },
    ]);
    await new Promise((r) => setTimeout(r, 30));
    expect(read(d, mem, 24).getUint32(8, true)).toBe(0);
    d.streamBatchMemOp(s2, [{ op: 'write32', addr: mem, value: 2 }]);
    await doneWithin(s1, 10_000, () => d.memcpyHtoD(mem, Uint8Array.of(2, 0, 0, 0)));
    const v = read(d, mem, 24);
    expect([v.getUint32(8, true), v.getUint32(12, true), v.getBigUint64(16, true)]).toEqual([5, 6, 0xabcdef0123456789n]);
  });

  it('the fill kernel from the shipped PTX: any n, grid-stride; every argument type arrives as the PTX declares it', () => {
    const fill = d.moduleLoadData(FILL_PTX);
    const fn = d.moduleGetFunction(fill.module, 'smcuda_fill_u32');
    const n = 250_001; // not a multiple of the block
    d.memsetD8(mem, 0, (n + 1) * 4);
    d.launchKernel(
      fn,
      { grid: [64], block: [256] },
      [
        { type: 'ptr', value: mem },
        { type: 'u32', value: 0xdeadbeef },
        { type: 'u64', value: BigInt(n) },
      ],
      s1,
    );
    d.streamSynchronize(s1);
    const words = new Uint32Array(read(d, mem, (n + 1) * 4).buffer);
    expect(words.subarray(0, n).every((w) => w === 0xdeadbeef)).toBe(true);
    expect(words[n]).toBe(0); // not one past
    d.moduleUnload(fill.module);

    const probe = d.moduleLoadData(ARGS_PROBE_PTX);
    const pf = d.moduleGetFunction(probe.module, 'smcuda_args_probe');
    d.memsetD8(mem, 0, 48);
    d.launchKernel(
      pf,
      { grid: [1], block: [32] },
      [
        { type: 'ptr', value: mem },
        { type: 'u32', value: 0xfffffffe },
        { type: 'i32', value: -123456 },
        { type: 'f32', value: -0.375 },
        { type: 'f64', value: Math.PI },
        { type: 'i64', value: -(1n << 62n) - 7n },
        { type: 'u64', value: (1n << 64n) - 3n },
      ],
      s1,
    );
    d.streamSynchronize(s1);
    const v = read(d, mem, 48);
    expect([
      v.getUint32(0, true),
      v.getInt32(4, true),
      v.getFloat32(8, true),
      v.getFloat64(16, true),
      v.getBigInt64(24, true),
      v.getBigUint64(32, true),
    ]).toEqual([0xfffffffe, -123456, -0.375, Math.PI, -(1n << 62n) - 7n, (1n << 64n) - 3n]);
    d.moduleUnload(probe.module);
  });

  it('captures write-value + memcpyAsync + kernel launch into a graph and replays it 1000 times, each replay checked', () => {
    const fill = d.moduleLoadData(FILL_PTX);
    const fn = d.moduleGetFunction(fill.module, 'smcuda_fill_u32');
    const src = mem + 4096n;
    const region = mem + 8192n; // [0,4) marker, [16,32) copy of src, [32,64) filled
    const pattern = Uint8Array.from({ length: 16 }, (_, i) => 0xa0 + i);
    d.memcpyHtoD(src, pattern);
    d.memsetD8(region, 0, 64);
    const cs = d.streamCreate();
    d.streamBeginCapture(cs);
    expect(d.streamIsCapturing(cs)).toBe(true);
    d.streamWriteValue32(cs, region, 0xc0ffee);
    d.memcpyAsync(region + 16n, src, 16, cs);
    d.launchKernel(
      fn,
      { grid: [1], block: [32] },
      [
        { type: 'ptr', value: region + 32n },
        { type: 'u32', value: 0x5eed },
        { type: 'u64', value: 8n },
      ],
      cs,
    );
    const graph = d.streamEndCapture(cs);
    expect(d.streamIsCapturing(cs)).toBe(false);
    expect(read(d, region, 64).getUint32(0, true)).toBe(0); // captured, not run
    const exec = d.graphInstantiate(graph);

    const replays = 1000;
    const host = d.hostAlloc(replays * 64);
    let launchNs = 0n;
    for (let k = 0; k < replays; k++) {
      d.memsetD8Async(region, 0, 64, cs); // each replay must write everything anew
      const t = process.hrtime.bigint();
      d.graphLaunch(exec, cs);
      launchNs += process.hrtime.bigint() - t;
      d.memcpyDtoHAsync(host.bytes.subarray(k * 64, k * 64 + 64), region, cs);
    }
    d.streamSynchronize(cs);
    const bad: number[] = [];
    for (let k = 0; k < replays; k++) {
      const v = new DataView(host.bytes.buffer, host.bytes.byteOffset + k * 64, 64);
      const ok =
        v.getUint32(0, true) === 0xc0ffee &&
        pattern.every((b, i) => v.getUint8(16 + i) === b) &&
        [0, 1, 2, 3, 4, 5, 6, 7].every((i) => v.getUint32(32 + 4 * i, true) === 0x5eed);
      if (!ok) bad.push(k);
    }
    console.log(`graph: ${replays} replays, host ${(Number(launchNs) / replays / 1000).toFixed(2)} us per cuGraphLaunch`);
    expect(bad).toEqual([]);
    host.free();
    d.graphExecDestroy(exec);
    d.graphDestroy(graph);
    d.streamDestroy(cs);
    d.moduleUnload(fill.module);
  });

  it('a stream-ordered wait captured in a graph blocks each replay until another stream writes the flag', async () => {
    d.memsetD8(mem, 0, 64);
    const cs = d.streamCreate();
    d.streamBeginCapture(cs);
    d.streamWaitValue32(cs, mem, 1, 'eq');
    d.streamWriteValue32(cs, mem, 0); // consume the flag: the next replay waits again
    d.streamWriteValue32(cs, mem + 4n, 1);
    const graph = d.streamEndCapture(cs);
    const exec = d.graphInstantiate(graph);
    for (let k = 0; k < 3; k++) {
      d.memsetD8Async(mem + 4n, 0, 4, cs);
      d.graphLaunch(exec, cs);
      await new Promise((r) => setTimeout(r, 20));
      expect(read(d, mem, 8).getUint32(4, true)).toBe(0);
      d.streamWriteValue32(s2, mem, 1);
      await doneWithin(cs, 10_000, () => d.memcpyHtoD(mem, Uint8Array.of(1, 0, 0, 0)));
      expect(read(d, mem, 8).getUint32(4, true)).toBe(1);
    }
    d.graphExecDestroy(exec);
    d.graphDestroy(graph);
    d.streamDestroy(cs);
  });

  it('errors are typed: bad PTX carries the JIT log, a missing entry is CUDA_ERROR_NOT_FOUND, ending a capture never begun is refused', () => {
    // biome-ignore lint/suspicious/noExplicitAny: the thrown error, read field by field
    let err: any;
    try {
      d.moduleLoadData('.version 8.0\n.target sm_75\n.address_size 64\n.visible .entry broken(\n{\n\tbogus.instruction;\n}\n');
    } catch (e) {
      err = e;
    }
    console.log('bad PTX:', err?.message);
    expect(err).toMatchObject({ name: 'CudaError', call: 'cuModuleLoadDataEx' });
    expect(err.message).toMatch(/JIT log|ptxas/);
    const fill = d.moduleLoadData(FILL_PTX);
    expect(() => d.moduleGetFunction(fill.module, 'smcuda_nope')).toThrow(expect.objectContaining({ code: 'CUDA_ERROR_NOT_FOUND' }));
    d.moduleUnload(fill.module);
    expect(() => d.streamEndCapture(s1)).toThrow(expect.objectContaining({ name: 'CudaError', call: 'cuStreamEndCapture' }));
  });

  it('PTX load cost and the JIT cache: first load with an empty CUDA_CACHE_PATH, then warm, then disabled (child processes)', async () => {
    const cache = mkdtempSync(join(tmpdir(), 'smcuda-jit-cache-'));
    try {
      const child = async (env: Record<string, string>) => {
        const { stdout } = await run(process.execPath, [peer, 'ptx-load', '0'], { env: { ...process.env, ...env }, timeout: 60_000 });
        return JSON.parse(stdout.trim().split('\n').at(-1)!);
      };
      const cold = await child({ CUDA_CACHE_PATH: cache });
      const afterCold = folderSize(cache);
      const warm = await child({ CUDA_CACHE_PATH: cache });
      const afterWarm = folderSize(cache);
      const disabled = await child({ CUDA_CACHE_PATH: cache, CUDA_CACHE_DISABLE: '1' });
      // biome-ignore lint/suspicious/noExplicitAny: the child's JSON result, read field by field
      const fmt = (r: any) =>
        `context ${r.contextMs.toFixed(1)} ms, first load ${r.firstLoadMs.toFixed(2)} ms (+ getFunction ${r.firstGetFunctionMs.toFixed(2)}), second load ${r.secondLoadMs.toFixed(2)} ms (+ ${r.secondGetFunctionMs.toFixed(2)})`;
      console.log(`JIT cache empty:    ${fmt(cold)}; cache then ${afterCold.files} files, ${afterCold.bytes} B`);
      console.log(`JIT cache warm:     ${fmt(warm)}; cache then ${afterWarm.files} files, ${afterWarm.bytes} B`);
      console.log(`JIT cache disabled: ${fmt(disabled)}`);
      expect(afterCold.files).toBeGreaterThan(0); // the first JIT wrote the cache
      for (const r of [cold, warm, disabled]) expect(r.firstLoadMs).toBeGreaterThan(0);
    } finally {
      rmSync(cache, { recursive: true, force: true });
    }
  });

  it('across processes: a stream here waits on a flag in its own memory; a peer that opened it by IPC handle writes it with streamWriteValue32', async () => {
    const flagBase = d.memAlloc(2 << 20); // its own allocation: the IPC handle names the whole of it
    try {
      d.memsetD8(flagBase, 0, 64);
      const handle = Buffer.from(d.ipcGetMemHandle(flagBase)).toString('hex');
      d.streamWaitValue32(s1, flagBase + 16n, 0x1234, 'eq');
      d.streamWriteValue32(s1, flagBase + 20n, 0x600d);
      const peerDevice = p.devices > 1 ? 1 : 0;
      const { stdout } = await run(process.execPath, [peer, 'write-flag', String(peerDevice), handle, '16', String(0x1234)], { timeout: 60_000 });
      console.log('peer:', stdout.trim());
      await doneWithin(s1, 10_000, () => d.memcpyHtoD(flagBase + 16n, Uint8Array.of(0x34, 0x12, 0, 0)));
      expect(read(d, flagBase, 24).getUint32(20, true)).toBe(0x600d);
    } finally {
      d.memFree(flagBase);
    }
  });
});
