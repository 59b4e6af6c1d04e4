/**
 * A trace as a Mermaid sequence diagram: one participant per transport, one
 * arrow per control frame (drawn at its 'send' record), and a note for each
 * negotiation state change ("rank0: SENT→OK").
 *
 * A frame type that a pair's trace has only as 'recv' (HELLO: the transport
 * writes it before the endpoint exists, and traces only the one it receives)
 * is drawn from the receiver's record, so the picture still shows it.
 */
import type { TraceRecord } from '../trace.js';
import { frameLabel } from './frame-label.js';

function text(s: string): string {
  return s
    .replace(/[;#\n]/g, ' ')
    .replace(/\s+/g, ' ')
    .trim();
}

export interface SequenceOptions {
  /** A first comment line. */
  header?: string;
}

export function toMermaidSequence(records: TraceRecord[], options: SequenceOptions = {}): string {
  // Which (from, to, frame type) have a 'send' record: only those are drawn from sends.
  const sent = new Set<string>();
  for (const r of records) if (r.kind === 'frame' && r.dir === 'send') sent.add(`${r.self}\u0000${r.peer}\u0000${String(r.frame)}`);

  // Participants in id order (rank0, rank1, … with numeric parts compared as numbers), as P0, P1, …
  const peersOf = new Map<string, Set<string>>();
  const ids = new Set<string>();
  for (const r of records) {
    if (r.kind === 'collective') {
      ids.add(r.self);
      continue;
    }
    ids.add(r.self).add(r.peer);
    peersOf.set(r.self, (peersOf.get(r.self) ?? new Set()).add(r.peer));
  }
  const sorted = [...ids].sort((a, b) => a.localeCompare(b, 'en', { numeric: true }));
  const alias = new Map(sorted.map((id, i) => [id, `P${i}`]));
  const participant = (id: string) => alias.get(id)!;

  const body: string[] = [];
  for (const r of records) {
    if (r.kind === 'frame') {
      const key = r.dir === 'send' ? `${r.self}\u0000${r.peer}\u0000${String(r.frame)}` : `${r.peer}\u0000${r.self}\u0000${String(r.frame)}`;
      if (r.dir === 'send') body.push(`  ${participant(r.self)}->>${participant(r.peer)}: ${text(frameLabel(r))}`);
      else if (!sent.has(key)) body.push(`  ${participant(r.peer)}->>${participant(r.self)}: ${text(frameLabel(r))}`);
    } else if (r.kind === 'state') {
      const who = (peersOf.get(r.self)?.size ?? 0) > 1 ? `${r.self} (with ${r.peer})` : r.self;
      const reason = typeof r.reason === 'string' && r.reason ? ` ${r.reason.split(':')[0]}` : '';
      body.push(`  Note over ${participant(r.self)}: ${text(`${who}: ${String(r.from)}→${String(r.to)}${reason}`)}`);
    } else if (r.kind === 'collective') {
      body.push(
        `  Note over ${participant(r.self)}: ${text(`${String(r.op)} ${String(r.dtype ?? '')}×${String(r.count ?? 0)} by ${String(r.algorithm)} (${String(r.us)} µs)`)}`,
      );
    }
  }

  const lines = ['sequenceDiagram'];
  if (options.header) lines.push(`  %% ${options.header.replace(/\s+/g, ' ')}`);
  for (const [id, a] of alias) lines.push(`  participant ${a} as ${text(id)}`);
  lines.push(...body);
  return `${lines.join('\n')}\n`;
}
