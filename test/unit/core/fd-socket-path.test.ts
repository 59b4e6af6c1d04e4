/**
 * What Transport.listen does with whatever is at `<path>.fd`, the descriptor
 * socket beside the control socket (issue 23, finding 10): only a dead
 * process's socket is replaced; a user's file or a live socket there is left
 * alone, and listen() rejects with ConfigError.
 */
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { FdListener } from '../../../src/channel/fd-channel.js';
import { ConfigError } from '../../../src/errors.js';
import { Transport } from '../../../src/transport.js';

let dir: string;
const open: Transport[] = [];
beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'smcuda-fdpath-'));
});
afterEach(async () => {
  for (const t of open.splice(0)) await t.close();
  fs.rmSync(dir, { recursive: true, force: true });
});
async function transport(id: string): Promise<Transport> {
  const t = await Transport.create({ id, driver: 'sim' });
  open.push(t);
  return t;
}

describe('listen() and the file at <path>.fd', () => {
  it("a user's regular file there is left intact, and listen() rejects with ConfigError; nothing is left listening", async () => {
    const p = path.join(dir, 's.sock');
    fs.writeFileSync(`${p}.fd`, 'my notes\n');
    const t = await transport('l');
    const err = await t.listen(p).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as Error).message).toMatch(/s\.sock\.fd exists and is not a socket/);
    expect(fs.readFileSync(`${p}.fd`, 'utf8')).toBe('my notes\n');
    expect(fs.existsSync(p)).toBe(false);
  });

  it("another transport's live descriptor socket there keeps its listener; listen() rejects with ConfigError", async () => {
    const p = path.join(dir, 's.sock');
    const other = new FdListener(`${p}.fd`);
    try {
      const ino = fs.statSync(`${p}.fd`).ino;
      const t = await transport('l');
      const err = await t.listen(p).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ConfigError);
      expect((err as Error).message).toMatch(/Another process is listening at .*s\.sock\.fd/);
      expect(fs.statSync(`${p}.fd`).ino).toBe(ino);
    } finally {
      other.close();
    }
  });

  it("a dead process's socket there is replaced: listen() succeeds with a descriptor socket of its own", async () => {
    const p = path.join(dir, 's.sock');
    const server = net.createServer().listen(`${p}.fd`);
    await new Promise((r) => server.once('listening', r));
    // Close it without unlinking: what a killed process leaves behind.
    fs.linkSync(`${p}.fd`, `${p}.keep`);
    await new Promise<void>((r) => server.close(() => r()));
    fs.renameSync(`${p}.keep`, `${p}.fd`);
    const t = await transport('l');
    await t.listen(p);
    // A live SOCK_SEQPACKET listener there now: a stream connection is refused for its type, not for nobody listening.
    const code = await new Promise((resolve) => net.createConnection({ path: `${p}.fd` }).once('error', (e: NodeJS.ErrnoException) => resolve(e.code)));
    expect(code).toBe('EPROTOTYPE');
  });
});
