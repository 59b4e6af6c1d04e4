/**
 * N ranks in one test process: each its own simulated driver (a separate
 * "process" to the simulator) and Transport, every pair joined by an
 * in-memory channel, and a Communicator per rank over those endpoints.
 */
import { expect } from 'vitest';
import { createMemoryChannelPair } from '../../src/channel/memory-channel.js';
import { Communicator, type CommunicatorOptions } from '../../src/collectives/communicator.js';
import type { Endpoint } from '../../src/endpoint.js';
import { CommunicatorAbortedError } from '../../src/errors.js';
import { DTYPE_BYTES, type DType } from '../../src/kernels/dtypes.js';
import { mulberry32 } from '../../src/cuda/sim/prng.js';
import type { SimDevice } from '../../src/cuda/sim/config.js';
import { makeSide, type Side } from './transport-pair.js';

export interface World {
  sides: Side[];
  comms: Communicator[];
  close(): Promise<void>;
}

export async function makeWorld(
  n: number,
  options: CommunicatorOptions & { ipcOpenFails?: boolean; devices?: number; simDevices?: SimDevice[]; optionsByRank?: CommunicatorOptions[] } = {},
): Promise<World> {
  const { ipcOpenFails, devices = 2, simDevices, optionsByRank, ...commOptions } = options;
  const sim = { ...(ipcOpenFails ? { faults: { ipcOpenFails: true } } : {}), ...(simDevices ? { devices: simDevices } : {}) };
  const sides = await Promise.all([...Array(n).keys()].map((i) => makeSide(`rank${i}`, i % devices, {}, sim)));
  const eps: Endpoint[][] = sides.map(() => []);
  for (let i = 0; i < n; i++) {
    for (let j = i + 1; j < n; j++) {
      const [ci, cj] = createMemoryChannelPair({ names: [`rank${i}`, `rank${j}`] });
      const [a, b] = await Promise.all([sides[i]!.transport.attach(ci), sides[j]!.transport.attach(cj)]);
      eps[i]![j] = a;
      eps[j]![i] = b;
    }
  }
  const made = await Promise.allSettled(
    sides.map((s, r) => Communicator.fromEndpoints({ transport: s.transport, rank: r, size: n, endpoints: eps[r]!, ...commOptions, ...optionsByRank?.[r] })),
  );
  const failed = made.find((m) => m.status === 'rejected');
  if (failed) {
    // Every rank's set-up settled: close what was made, then report the first failure.
    for (const m of made) if (m.status === 'fulfilled') await m.value.close();
    for (const s of sides) {
      await s.transport.close();
      s.driver.close();
    }
    throw (failed as PromiseRejectedResult).reason;
  }
  const comms = made.map((m) => (m as PromiseFulfilledResult<Communicator>).value);
  return {
    sides,
    comms,
    async close() {
      await Promise.all(comms.map((c) => c.close()));
      for (const s of sides) {
        await s.transport.close();
        s.driver.close();
      }
    },
  };
}

/** `count` elements of `dtype` from `seed`: small values, exact in every dtype, no NaN. */
export function elements(dtype: DType, count: number, seed: number): Uint8Array {
  const es = DTYPE_BYTES[dtype];
  const bytes = new Uint8Array(count * es);
  const v = new DataView(bytes.buffer);
  const rnd = mulberry32(seed);
  for (let i = 0; i < count; i++) {
    const x = Math.floor(rnd() * 17) - 8; // -8..8
    const at = i * es;
    switch (dtype) {
      case 'f32':
        v.setFloat32(at, x / 4 + 0.1, true);
        break;
      case 'f64':
        v.setFloat64(at, x / 4 + 0.1, true);
        break;
      case 'f16':
        v.setUint16(at, [0x3c00, 0xbc00, 0x3555, 0x4200, 0x2e66, 0xc500, 0x0000, 0x3bff][(x + 8) % 8]!, true);
        break;
      case 'bf16':
        v.setUint16(at, [0x3f80, 0xbf80, 0x3eaa, 0x4040, 0x3dcd, 0xc0a0, 0x0000, 0x3f7f][(x + 8) % 8]!, true);
        break;
      case 'i32':
        v.setInt32(at, x * 100_003, true);
        break;
      case 'i64':
        v.setBigInt64(at, BigInt(x) * 1_000_000_007n, true);
        break;
      case 'u8':
        v.setUint8(at, (x + 8) * 15);
        break;
      case 'i8':
        v.setInt8(at, x * 15);
        break;
      case 'u32':
        v.setUint32(at, ((x + 8) * 250_000_007) >>> 0, true);
        break;
      case 'u64':
        v.setBigUint64(at, BigInt.asUintN(64, BigInt(x + 8) * 1_000_000_000_007n + (BigInt(x + 8) << 60n)), true);
        break;
      case 'f8e4m3':
        v.setUint8(at, [0x38, 0xb8, 0x2a, 0x44, 0x1d, 0xc4, 0x00, 0x36][(x + 8) % 8]!); // 1, -1, 0.3125, 3, 0.1015625, -3, 0, 0.875
        break;
      case 'f8e5m2':
        v.setUint8(at, [0x3c, 0xbc, 0x35, 0x42, 0x2e, 0xc5, 0x00, 0x3a][(x + 8) % 8]!); // 1, -1, 0.3125, 3, 0.09375, -5, 0, 0.75
        break;
    }
  }
  return bytes;
}

/** The CommunicatorAbortedError `p` rejects with (a call that resolves, or fails otherwise, fails the test). */
export async function abortOf(p: Promise<unknown> | undefined): Promise<CommunicatorAbortedError> {
  const err = await p!.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(CommunicatorAbortedError);
  return err as CommunicatorAbortedError;
}
