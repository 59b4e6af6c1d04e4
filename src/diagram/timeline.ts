/**
 * Per-endpoint summaries of a trace: the negotiation states an endpoint went
 * through and when, the frames it sent and received by type, its cache events
 * by type. Times are milliseconds from the trace's start.
 */
import type { TraceRecord } from '../trace.js';

export interface EndpointTimeline {
  self: string;
  peer: string;
  pid: number;
  /** Negotiation state changes, in order. */
  states: { ms: number; from: string; to: string; tries?: number; reason?: string }[];
  /** The last state seen ('INIT' where frames but no change were traced). */
  state: string;
  frames: { sent: Record<string, number>; received: Record<string, number> };
  cache: Record<string, number>;
  firstMs: number;
  lastMs: number;
}

export function timelines(records: TraceRecord[], startUs = records[0]?.t ?? 0): EndpointTimeline[] {
  const byKey = new Map<string, EndpointTimeline>();
  for (const r of records) {
    if (r.kind === 'collective') continue; // a communicator's call, not an endpoint's
    const ms = (r.t - startUs) / 1000;
    const key = `${r.self}\u0000${r.peer}`;
    let e = byKey.get(key);
    if (!e) {
      e = { self: r.self, peer: r.peer, pid: r.pid, states: [], state: 'INIT', frames: { sent: {}, received: {} }, cache: {}, firstMs: ms, lastMs: ms };
      byKey.set(key, e);
    }
    e.lastMs = ms;
    if (r.kind === 'frame') {
      const side = r.dir === 'send' ? e.frames.sent : e.frames.received;
      const type = String(r.frame);
      side[type] = (side[type] ?? 0) + 1;
    } else if (r.kind === 'state') {
      const s: EndpointTimeline['states'][number] = { ms, from: String(r.from), to: String(r.to) };
      if (typeof r.tries === 'number') s.tries = r.tries;
      if (typeof r.reason === 'string') s.reason = r.reason;
      e.states.push(s);
      e.state = s.to;
    } else {
      const type = String(r.type);
      e.cache[type] = (e.cache[type] ?? 0) + 1;
    }
  }
  return [...byKey.values()].sort((a, b) => (a.self < b.self ? -1 : a.self > b.self ? 1 : a.peer < b.peer ? -1 : a.peer > b.peer ? 1 : 0));
}

function counts(c: Record<string, number>): string {
  const entries = Object.entries(c);
  return entries.length ? entries.map(([k, v]) => `${k} ${v}`).join(', ') : '-';
}

export function renderTimelines(list: EndpointTimeline[]): string {
  const lines: string[] = [];
  for (const e of list) {
    lines.push(`${e.self} → ${e.peer} (pid ${e.pid}): ${e.state}`);
    if (e.states.length === 0) lines.push('  (no state change traced)');
    for (const s of e.states) {
      const extra = [s.tries !== undefined ? `tries=${s.tries}` : '', s.reason ? `reason: ${s.reason}` : ''].filter(Boolean).join('  ');
      lines.push(`  ${`+${s.ms.toFixed(3)} ms`.padStart(14)}  ${`${s.from}→${s.to}`.padEnd(14)}${extra ? `  ${extra}` : ''}`);
    }
    lines.push(`  frames sent:     ${counts(e.frames.sent)}`);
    lines.push(`  frames received: ${counts(e.frames.received)}`);
    lines.push(`  cache events:    ${counts(e.cache)}`);
    lines.push('');
  }
  return lines.join('\n');
}
