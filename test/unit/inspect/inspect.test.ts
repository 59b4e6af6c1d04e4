/**
 * The inspector without a browser: `smcuda inspect` following a trace file
 * (its HTTP routes, its server-sent events as records are appended, its
 * refusal of other hosts), and the Transport `inspect` option.
 */
import { appendFileSync, mkdtempSync, rmSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { EndpointView } from '../../../src/inspect/model.js';
import { InspectorModel } from '../../../src/inspect/model.js';
import { smcuda } from '../../helpers/cli.js';
import { startInspect } from '../../helpers/inspect-process.js';
import { deviceWith, makePair } from '../../helpers/transport-pair.js';

const dir = mkdtempSync(join(tmpdir(), 'smcuda-inspect-test-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function get(url: string, headers: Record<string, string> = {}): Promise<{ status: number; type: string; body: string }> {
  return new Promise((resolve, reject) => {
    request(url, { headers }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode!, type: String(res.headers['content-type']), body }));
    })
      .on('error', reject)
      .end();
  });
}

/** Reads server-sent events until `until` says stop. */
function events(url: string, until: (events: { event: string; data: unknown }[]) => boolean): Promise<{ event: string; data: unknown }[]> {
  return new Promise((resolve, reject) => {
    const seen: { event: string; data: unknown }[] = [];
    const req = request(`${url}events`, (res) => {
      let buf = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => {
        buf += d;
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          const event = /^event: (.*)$/m.exec(block)?.[1];
          const data = /^data: (.*)$/m.exec(block)?.[1];
          if (event && data) seen.push({ event, data: JSON.parse(data) });
        }
        if (until(seen)) {
          req.destroy();
          resolve(seen);
        }
      });
    });
    req.on('error', (e) => (seen.length ? undefined : reject(e)));
    req.end();
  });
}

const line = (r: object) => `${JSON.stringify(r)}\n`;

describe('smcuda inspect --trace FILE', () => {
  it('serves the page, Mermaid from node_modules, the machine and the state, on 127.0.0.1 only', async () => {
    const trace = join(dir, 'routes.jsonl');
    const insp = await startInspect(trace);
    try {
      expect(insp.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/[0-9a-f]{64}\/$/);
      const page = await get(insp.url);
      expect(page.status).toBe(200);
      expect(page.body).toContain('<script src="mermaid.min.js"></script>');
      expect(page.body).not.toMatch(/https?:\/\//); // nothing from a CDN
      const mermaid = await get(`${insp.url}mermaid.min.js`);
      expect(mermaid.status).toBe(200);
      expect(mermaid.body.length).toBeGreaterThan(100_000);
      expect((await get(`${insp.url}machine.mmd`)).body).toContain('stateDiagram-v2');
      expect(JSON.parse((await get(`${insp.url}state`)).body)).toEqual({ source: `trace ${trace}`, startUs: null, endpoints: [] });
      const port = new URL(insp.url).port;
      expect((await get(`${insp.url}state`, { host: `evil.example:${port}` })).status).toBe(403);
      expect((await get(`${insp.url}state`, { host: `localhost:${port}` })).status).toBe(200);
      expect((await get(`${insp.url}nope`)).status).toBe(404);
      // Without the run's secret (another local user knows the port, not the URL): 403 for every route.
      const bare = `http://127.0.0.1:${port}/`;
      for (const r of ['', 'state', 'events', 'machine.mmd', 'mermaid.min.js']) expect((await get(`${bare}${r}`)).status).toBe(403);
      const wrong = insp.url.replace(/[0-9a-f]{64}/, (k) => `${k.slice(0, 63)}${k[63] === '0' ? '1' : '0'}`);
      expect((await get(`${wrong}state`)).status).toBe(403);
      expect((await get(`${insp.url.slice(0, -1)}state`)).status).toBe(403); // the secret without its slash, run into the route
    } finally {
      expect(await insp.stop()).toBe(0);
    }
  });

  it('follows the file as it grows and sends every state change as an event', async () => {
    const trace = join(dir, 'live.jsonl');
    appendFileSync(trace, line({ t: 1_000_000, pid: 7, self: 'rank0', peer: 'rank1', kind: 'frame', dir: 'recv', frame: 'HELLO' }));
    const insp = await startInspect(trace);
    try {
      const seen = events(insp.url, (evs) => evs.some((e) => e.event === 'endpoint' && (e.data as EndpointView).state === 'OK'));
      await new Promise((r) => setTimeout(r, 200));
      appendFileSync(trace, line({ t: 1_001_000, pid: 7, self: 'rank0', peer: 'rank1', kind: 'state', from: 'INIT', to: 'SENT', tries: 1 }));
      appendFileSync(trace, line({ t: 1_002_000, pid: 7, self: 'rank0', peer: 'rank1', kind: 'cache', type: 'miss' }));
      appendFileSync(trace, line({ t: 1_003_000, pid: 7, self: 'rank0', peer: 'rank1', kind: 'state', from: 'SENT', to: 'OK', tries: 1 }));
      const evs = await seen;
      expect(evs[0]!.event).toBe('snapshot');
      const snap = evs[0]!.data as { endpoints: EndpointView[] };
      expect(snap.endpoints.map((e) => [e.key, e.state])).toEqual([['rank0→rank1', 'INIT']]);
      const states = evs.filter((e) => e.event === 'endpoint').map((e) => (e.data as EndpointView).state);
      expect(states).toContain('SENT');
      const last = evs.at(-1)!.data as EndpointView;
      expect(last.transitions.map((t) => `${t.from}→${t.to}`)).toEqual(['INIT→SENT', 'SENT→OK']);
      expect(last.cache.miss).toBe(1);
      expect(last.pid).toBe(7);
    } finally {
      await insp.stop();
    }
  });

  it('needs a trace to follow, and checks its port', async () => {
    const r = await smcuda(['inspect'], { SMCUDA_TRACE: '' });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('give --trace FILE');
    expect((await smcuda(['inspect', '--trace', 'x', '--port', '70000'])).code).toBe(2);
    expect((await smcuda(['inspect', '--help'])).stdout).toContain('127.0.0.1');
  });
});

describe('Transport.create({ inspect })', () => {
  it("serves the transport's own endpoints and stops with close()", async () => {
    const pair = await makePair({ a: { inspect: 0 } });
    const url = pair.a.transport.inspectUrl!;
    try {
      expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/[0-9a-f]{64}\/$/);
      const data = new Uint8Array(64 << 10).fill(7);
      const recv = pair.b.ep.recv({ tag: 1 });
      await pair.a.ep.send(deviceWith(pair.a.driver, data), { tag: 1 });
      await recv;
      const state = JSON.parse((await get(`${url}state`)).body) as { source: string; endpoints: EndpointView[] };
      expect(state.source).toContain('transport a');
      const ep = state.endpoints.find((e) => e.key === 'a→b')!;
      expect(ep.state).toBe(pair.a.ep.state);
      expect(ep.transitions.length).toBeGreaterThan(0);
      expect(ep.frames.sent).toBeGreaterThan(0);
    } finally {
      await pair.close();
    }
    await expect(get(`${url}state`)).rejects.toThrow();
  });

  it("shows the transport's persistent transfers and their machine state: registered, armed, replaying, stuck, closed", async () => {
    const pair = await makePair({ a: { inspect: 0, persistent: { timeoutMs: 150 } }, b: { persistent: { timeoutMs: 150 } } });
    const url = pair.a.transport.inspectUrl!;
    const views = async () => (JSON.parse((await get(`${url}state`)).body) as { endpoints: EndpointView[] }).endpoints.find((e) => e.key === 'a→b')!.persistent;
    try {
      const n = 256;
      const [da, db] = [pair.a.driver, pair.b.driver];
      const [ra, rb] = await Promise.all([
        pair.a.ep.register(deviceWith(da, new Uint8Array(n).fill(1))),
        pair.b.ep.register(deviceWith(db, new Uint8Array(n))),
      ]);
      const [ta, tb] = await Promise.all([pair.a.ep.persistent(ra, { role: 'send', length: n }), pair.b.ep.persistent(rb, { role: 'recv', length: n })]);
      expect((await views())[String(ta.id)]).toMatchObject({ role: 'send', state: 'armed', states: ['registered', 'armed'] });
      const [sa, sb] = [da.streamCreate(), db.streamCreate()];
      ta.start(sa);
      tb.start(sb);
      ta.start(sa); // one round more than the receiver starts: stuck, then failed on both sides
      await ta.whenFailed();
      const v = (await views())[String(ta.id)]!;
      expect(v.state).toBe('closed');
      expect(v.reason).toBe('SMCUDA_PERSISTENT_STUCK');
      expect(v.states).toContain('replaying');
      expect(v.states.slice(-2)).toEqual(['stuck', 'closed']);
      expect(tb.machineState).toBe('closed');
    } finally {
      await pair.close();
    }
  });

  it('refuses a host other than 127.0.0.1', async () => {
    await expect(makePair({ a: { inspect: { port: 0, host: '0.0.0.0' as '127.0.0.1' } } })).rejects.toThrow(/127\.0\.0\.1/);
  });
});

