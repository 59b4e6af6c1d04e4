/**
 * Two Transports in one test process, each on its own simulated driver
 * instance (a separate "process" to the simulator), joined by an in-memory
 * channel pair, and a descriptor channel (a socketpair, FdChannel.pair())
 * given to attach(), as listen/connect would make one, so that rings and
 * staging work as between processes (`descriptors: false`: none, and nothing
 * is shared by memory). Device helpers fill and read simulated device memory.
 */
import { createMemoryChannelPair, type MemoryChannelOptions } from '../../src/channel/memory-channel.js';
import { FdChannel } from '../../src/channel/fd-channel.js';
import type { CudaDriver } from '../../src/cuda/driver.js';
import { SimulatedCudaDriver, type SimDriverOptions } from '../../src/cuda/sim-driver.js';
import type { Endpoint } from '../../src/endpoint.js';
import { Transport, type TransportCreateOptions } from '../../src/transport.js';
import type { DeviceBuffer } from '../../src/buffers.js';

export interface Side {
  driver: SimulatedCudaDriver;
  transport: Transport;
}

export interface Pair {
  a: Side & { ep: Endpoint };
  b: Side & { ep: Endpoint };
  close(): Promise<void>;
}

export async function makeSide(id: string, device: number, opts: TransportCreateOptions = {}, sim: SimDriverOptions = {}): Promise<Side> {
  const driver = new SimulatedCudaDriver(sim);
  const transport = await Transport.create({ driver, id, device, ...opts });
  return { driver, transport };
}

export async function makePair(
  options: {
    a?: TransportCreateOptions;
    b?: TransportCreateOptions;
    simA?: SimDriverOptions;
    simB?: SimDriverOptions;
    channel?: MemoryChannelOptions;
    devices?: [number, number];
    descriptors?: boolean;
  } = {},
): Promise<Pair> {
  const [devA, devB] = options.devices ?? [0, 1];
  const a = await makeSide('a', devA, options.a, options.simA);
  const b = await makeSide('b', devB, options.b, options.simB);
  const [ca, cb] = createMemoryChannelPair({ names: ['a', 'b'], ...options.channel });
  const [da, db] = options.descriptors === false ? [undefined, undefined] : FdChannel.pair();
  const [epA, epB] = await Promise.all([a.transport.attach(ca, { descriptors: da }), b.transport.attach(cb, { descriptors: db })]);
  return {
    a: { ...a, ep: epA },
    b: { ...b, ep: epB },
    async close() {
      await a.transport.close();
      await b.transport.close();
      a.driver.close();
      b.driver.close();
    },
  };
}

/** Allocates device memory holding `bytes`. */
export function deviceWith(driver: CudaDriver, bytes: Uint8Array): DeviceBuffer {
  if (bytes.byteLength === 0) return { ptr: 0n, length: 0 };
  const ptr = driver.memAlloc(bytes.byteLength);
  driver.memcpyHtoD(ptr, bytes);
  return { ptr, length: bytes.byteLength };
}

export function readDevice(driver: CudaDriver, buf: DeviceBuffer): Uint8Array {
  const out = new Uint8Array(buf.length);
  if (buf.length > 0) driver.memcpyDtoH(out, buf.ptr);
  return out;
}

/** Test data: the pattern of `seed` (src/cli/demo-pattern.ts). */
export { patternBytes as randomBytes, sameBytes } from './bytes.js';

/** Resolves once `ep` reaches `state` (or at once if it is there). */
export function reach(ep: Endpoint, state: string, timeoutMs = 5000): Promise<void> {
  if (ep.state === state) return Promise.resolve();
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`endpoint to ${ep.peerId} stayed ${ep.state}, never ${state}`)), timeoutMs);
    const on = (s: string) => {
      if (s === state) {
        clearTimeout(timer);
        ep.off('state', on);
        resolve();
      }
    };
    ep.on('state', on);
  });
}
