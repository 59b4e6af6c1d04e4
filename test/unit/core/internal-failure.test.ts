/**
 * The rule for internal failures (docs/reliability.md, "A bad message fails
 * alone"): a driver call that fails at any point of a transfer either fails
 * the one operation or closes the endpoint with a typed error to every
 * pending operation — never a silent stall. fast-check picks the call, which
 * side it fails on, its n-th use, and the data path; every send and receive
 * of the workload must settle, and afterwards each endpoint is either closed
 * or still carries messages.
 */
import { fc } from '@fast-check/vitest';
import { describe, expect, it } from 'vitest';
import type { DeviceBuffer } from '../../../src/buffers.js';
import type { SimulatedCudaDriver } from '../../../src/cuda/sim-driver.js';
import { CudaError, SmcudaError } from '../../../src/errors.js';
import { deviceWith, makePair, randomBytes, reach, type Pair } from '../../helpers/transport-pair.js';
import { expectLifetimeViolations } from '../../helpers/lifetime-check.js';

const CALLS = [
  'memAlloc',
  'memcpyDtoH',
  'memcpyHtoD',
  'memcpyDtoHAsync',
  'memcpyHtoDAsync',
  'memcpyAsync',
  'memcpyBatchAsync',
  'eventCreate',
  'eventRecord',
  'eventQuery',
  'ipcGetMemHandle',
  'ipcOpenMemHandle',
  'ipcGetEventHandle',
  'ipcOpenEventHandle',
  'memGetAddressRange',
  'pointerAttributes',
  'hostRegister',
  'shmOpen',
  'shmCreate',
  'whenComplete',
] as const;

/** The injected failures that report work as failed while the GPU still runs it. */
const COMPLETION_LIES = new Set<(typeof CALLS)[number]>(['eventRecord', 'eventQuery', 'whenComplete']);

/** Makes `driver[call]` throw a CudaError on its `nth` use from now on (once). */
function inject(driver: SimulatedCudaDriver, call: (typeof CALLS)[number], nth: number): () => void {
  const d = driver as unknown as Record<string, (...args: unknown[]) => unknown>;
  const real = d[call]!;
  let n = 0;
  d[call] = function (this: unknown, ...args: unknown[]) {
    if (++n === nth) {
      const err = new CudaError(`cu${call}`, 'CUDA_ERROR_UNKNOWN', 999, 'injected');
      if (call === 'whenComplete') return Promise.reject(err);
      throw err;
    }
    return real.apply(driver, args);
  };
  return () => {
    d[call] = real;
  };
}

