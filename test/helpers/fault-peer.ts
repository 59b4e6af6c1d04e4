/**
 * Drives test/fixtures/fault-peer.mjs: a real second process with its own
 * Transport on the simulated driver, which the test can order around and
 * kill with SIGKILL.
 */
import { type ChildProcess, fork } from 'node:child_process';
import type { SimOptions } from '../../src/cuda/sim/config.js';
import { simEnv } from '../../src/cuda/sim/config.js';

export interface PeerReply {
  ok: boolean;
  error?: string;
  [k: string]: unknown;
}

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

export class FaultPeer {
  private readonly waiting: ((r: PeerReply) => void)[] = [];
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  private constructor(readonly child: ChildProcess) {
    child.on('message', (m: PeerReply) => this.waiting.shift()?.(m));
    this.exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  }

  static async start(socket: string, o: FaultPeerOptions): Promise<FaultPeer> {
    const child = fork(new URL('../fixtures/fault-peer.mjs', import.meta.url).pathname, [socket], {
      env: {
        ...process.env,
        ...(o.sim ? simEnv(o.sim) : {}),
        SMCUDA_PEER_ID: o.id,
        SMCUDA_PEER_OPTS: JSON.stringify(o.transport ?? {}),
        SMCUDA_TEST_DEVICE: String(o.device ?? 1),
        SMCUDA_TEST_DRIVER: o.driver ?? 'sim',
      },
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    const peer = new FaultPeer(child);
    await peer.next();
    return peer;
  }

  /** The next reply (in order). */
  next(): Promise<PeerReply> {
    return new Promise((resolve, reject) => {
      this.waiting.push((r) => (r.ok ? resolve(r) : reject(new Error(r.error))));
      void this.exited.then((e) => reject(new Error(`peer exited (${e.signal ?? e.code})`)));
    });
  }

  ask(m: object): Promise<PeerReply> {
    const reply = this.next();
    this.child.send(m);
    return reply;
  }

  tell(m: object): void {
    this.child.send(m);
  }

  async kill(): Promise<void> {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill('SIGKILL');
    await this.exited;
  }

  async exit(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    this.child.send({ cmd: 'exit' });
    await this.exited;
  }
}

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
