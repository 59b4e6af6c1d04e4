/**
 * Drives test/fixtures/fault-peer.mjs: a real second process with its own
 * Transport on the simulated driver, which the test can order around and
 * kill with SIGKILL.
 */
import type { SimOptions } from '../../src/cuda/sim/config.js';
import { simEnv } from '../../src/cuda/sim/config.js';
import { spawnPeer, type WorkerClient } from './child.js';

export interface FaultPeerOptions {
  /** Transport id of the peer (a replacement process reuses the same one). */
  id: string;
  /** Transport options of the peer (JSON). */
  transport?: object;
  /** The peer's simulated world and faults. */
  sim?: SimOptions;
  device?: number;
  /** 'sim' (default) or 'native'. */
  driver?: 'sim' | 'native';
}

/** What the peer's commands answer (test/fixtures/fault-peer.mjs). */
export interface FaultPeerResults {
  send: { issued?: number; sent?: number };
  recv: { received: Array<{ length: number; path: string; sum: number }> };
  stats: { stats: Record<string, unknown> & { cache: Record<string, number> } };
}

export const FaultPeer = {
  async start(socket: string, o: FaultPeerOptions): Promise<FaultPeer> {
    return spawnPeer('fault-peer.mjs', {
      name: `fault-peer ${o.id}`,
      args: [socket],
      env: {
        ...(o.sim ? simEnv(o.sim) : {}),
        SMCUDA_PEER_ID: o.id,
        SMCUDA_PEER_OPTS: JSON.stringify(o.transport ?? {}),
        SMCUDA_TEST_DEVICE: String(o.device ?? 1),
        SMCUDA_TEST_DRIVER: o.driver ?? 'sim',
      },
    });
  },
};
/** A real second process with its own Transport, which the test can order around and kill with SIGKILL. */
export type FaultPeer = WorkerClient<{ id: string }>;

/** Settles like `p`, or rejects if `p` is still pending after `ms` (a hang). */
export function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout;
  const hang = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`HANG: ${what} still pending after ${ms} ms`)), ms);
  });
  return Promise.race([p, hang]).finally(() => clearTimeout(timer));
}

/** The error `p` rejects with (fails if it resolves). */
export async function rejection(p: Promise<unknown>): Promise<Error & { code?: string }> {
  try {
    await p;
  } catch (err) {
    return err as Error & { code?: string };
  }
  throw new Error('expected a rejection, got a result');
}

/** The test data (src/cli/demo-pattern.ts; the .mjs fixture imports it from dist/). */
export { checksum, patternBytes as fill } from './bytes.js';
