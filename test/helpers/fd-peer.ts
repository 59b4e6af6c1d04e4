/**
 * A child process running test/fixtures/fd-peer.mjs, connected to an
 * FdListener of this process: descriptors go to it over a real Unix socket
 * (SCM_RIGHTS), and it imports what they name with its own driver.
 */
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { FD_TOKEN_BYTES, FdListener, type FdChannel } from '../../src/channel/fd-channel.js';
import type { DriverKind } from '../../src/cuda/driver.js';
import { spawnPeer, type WorkerClient } from './child.js';

const here = dirname(fileURLToPath(import.meta.url));
const COMPILED = join(here, '..', '..', 'dist', 'src', 'channel', 'fd-channel.js');

/** Descriptors open in this process now. */
export const openFds = (): number => readdirSync('/proc/self/fd').length;

export class FdPeer {
  private constructor(
    private readonly client: WorkerClient,
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
    let client: WorkerClient | undefined;
    try {
      client = await spawnPeer('fd-peer.mjs', {
        env: { ...options.env, SMCUDA_CONTRACT_DRIVER: options.kind ?? 'sim', SMCUDA_CONTRACT_DEVICE: String(options.device ?? 0) },
        ...(options.fdLimit !== undefined ? { launcher: ['/bin/sh', ['-c', `ulimit -n ${options.fdLimit} && exec "$0" "$1"`, process.execPath]] } : {}),
      });
      const token = randomBytes(FD_TOKEN_BYTES);
      const admitted = listener.expect(token);
      await client.call('connect', { path, token: token.toString('hex') });
      return new FdPeer(client, await admitted, listener, dir);
    } catch (err) {
      await client?.exit();
      listener.close();
      rmSync(dir, { recursive: true, force: true });
      throw err;
    }
  }

  /** Runs `cmd` in the child; a failure rejects with its error code (WorkerCommandError). */
  call(cmd: string, args: Record<string, unknown> = {}): Promise<Record<string, unknown>> {
    return this.client.call(cmd, args);
  }

  /** Sends `fd` with a JSON meta, then asks the child to receive it; returns the child's view of it. */
  async pass(fd: number | undefined, meta: unknown, peek = 0): Promise<Record<string, unknown>> {
    await this.channel.send(fd, Buffer.from(JSON.stringify(meta)));
    return this.call('recv', { peek });
  }

  async stop(): Promise<void> {
    this.channel.close();
    this.listener.close();
    await this.client.exit();
    rmSync(this.dir, { recursive: true, force: true });
  }
}
