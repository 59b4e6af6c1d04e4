/**
 * The `inspect` option of Transport.create: this process's endpoints on the
 * inspector page. The transport's tracer is wrapped so that every record also
 * goes to the page's model (the file trace, if any, still gets its lines).
 */
import { describeFrame, type Tracer } from '../trace.js';
import type { Frame } from '../wire/frames.js';
import { ConfigError } from '../errors.js';
import { InspectorModel } from './model.js';
import { INSPECT_HOST, startInspectorServer, type InspectorServer } from './server.js';

export type InspectOption = number | { port?: number; host?: typeof INSPECT_HOST };

const origin = performance.timeOrigin;

export class TransportInspector {
  readonly model = new InspectorModel();
  private server: InspectorServer | undefined;
  private readonly port: number;

  constructor(
    option: InspectOption,
    private readonly self: string,
  ) {
    const port = typeof option === 'number' ? option : (option.port ?? 0);
    if (typeof option === 'object' && option.host !== undefined && option.host !== INSPECT_HOST) {
      throw new ConfigError(`inspect.host can only be ${INSPECT_HOST}: the inspector is never served beyond this machine`);
    }
    this.port = port;
  }

  /** A tracer feeding the page, and `inner` too when given. */
  tracer(inner: Tracer | undefined): Tracer {
    const rec = (peer: string, kind: 'frame' | 'state' | 'cache' | 'persistent', fields: Record<string, unknown>) =>
      this.model.apply({ t: Math.round((origin + performance.now()) * 1000), pid: process.pid, self: this.self, peer, kind, ...fields });
    return {
      frame: (peer: string, dir: 'send' | 'recv', frame: Frame) => {
        inner?.frame(peer, dir, frame);
        rec(peer, 'frame', { dir, ...describeFrame(frame) });
      },
      state: (peer, from, to, info) => {
        inner?.state(peer, from, to, info);
        rec(peer, 'state', { from, to, ...info });
      },
      cache: (peer, event) => {
        inner?.cache(peer, event);
        rec(peer, 'cache', { ...event });
      },
      persistent: (peer, transfer, from, to, info) => {
        inner?.persistent?.(peer, transfer, from, to, info);
        rec(peer, 'persistent', { transfer, from, to, ...info });
      },
      close: () => inner?.close(),
    };
  }

  async listen(): Promise<string> {
    this.server = await startInspectorServer({ model: this.model, port: this.port, source: `transport ${this.self} (pid ${process.pid})` });
    return this.server.url;
  }

  get url(): string | undefined {
    return this.server?.url;
  }

  async close(): Promise<void> {
    await this.server?.close();
    this.server = undefined;
  }
}
