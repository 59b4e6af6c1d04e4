/**
 * Reading traces (src/trace.ts writes them): JSON lines of TraceRecord from
 * one or several processes, in one file or several. Records are merged in
 * time order (t: wall-clock µs, comparable across processes; ties keep file
 * order), and may be filtered by endpoint and by a window in milliseconds
 * relative to the first record of the whole trace — so a window names the
 * same moments whatever the filter.
 */
import { ArgumentRangeError, SmcudaError } from '../errors.js';
import type { TraceRecord } from '../trace.js';

export class TraceFormatError extends SmcudaError {
  constructor(message: string) {
    super('SMCUDA_TRACE_FORMAT', message);
  }
}

/** Parses one trace text; blank lines are skipped, a bad line is an error naming its source and line. */
export function parseTrace(text: string, source = 'trace'): TraceRecord[] {
  const out: TraceRecord[] = [];
  const lines = text.split('\n');
  lines.forEach((line, i) => {
    if (line.trim() === '') return;
    const rec = parseRecord(line);
    if (!rec) throw new TraceFormatError(`${source}:${i + 1}: not a trace record (a JSON object with t, pid, self, peer, kind): ${line.slice(0, 120)}`);
    out.push(rec);
  });
  return out;
}

/** One line as a record, or undefined. */
export function parseRecord(line: string): TraceRecord | undefined {
  let v: unknown;
  try {
    v = JSON.parse(line);
  } catch {
    return undefined;
  }
  if (!v || typeof v !== 'object') return undefined;
  const r = v as Record<string, unknown>;
  if (typeof r.t !== 'number' || typeof r.pid !== 'number' || typeof r.self !== 'string' || typeof r.peer !== 'string') return undefined;
  if (r.kind !== 'frame' && r.kind !== 'state' && r.kind !== 'cache' && r.kind !== 'collective') return undefined;
  return r as TraceRecord;
}

/** Several traces merged in time order (stable: equal times keep their order). */
export function mergeTraces(traces: TraceRecord[][]): TraceRecord[] {
  return traces
    .flat()
    .map((r, i) => ({ r, i }))
    .sort((a, b) => a.r.t - b.r.t || a.i - b.i)
    .map((x) => x.r);
}

export interface TraceFilter {
  /** 'A' keeps every record of transport A and of its peers' endpoints to A; 'A:B' (or 'A→B') keeps the pair A–B, both sides. */
  endpoints?: string[];
  /** Milliseconds from the trace's first record, inclusive. */
  fromMs?: number;
  toMs?: number;
}

export function endpointMatcher(spec: string): (r: TraceRecord) => boolean {
  const parts = spec.split(/:|→|->/);
  if (parts.length === 1) return (r) => r.self === spec || r.peer === spec;
  const [a, b] = parts as [string, string];
  return (r) => (r.self === a && r.peer === b) || (r.self === b && r.peer === a);
}

/** `startUs`: the time the window is relative to (default: the first record's). */
export function filterTrace(records: TraceRecord[], filter: TraceFilter, startUs = records[0]?.t ?? 0): TraceRecord[] {
  const matchers = (filter.endpoints ?? []).map(endpointMatcher);
  return records.filter((r) => {
    const ms = (r.t - startUs) / 1000;
    if (filter.fromMs !== undefined && ms < filter.fromMs) return false;
    if (filter.toMs !== undefined && ms > filter.toMs) return false;
    return matchers.length === 0 || matchers.some((m) => m(r));
  });
}

/** '250', '250ms', '1.5s' → milliseconds. */
export function parseMs(text: string): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*(ms|s)?\s*$/.exec(text);
  if (!m) throw new ArgumentRangeError(`not a time: ${JSON.stringify(text)} (milliseconds from the trace's start, e.g. 250, 250ms, 1.5s)`);
  return Number(m[1]) * (m[2] === 's' ? 1000 : 1);
}
