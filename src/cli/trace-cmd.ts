/**
 * `smcuda trace`: a recorded trace (SMCUDA_TRACE=FILE, Transport.create({ trace }),
 * `smcuda demo --trace FILE`) as a Mermaid sequence diagram, a per-endpoint
 * timeline, or merged JSON records; or the ranks' flight records (a
 * Communicator's dumps, told apart by their header line) read together:
 * who is stuck, and where.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { analyzeFlights, isFlightText, parseFlightFile, renderFlightAnalysis } from '../diagram/flight-analysis.js';
import { toMermaidSequence } from '../diagram/sequence.js';
import { renderTimelines, timelines } from '../diagram/timeline.js';
import { filterTrace, mergeTraces, parseMs, parseTrace, type TraceFilter } from '../diagram/trace-records.js';
import { UsageError } from './usage.js';

const HELP = `usage: smcuda trace FILE... [options]
       smcuda trace DIR_OR_FLIGHT_FILE... [--json]

Reads JSON-lines traces (one file written by several processes, or one file
per process: all are merged in time order) and prints:

  --format mermaid      a Mermaid sequence diagram (default): one participant
                        per transport, an arrow per control frame labelled with
                        its type and key fields (IPC_REQ attempt=1, RGET seq=3
                        64 KiB), a note per negotiation change (rank0: SENT→OK)
  --format text         per endpoint: its state changes with times, frames
                        sent and received by type, cache events by type
  --format json         { startUs, records: [...], endpoints: [...] }

Filters:
  --endpoint ID         ID keeps transport ID's endpoints and its peers'
                        endpoints to it; A:B keeps the pair A–B (both sides).
                        Repeat for several.
  --from T  --to T      a time window, in milliseconds from the first record of
                        the trace (before filtering): 250, 250ms or 1.5s
  --json                same as --format json
  -h, --help            this help

Record a trace with: smcuda demo --trace run.jsonl (or SMCUDA_TRACE=run.jsonl).

Who is stuck: given a Communicator's flight records (flight.rank<r>.<pid>.jsonl,
one per rank, each rank's last calls; a directory stands for the flight records
in it; with SMCUDA_TRACE=/tmp/run.jsonl they are written to /tmp/run.flight/
when the communicator aborts), it reads them together and says which rank is
behind and in which call:

  rank 2 never started call 1234 (allreduce f32×1048576); ranks 0, 1, 3 are waiting in it
  rank 1 is at call 17 (broadcast f32×8 root 0) while ranks 0, 2 are at call 18
  ranks disagree at call 9: rank 0 allreduce f32×1000, rank 1 allreduce i32×1000
  rank 1's recv #2 from rank 0 (f32 × 16) did not finish (waited 60.0 s): rank 0 never made its send #2 to rank 1 (its last: #1)

then one line per rank (its calls, the last finished, the call it is in).
--json prints the analysis as data: { verdict, lines, mismatch, p2p, groups,
ranks, missing, notes }. Give flight records and traces in separate runs.`;

export async function runTrace(argv: string[]): Promise<number> {
  let values: { format?: string; endpoint?: string[]; from?: string; to?: string; json?: boolean; help?: boolean };
  let files: string[];
  try {
    const parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      strict: true,
      options: {
        format: { type: 'string' },
        endpoint: { type: 'string', multiple: true },
        from: { type: 'string' },
        to: { type: 'string' },
        json: { type: 'boolean', default: false },
        help: { type: 'boolean', short: 'h', default: false },
      },
    });
    values = parsed.values;
    files = parsed.positionals;
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  if (values.help) {
    console.log(HELP);
    return 0;
  }
  const format = values.json ? 'json' : (values.format ?? 'mermaid');
  if (values.json && values.format !== undefined && values.format !== 'json') throw new UsageError('--json and --format disagree');
  if (!['mermaid', 'text', 'json'].includes(format)) throw new UsageError(`--format must be mermaid, text or json, got '${format}'`);
  if (files.length === 0) throw new UsageError('give the trace FILE (written with SMCUDA_TRACE=FILE or smcuda demo --trace FILE)');
  const filter: TraceFilter = {};
  try {
    if (values.from !== undefined) filter.fromMs = parseMs(values.from);
    if (values.to !== undefined) filter.toMs = parseMs(values.to);
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  if (filter.fromMs !== undefined && filter.toMs !== undefined && filter.fromMs > filter.toMs) throw new UsageError('--from is after --to');
  if (values.endpoint?.length) filter.endpoints = values.endpoint;

  const inputs = expandDirs(files).map((f) => ({ file: f, text: readTraceFile(f) }));
  const flights = inputs.filter((i) => isFlightText(i.text));
  if (flights.length > 0) {
    if (flights.length < inputs.length) {
      const traces = inputs.filter((i) => !isFlightText(i.text)).map((i) => i.file);
      throw new UsageError(
        `${traces.join(', ')}: not flight records, and ${flights.map((i) => i.file).join(', ')} are: give flight records and traces in separate runs`,
      );
    }
    if (filter.fromMs !== undefined || filter.toMs !== undefined || filter.endpoints)
      throw new UsageError('--endpoint, --from and --to filter traces, not flight records');
    if (format === 'mermaid' && values.format !== undefined) throw new UsageError('flight records print as text (default) or json');
    const analysis = analyzeFlights(flights.map((i) => parseFlightFile(i.text, i.file)));
    if (format === 'json') console.log(JSON.stringify(analysis, null, 2));
    else process.stdout.write(renderFlightAnalysis(analysis));
    return 0;
  }
  const all = mergeTraces(inputs.map((i) => parseTrace(i.text, i.file)));
  const startUs = all[0]?.t ?? 0;
  const records = filterTrace(all, filter, startUs);
  if (all.length === 0) console.error(`smcuda trace: ${files.join(', ')}: no records`);
  else if (records.length === 0) console.error('smcuda trace: no record matches the filters');

  if (format === 'mermaid') {
    process.stdout.write(toMermaidSequence(records, { header: `smcuda trace ${files.join(' ')}: ${records.length} of ${all.length} records` }));
  } else if (format === 'text') {
    process.stdout.write(renderTimelines(timelines(records, startUs)));
  } else {
    console.log(JSON.stringify({ startUs, records, endpoints: timelines(records, startUs) }, null, 2));
  }
  return 0;
}

/** The files as given, a directory standing for the flight records in it (flight.*.jsonl, by name). */
function expandDirs(paths: readonly string[]): string[] {
  const out: string[] = [];
  for (const p of paths) {
    let dir = false;
    try {
      dir = statSync(p).isDirectory();
    } catch {
      // A missing path is said by readTraceFile.
    }
    if (!dir) {
      out.push(p);
      continue;
    }
    const names = readdirSync(p)
      .filter((n) => /^flight\..*\.jsonl$/.test(n))
      .sort();
    if (names.length === 0)
      throw new UsageError(
        `${p} is a directory with no flight records (flight.rank<r>.<pid>.jsonl) in it: give a trace file itself, or the directory a communicator dumped its flight records to`,
      );
    out.push(...names.map((n) => join(p, n)));
  }
  return out;
}

/** A trace file's text; a missing or unreadable file is said in words, not as a raw errno. */
function readTraceFile(file: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT')
      throw new UsageError(
        `no trace file at ${file}: record one with SMCUDA_TRACE=${file} (any smcuda program) or smcuda demo --trace ${file}, then run this again`,
      );
    if (code === 'EACCES' || code === 'EPERM')
      throw new UsageError(`cannot read ${file} (permission denied): traces are written mode 0600, readable only by the user who recorded them`);
    throw err;
  }
}