describe('InspectorModel', () => {
  it("shows each persistent transfer's machine state from its 'persistent' records, apart from the cache counters", () => {
    const m = new InspectorModel();
    const pt = (t: number, transfer: number, from: string, to: string, reason?: string) =>
      m.apply({ t, pid: 1, self: 'a', peer: 'b', kind: 'persistent', transfer, from, to, role: 'send', ...(reason ? { reason } : {}) });
    pt(1, 1, 'registered', 'armed');
    pt(2, 1, 'armed', 'replaying');
    pt(3, 2, 'registered', 'armed');
    pt(4, 1, 'replaying', 'stuck');
    pt(5, 1, 'stuck', 'closed', 'SMCUDA_PERSISTENT_STUCK');
    const [v] = m.endpoints();
    expect(v!.cache).toEqual({});
    expect(v!.persistent['1']).toMatchObject({
      transfer: 1,
      role: 'send',
      state: 'closed',
      reason: 'SMCUDA_PERSISTENT_STUCK',
      transitions: 4,
      states: ['registered', 'armed', 'replaying', 'stuck', 'closed'],
    });
    expect(v!.persistent['2']).toMatchObject({ state: 'armed', states: ['registered', 'armed'] });
  });

  it('keeps the last 20 transitions and marks an endpoint closed on CLOSE', () => {
    const m = new InspectorModel();
    for (let i = 0; i < 30; i++) m.apply({ t: i, pid: 1, self: 'a', peer: 'b', kind: 'state', from: 'INIT', to: i % 2 ? 'SENT' : 'INIT' });
    m.apply({ t: 31, pid: 1, self: 'a', peer: 'b', kind: 'frame', dir: 'send', frame: 'CLOSE' });
    const [v] = m.endpoints();
    expect(v!.transitions.length).toBe(20);
    expect(v!.transitions[0]!.t).toBe(10);
    expect(v!.closed).toBe(true);
    expect(v!.frames.sent).toBe(1);
  });
});