function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout;
  return Promise.race([
    p.finally(() => clearTimeout(timer)),
    new Promise<T>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what} did not settle within ${ms} ms`)), ms))),
  ]);
}

const settle = <T>(p: Promise<T>) =>
  p.then(
    (value) => ({ value, error: undefined }),
    (error: Error) => ({ value: undefined, error }),
  );

/** A mixed workload: host, small device (eager), larger device (RGET or staging), with and without a stream. `arm` injects the fault once the test's own buffers exist. */
async function workload(p: Pair, sizes: number[], withStream: boolean[], arm: () => () => void): Promise<void> {
  const sA = p.a.driver.streamCreate();
  const bufs = sizes.map((size, i) => (size < 0 ? undefined : deviceWith(p.a.driver, randomBytes(size, i))));
  const restore = arm();
  const received: { data: Uint8Array | DeviceBuffer }[] = [];
  try {
    const recvs = sizes.map((_, i) => settle(p.b.ep.recv({ tag: i })).then((r) => r.value && received.push(r.value)));
    const sends = sizes.map((size, i) => {
      const buf = bufs[i];
      if (buf === undefined) return settle(p.a.ep.send(new Uint8Array(-size).fill(i), { tag: i }));
      return settle(p.a.ep.send(buf, { tag: i, stream: withStream[i] ? sA : undefined }));
    });
    const sent = await within(Promise.all(sends), 5000, 'the sends');
    // A send that failed before its message left (nothing announced) leaves its receive
    // waiting for the next message of that tag, as it should: send one.
    sent.forEach((r, i) => {
      if (r.error && !p.a.ep.closed) void settle(p.a.ep.send(Uint8Array.of(0xf1), { tag: i }));
    });
    await within(Promise.all(recvs), 5000, 'the receives');
  } finally {
    restore();
  }
  for (const b of bufs) if (b) tryFree(p.a.driver, b.ptr);
  for (const r of received) if ('ptr' in r.data) tryFree(p.b.driver, r.data.ptr);
}

function tryFree(d: SimulatedCudaDriver, ptr: bigint): void {
  try {
    d.memFree(ptr);
  } catch {
    // already gone
  }
}

/** An endpoint pair that is still open carries a host and a device message. */
async function stillUsable(p: Pair): Promise<void> {
  if (p.a.ep.closed || p.b.ep.closed) {
    // closed: with a typed error to everything pending (checked by the workload settling), and refusing new work
    const closedOne = p.a.ep.closed ? p.a.ep : p.b.ep;
    await expect(closedOne.send(new Uint8Array(1))).rejects.toBeInstanceOf(SmcudaError);
    return;
  }
  const host = p.b.ep.recv({ tag: 500 });
  await within(p.a.ep.send(Uint8Array.of(7), { tag: 500 }), 3000, 'a host send after the failure');
  expect([...((await within(host, 3000, 'a host receive after the failure')).data as Uint8Array)]).toEqual([7]);
  const src = deviceWith(p.a.driver, randomBytes(40_000, 9));
  const dev = p.b.ep.recv({ tag: 501 });
  await within(p.a.ep.send(src, { tag: 501 }), 3000, 'a device send after the failure');
  const r = await within(dev, 3000, 'a device receive after the failure');
  tryFree(p.a.driver, src.ptr);
  if ('ptr' in r.data) tryFree(p.b.driver, r.data.ptr);
}

describe('an internal failure fails one operation or closes the endpoint, never stalls', () => {
  it('a driver call failing at a random point of a mixed workload, on either side, staging or RGET', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...CALLS),
        fc.constantFrom('a' as const, 'b' as const),
        fc.integer({ min: 1, max: 6 }),
        fc.boolean(),
        fc.array(fc.oneof(fc.integer({ min: -5000, max: -1 }), fc.integer({ min: 1, max: 100 }), fc.integer({ min: 9000, max: 40_000 })), {
          minLength: 1,
          maxLength: 5,
        }),
        fc.array(fc.boolean(), { minLength: 5, maxLength: 5 }),
        async (call, side, nth, ipc, sizes, withStream) => {
          const p = await makePair({
            a: { negotiation: { ipc }, staging: { chunkSize: 4096, slots: 2 } },
            b: { negotiation: { ipc } },
          });
          // A failed event record or query says work failed that the GPU still runs: what is released on
          // that word (a buffer freed by its failed operation) is released under the GPU, as the lie implies.
          if (COMPLETION_LIES.has(call)) for (const d of [p.a.driver, p.b.driver]) expectLifetimeViolations(d);
          try {
            if (ipc) {
              const warm = deviceWith(p.a.driver, randomBytes(20_000, 1));
              const got = p.b.ep.recv({ tag: 999 });
              await p.a.ep.send(warm, { tag: 999 });
              tryFree(p.b.driver, ((await got).data as DeviceBuffer).ptr);
              tryFree(p.a.driver, warm.ptr);
              await reach(p.a.ep, 'OK');
            }
            await workload(p, sizes, withStream, () => inject(side === 'a' ? p.a.driver : p.b.driver, call, nth));
            await stillUsable(p);
          } finally {
            await p.close();
          }
        },
      ),
      {
        numRuns: 120,
        examples: [
          // stalled before: the receiver's allocation for a staged message failed and its sender never heard (no FIN)
          ['memAlloc', 'b', 1, false, [20_000], [false, false, false, false, false]],
          // stalled before: the completion event of a staging copy could not be created (GpuWork threw out of its microtask)
          ['eventCreate', 'a', 1, false, [9000], [false, false, false, false, false]],
          // the receiver could not pin the peer's staging ring: that message fails, and the next staged one must still get the ring
          ['hostRegister', 'b', 1, false, [20_000, 20_000], [false, false, false, false, false]],
        ],
      },
    );
  }, 120_000);
});
