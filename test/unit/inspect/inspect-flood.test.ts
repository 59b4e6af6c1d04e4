/**
 * The inspector under a flood of idle connections (issue 47, item 8): another
 * user, without the secret, held 3,000 idle TCP connections and ran the
 * process out of descriptors, so an honest handshake failed. Now the server
 * keeps at most `maxConnections`, a new one evicting the oldest that has not
 * shown the secret, and closes those after `idleMs`.
 */
import { request } from 'node:http';
import { connect, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { ConfigError } from '../../../src/errors.js';
import { InspectorModel } from '../../../src/inspect/model.js';
import { type InspectorServer, startInspectorServer } from '../../../src/inspect/server.js';

const cleanup: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

function get(url: string): Promise<number> {
  return new Promise((resolve, reject) => {
    request(url, { agent: false }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode!));
    })
      .on('error', reject)
      .end();
  });
}

async function serve(o: { maxConnections?: number; idleMs?: number }): Promise<InspectorServer> {
  const server = await startInspectorServer({ model: new InspectorModel(), port: 0, source: 'test', ...o });
  cleanup.push(() => server.close());
  return server;
}

/** `n` idle TCP connections; `open()` counts those the server has not closed. */
async function idle(port: number, n: number): Promise<{ open: () => number }> {
  const socks: Socket[] = [];
  const closed = new Set<Socket>();
  for (let i = 0; i < n; i++) {
    const s = connect(port, '127.0.0.1');
    s.on('error', () => {});
    s.on('close', () => closed.add(s));
    socks.push(s);
  }
  cleanup.push(() => socks.forEach((s) => s.destroy()));
  await Promise.all(socks.map((s) => new Promise<void>((r) => (s.connecting ? s.once('connect', () => r()).once('close', () => r()) : r()))));
  return { open: () => socks.length - closed.size };
}

async function until(cond: () => boolean, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (!cond() && Date.now() < end) await new Promise((r) => setTimeout(r, 10));
}

describe('the inspector flooded with idle connections', () => {
  it('keeps at most maxConnections, and an honest client with the secret still gets through', async () => {
    const server = await serve({ maxConnections: 8, idleMs: 60_000 });
    const flood = await idle(server.port, 200);
    await until(() => flood.open() <= 8, 5000);
    expect(flood.open()).toBeLessThanOrEqual(8);
    expect(await get(`${server.url}state`)).toBe(200);
    expect(await get(`${server.url}`)).toBe(200);
  });

  it('a connection that never shows the secret is closed after idleMs; a page that showed it is kept', async () => {
    const server = await serve({ maxConnections: 8, idleMs: 300 });
    const events = new Promise<Socket>((resolve, reject) => {
      request(`${server.url}events`, { agent: false }, (res) => resolve(res.socket))
        .on('error', reject)
        .end();
    });
    const page = await events;
    let pageClosed = false;
    page.on('close', () => (pageClosed = true));
    const flood = await idle(server.port, 20); // more than the cap: the page is never the one evicted
    const start = Date.now();
    await until(() => flood.open() === 0, 5000);
    expect(flood.open()).toBe(0);
    expect(Date.now() - start).toBeLessThan(3000);
    expect(pageClosed).toBe(false);
    page.destroy();
  });

  it('refuses a bad cap or idle time with ConfigError', async () => {
    await expect(startInspectorServer({ model: new InspectorModel(), source: 'x', maxConnections: 0 })).rejects.toBeInstanceOf(ConfigError);
    await expect(startInspectorServer({ model: new InspectorModel(), source: 'x', idleMs: 1.5 })).rejects.toBeInstanceOf(ConfigError);
  });
});
