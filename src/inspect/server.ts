/**
 * The inspector's HTTP server: 127.0.0.1 only, and only for requests that
 * name it as 127.0.0.1 or localhost (a page elsewhere cannot reach it through
 * DNS rebinding), and only under a per-run secret path (`/<secret>/`, 32
 * random bytes in hex, compared in constant time): another local user can
 * reach 127.0.0.1 too, but not the URL this process prints. Anything else
 * gets 403. Routes, under `/<secret>/`:
 *   GET              the page (page.ts; it asks for the rest by relative URLs)
 *   GET mermaid.min.js  Mermaid's browser bundle, from node_modules
 *   GET machine.mmd  the negotiation machine as Mermaid (src/diagram/)
 *   GET state        { source, startUs, endpoints } as JSON
 *   GET events       server-sent events: 'snapshot' (as state), then 'endpoint' per change
 */
import { randomBytes, timingSafeEqual } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { debug } from '../debug.js';
import { mermaidBundlePath } from '../diagram/chromium.js';
import { findMachine } from '../diagram/machines.js';
import { mermaidOf } from '../diagram/render.js';
import { ConfigError } from '../errors.js';
import { ConnectionGuard } from './connection-guard.js';
import type { EndpointView, InspectorModel } from './model.js';
import { inspectorPage } from './page.js';

export const INSPECT_HOST = '127.0.0.1';

export interface InspectorServerOptions {
  model: InspectorModel;
  /** 0: any free port. */
  port?: number;
  /** Shown on the page: where the data comes from. */
  source: string;
  title?: string;
  /** Connections kept at most (default 64); past it the oldest that has not shown the secret is closed. */
  maxConnections?: number;
  /** A connection that has not asked for a URL with the secret is closed after this many ms (default 5000). */
  idleMs?: number;
}

export interface InspectorServer {
  /** The page's URL, with the run's secret: give it only to whom may see the endpoints. */
  url: string;
  port: number;
  close(): Promise<void>;
}

/**
 * Counter changes are sent at most this often per endpoint (a busy endpoint
 * would otherwise flood the page); a state change is sent at once, so that
 * the page sees every state, however briefly the endpoint stayed in it.
 */
const FLUSH_MS = 50;

export async function startInspectorServer(options: InspectorServerOptions): Promise<InspectorServer> {
  const port = options.port ?? 0;
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new ConfigError(`inspect port must be an integer from 0 to 65535, got ${port}`);
  const guard = new ConnectionGuard(options.maxConnections, options.idleMs); // checks its options before anything starts
  const { model } = options;
  const title = options.title ?? 'smcuda inspector';
  const machine = mermaidOf(findMachine('negotiation')!);
  const clients = new Set<ServerResponse>();
  const pending = new Map<string, EndpointView>();
  const sentState = new Map<string, string>();
  let flushTimer: NodeJS.Timeout | undefined;

  const send = (v: EndpointView) => {
    const msg = `event: endpoint\ndata: ${JSON.stringify(v)}\n\n`;
    for (const c of clients) c.write(msg);
    sentState.set(v.key, v.state);
  };
  const flush = () => {
    flushTimer = undefined;
    for (const v of pending.values()) send(v);
    pending.clear();
  };
  const onChange = (v: EndpointView) => {
    if (sentState.get(v.key) !== v.state) {
      pending.delete(v.key);
      send(v);
      return;
    }
    pending.set(v.key, v);
    flushTimer ??= setTimeout(flush, FLUSH_MS);
  };
  model.on('change', onChange);
  const heartbeat = setInterval(() => {
    for (const c of clients) c.write(': keep-alive\n\n');
  }, 15_000);
  heartbeat.unref();

  const secret = randomBytes(32).toString('hex');
  const prefix = Buffer.from(`/${secret}/`);
  /** The route under the secret prefix, or undefined when the path does not start with it (constant time in the secret). */
  const route = (path: string): string | undefined => {
    const head = Buffer.from(path.slice(0, prefix.length));
    if (head.length !== prefix.length || !timingSafeEqual(head, prefix)) return undefined;
    return `/${path.slice(prefix.length)}`;
  };
  const snapshot = () => ({ source: options.source, startUs: model.startUs ?? null, endpoints: model.endpoints() });
  let actualPort = port;

  const handle = (req: IncomingMessage, res: ServerResponse) => {
    const host = (req.headers.host ?? '').toLowerCase();
    if (host !== `${INSPECT_HOST}:${actualPort}` && host !== `localhost:${actualPort}`) {
      res.writeHead(403, { 'content-type': 'text/plain' }).end('smcuda inspector: only http://127.0.0.1 or http://localhost may ask\n');
      return;
    }
    const path = route((req.url ?? '/').split('?')[0]);
    if (path === undefined) {
      res.writeHead(403, { 'content-type': 'text/plain' }).end("smcuda inspector: open the URL this inspector printed (it holds the run's secret)\n");
      return;
    }
    guard.prove(req.socket);
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET' }).end();
      return;
    }
    const common = { 'cache-control': 'no-store', 'x-content-type-options': 'nosniff' };
    switch (path) {
      case '/':
        res.writeHead(200, { ...common, 'content-type': 'text/html; charset=utf-8' }).end(inspectorPage(title));
        return;
      case '/mermaid.min.js': {
        let file: string;
        try {
          file = mermaidBundlePath();
        } catch (err) {
          res.writeHead(404, { 'content-type': 'text/plain' }).end(`${(err as Error).message}\n`);
          return;
        }
        res.writeHead(200, { 'content-type': 'text/javascript; charset=utf-8', 'cache-control': 'max-age=3600' });
        createReadStream(file).pipe(res);
        return;
      }
      case '/favicon.ico':
        res.writeHead(204).end();
        return;
      case '/machine.mmd':
        res.writeHead(200, { ...common, 'content-type': 'text/plain; charset=utf-8' }).end(machine);
        return;
      case '/state':
        res.writeHead(200, { ...common, 'content-type': 'application/json' }).end(JSON.stringify(snapshot()));
        return;
      case '/events':
        res.writeHead(200, { ...common, 'content-type': 'text/event-stream', connection: 'keep-alive' });
        res.write(`event: snapshot\ndata: ${JSON.stringify(snapshot())}\n\n`);
        clients.add(res);
        debug('inspector: page connected (%d)', clients.size);
        req.on('close', () => clients.delete(res));
        return;
      default:
        res.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
    }
  };

  const server: Server = createServer(handle);
  server.on('connection', (socket) => guard.admit(socket));
  await new Promise<void>((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) =>
      reject(err.code === 'EADDRINUSE' ? new ConfigError(`inspect port ${port} is in use on ${INSPECT_HOST}; pick another (0: any free port)`) : err),
    );
    server.listen(port, INSPECT_HOST, () => resolve());
  });
  actualPort = (server.address() as AddressInfo).port;
  const url = `http://${INSPECT_HOST}:${actualPort}/${secret}/`;
  debug('inspector: serving http://%s:%d/ (%s)', INSPECT_HOST, actualPort, options.source); // not the secret: debug output may be shared
  return {
    url,
    port: actualPort,
    close: async () => {
      model.off('change', onChange);
      clearInterval(heartbeat);
      if (flushTimer) clearTimeout(flushTimer);
      for (const c of clients) c.end();
      clients.clear();
      guard.close();
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeAllConnections();
      await closed;
    },
  };
}
