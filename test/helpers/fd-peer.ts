/**
 * A child process running test/fixtures/fd-peer.mjs, connected to an
 * FdListener of this process: descriptors go to it over a real Unix socket
 * (SCM_RIGHTS), and it imports what they name with its own driver.
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { FD_TOKEN_BYTES, FdListener, type FdChannel } from '../../src/channel/fd-channel.js';
import type { DriverKind } from '../../src/cuda/driver.js';

const here = dirname(fileURLToPath(import.meta.url));
const FIXTURE = join(here, '..', 'fixtures', 'fd-peer.mjs');
const COMPILED = join(here, '..', '..', 'dist', 'src', 'channel', 'fd-channel.js');

export interface FdPeerError extends Error {
  code: string | null;
}

/** Descriptors open in this process now. */
export const openFds = (): number => readdirSync('/proc/self/fd').length;

export class FdPeer {
  private readonly pending: Array<{ resolve: (v: Record<string, unknown>) => void; reject: (e: Error) => void }> = [];
  private stderr = '';
  private exited: Error | undefined;

  private constructor(
    private readonly child: ChildProcessWithoutNullStreams,
    /** The parent's end of the descriptor channel. */
    readonly channel: FdChannel,
    private readonly listener: FdListener,
    private readonly dir: string,
  ) {}

  /**
   * Starts the child (driver `kind` on `device`), with `ulimit -n` set to
   * `fdLimit` where given, and connects its descriptor channel to a listener
   * here, admitted by a fresh token.
   */
  static async start(options: { kind?: DriverKind; device?: number; env?: Record<string, string>; fdLimit?: number } = {}): Promise<FdPeer> {
    if (!existsSync(COMPILED)) throw new Error(`${COMPILED} is missing: build with \`npx tsc -p .\` before running the descriptor tests`);
    const dir = mkdtempSync(join(tmpdir(), 'smcuda-fd-'));
    const path = join(dir, 'fd.sock');
    const listener = new FdListener(path);
    const env = {
      ...process.env,
      ...options.env,
      SMCUDA_CONTRACT_DRIVER: options.kind ?? 'sim',
      SMCUDA_CONTRACT_DEVICE: String(options.device ?? 0),
    };
    const child =
      options.fdLimit !== undefined
        ? spawn('/bin/sh', ['-c', `ulimit -n ${options.fdLimit} && exec "$0" "$1"`, process.execPath, FIXTURE], { env, stdio: ['pipe', 'pipe', 'pipe'] })
        : spawn(process.execPath, [FIXTURE], { env, stdio: ['pipe', 'pipe', 'pipe'] });
    const token = randomBytes(FD_TOKEN_BYTES);
    const admitted = listener.expect(token);
    const peer = new FdPeer(child, undefined as unknown as FdChannel, listener, dir);
    peer.listen();
    try {
      await peer.request({ op: 'connect', path, token: token.toString('hex') });
      const channel = await admitted;
      (peer as unknown as { channel: FdChannel }).channel = channel;
      return peer;
    } catch (err) {
      await peer.stop();
      throw err;
    }
  }

  private listen(): void {
    createInterface({ input: this.child.stdout }).on('line', (line) => {
      const waiter = this.pending.shift();
      if (!waiter) return;
      const reply = JSON.parse(line) as Record<string, unknown> & { error?: { code: string | null; message: string } };
      if (reply.error) {
        const err = new Error(`peer: ${reply.error.message}`) as FdPeerError;
        err.code = reply.error.code;
        waiter.reject(err);
      } else {
        waiter.resolve(reply);
      }
    });
    this.child.stderr.on('data', (d: Buffer) => (this.stderr += d.toString()));
    this.child.on('exit', (code, signal) => {
      this.exited = new Error(`fd peer exited (code ${code}, signal ${signal}): ${this.stderr.trim() || 'no stderr'}`);
      for (const w of this.pending.splice(0)) w.reject(this.exited);
    });
  }

  request(cmd: Record<string, unknown>): Promise<Record<string, unknown>> {
    if (this.exited) return Promise.reject(this.exited);
    return new Promise((resolve, reject) => {
      this.pending.push({ resolve, reject });
      this.child.stdin.write(JSON.stringify(cmd) + '\n');
    });
  }

  /** Sends `fd` with a JSON meta, then asks the child to receive it; returns the child's view of it. */
  async pass(fd: number | undefined, meta: unknown, peek = 0): Promise<Record<string, unknown>> {
    await this.channel.send(fd, Buffer.from(JSON.stringify(meta)));
    return this.request({ op: 'recv', peek });
  }

  async stop(): Promise<void> {
    this.channel?.close();
    this.listener.close();
    if (!this.exited) {
      const gone = new Promise<void>((resolve) => this.child.once('exit', () => resolve()));
      this.child.stdin.write(JSON.stringify({ op: 'exit' }) + '\n');
      this.child.stdin.end();
      await gone;
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}
