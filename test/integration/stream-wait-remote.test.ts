/**
 * Two real processes on the simulated driver: process A (this one) queues
 * work behind a stream wait on a flag in its device memory; process B
 * (test/fixtures/ipc-peer.mjs) opens A's memory by IPC handle, writes the
 * data through its mapping, then signals A's flag with a stream write — and
 * only then does A's stream go on and read the data. The same, captured in
 * a graph in A and replayed: every replay waits for B's next signal.
 * Needs compiled code (`npx tsc -p .`).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SimulatedCudaDriver } from '../../src/cuda/sim-driver.js';
import { simEnv } from '../../src/cuda/sim/config.js';
import { patternBytes } from '../helpers/bytes.js';
import { hex, IpcPeer } from '../helpers/driver-contract.js';

const SIZE = 64 * 1024;

describe('a stream held on a flag that another process writes', () => {
  let d: SimulatedCudaDriver;
  let peer: IpcPeer;
  let shared: bigint; // [flag 8 B | pad | data SIZE] in A's memory
  let local: bigint;
  let remote: bigint;
  let stream: bigint;
  let ev: bigint;

  beforeAll(async () => {
    d = new SimulatedCudaDriver({ env: {} });
    d.init();
    d.setDevice(0);
    shared = d.memAlloc(256 + SIZE);
    local = d.memAlloc(SIZE);
    d.memsetD8(shared, 0, 256 + SIZE);
    stream = d.streamCreate();
    ev = d.eventCreate({ disableTiming: true });
    peer = await IpcPeer.start('sim', 0, simEnv({}));
    remote = await peer.open(d.ipcGetMemHandle(shared));
  });

  afterAll(async () => {
    await peer?.stop();
    d?.close();
  });

  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

  it("B's data, then B's flag write, release A's stream, which then reads the data", async () => {
    d.streamWaitValue64(stream, shared, 1n, 'geq');
    d.memcpyAsync(local, shared + 256n, SIZE, stream);
    d.eventRecord(ev, stream);
    await sleep(30);
    expect(d.eventQuery(ev)).toBe(false); // held: nobody wrote the flag
    const data = patternBytes(SIZE, 42);
    await peer.call('write', { ptr: (remote + 256n).toString(), hex: hex(data) });
    expect(d.eventQuery(ev)).toBe(false); // data alone does not release it
    await peer.call('writeValue64', { ptr: remote.toString(), value: '1' });
    await d.whenComplete(ev);
    const out = new Uint8Array(SIZE);
    d.memcpyDtoH(out, local);
    expect(Buffer.compare(out, data)).toBe(0);
  });

  it('a captured wait (wait 1, reset 0) replays: each launch waits for the next signal of B', async () => {
    const cap = d.streamCreate();
    d.memcpyHtoD(shared, new Uint8Array(8));
    d.streamBeginCapture(cap);
    d.streamBatchMemOp(cap, [
      { op: 'wait64', addr: shared, value: 1n, condition: 'geq' },
      { op: 'write64', addr: shared, value: 0n },
    ]);
    d.memcpyAsync(local, shared + 256n, SIZE, cap);
    const graph = d.streamEndCapture(cap);
    const exec = d.graphInstantiate(graph);
    for (let round = 1; round <= 3; round++) {
      d.graphLaunch(exec, stream);
      d.eventRecord(ev, stream);
      await sleep(20);
      expect(d.eventQuery(ev)).toBe(false);
      const data = patternBytes(SIZE, round);
      await peer.call('write', { ptr: (remote + 256n).toString(), hex: hex(data) });
      await peer.call('writeValue64', { ptr: remote.toString(), value: '1' });
      await d.whenComplete(ev);
      const out = new Uint8Array(SIZE);
      d.memcpyDtoH(out, local);
      expect(Buffer.compare(out, data)).toBe(0);
    }
    d.graphExecDestroy(exec);
    d.graphDestroy(graph);
    d.streamDestroy(cap);
    expect(d.liveGraphs).toEqual({ graphs: 0, execs: 0 });
  });
});
