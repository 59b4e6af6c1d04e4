/**
 * `smcuda inspect`: a live page of every endpoint's negotiation, fed by a trace
 * file that running processes append to (SMCUDA_TRACE=FILE, or
 * `smcuda demo --trace FILE`). A trace file is the one thing every smcuda
 * process can already write, from any number of processes, so the inspector
 * needs no connection to them and can start before or after them.
 */
import { resolve } from 'node:path';
import { InspectorModel } from '../inspect/model.js';
import { startInspectorServer } from '../inspect/server.js';
import { MAX_TRACE_LINE_BYTES, TraceFollower } from '../inspect/trace-follower.js';
import { parse, UsageError } from './usage.js';

const HELP = `usage: smcuda inspect [--trace FILE] [--port P] [--max-line-bytes N] [--json]

Serves a web page on http://127.0.0.1:P/ (this machine only) showing each
endpoint's negotiation machine with its current state highlighted, its recent
transitions, its cache counters and its persistent transfers (each one's
state: registered, armed, replaying, stuck, closed, and why it closed),
updated live as the trace file grows.
The processes being watched write the trace; for example, in two shells:

  smcuda inspect --trace /tmp/run.jsonl --port 8377
  smcuda demo --trace /tmp/run.jsonl

A file written earlier is shown as it ended. Everything the page uses is
served from this package (Mermaid from node_modules): no network needed.
A program can also serve its own transport's page: Transport.create({ inspect: PORT }).

  --trace FILE          the trace to follow (default: $SMCUDA_TRACE); it may not exist yet
  --port P              port on 127.0.0.1 (default 8377; 0: any free port)
  --max-line-bytes N    skip (with a warning) trace lines longer than N bytes (default 1048576)
  --json                print { url, trace } as one JSON line once serving
  -h, --help            this help

Runs until interrupted (Ctrl-C).`;

export async function runInspect(argv: string[]): Promise<number> {
  const a = parse(argv, {
    trace: { type: 'string' },
    port: { type: 'string', default: '8377' },
    'max-line-bytes': { type: 'string', default: String(MAX_TRACE_LINE_BYTES) },
    json: { type: 'boolean', default: false },
    help: { type: 'boolean', short: 'h', default: false },
  });
  if (a.help) {
    console.log(HELP);
    return 0;
  }
  const trace = a.trace ?? process.env.SMCUDA_TRACE;
  if (!trace) throw new UsageError('give --trace FILE (or set SMCUDA_TRACE): the trace the watched processes write');
  const port = Number(a.port);
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new UsageError(`--port must be an integer from 0 to 65535, got ${a.port}`);

  const maxLineBytes = Number(a['max-line-bytes']);
  if (!Number.isInteger(maxLineBytes) || maxLineBytes < 1) throw new UsageError(`--max-line-bytes must be an integer ≥ 1, got ${a['max-line-bytes']}`);

  const path = resolve(trace);
  const model = new InspectorModel();
  const follower = new TraceFollower(path, (r) => model.apply(r), { maxLineBytes, onWarning: (msg) => console.error(`smcuda inspect: ${msg}`) });
  await follower.start();
  const server = await startInspectorServer({ model, port, source: `trace ${path}` });
  if (a.json) console.log(JSON.stringify({ url: server.url, trace: path }));
  else console.log(`smcuda inspect: ${server.url} (following ${path}; Ctrl-C to stop)`);

  await new Promise<void>((done) => {
    const stop = () => {
      process.off('SIGINT', stop);
      process.off('SIGTERM', stop);
      done();
    };
    process.on('SIGINT', stop);
    process.on('SIGTERM', stop);
  });
  follower.close();
  await server.close();
  return 0;
}
