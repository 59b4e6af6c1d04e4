/**
 * What the inspector page shows, built from trace records (src/trace.ts), so
 * one model serves both sources: a running Transport's own tracer, and a trace
 * file written by several processes. One view per endpoint (self → peer):
 * its negotiation state, its recent transitions, frame counts, cache counters,
 * and its persistent transfers with the state of each one's machine
 * (machines/persistent.ts: registered, armed, replaying, stuck, closed).
 */
import { EventEmitter } from 'node:events';
import type { TraceRecord } from '../trace.js';

export const RECENT_TRANSITIONS = 20;

export interface TransitionView {
  /** µs since the epoch. */
  t: number;
  from: string;
  to: string;
  tries?: number;
  reason?: string;
}

/** One side of a persistent transfer, as its 'persistent' trace records left it. */
export interface PersistentView {
  transfer: number;
  role: string;
  /** Its machine's state: registered, armed, replaying, stuck or closed. */
  state: string;
  /** Why it closed, where it failed (an SMCUDA_PERSISTENT_* code). */
  reason?: string;
  /** Changes of state seen. */
  transitions: number;
  /** The states it went through, oldest first (the last RECENT_TRANSITIONS + 1). */
  states: string[];
  updated: number;
}

export interface EndpointView {
  /** 'self→peer' */
  key: string;
  self: string;
  peer: string;
  pid: number;
  state: string;
  /** The last RECENT_TRANSITIONS changes, oldest first. */
  transitions: TransitionView[];
  frames: { sent: number; received: number };
  /** Cache events by type: hit, miss, stale, evict, invalidate, open, open-failed, close. */
  cache: Record<string, number>;
  /** A CLOSE frame went by: the endpoint is closed (its state stays what the machine said). */
  closed: boolean;
  /** Its persistent transfers by id, closed ones included. */
  persistent: Record<string, PersistentView>;
  updated: number;
}

export class InspectorModel extends EventEmitter<{ change: [view: EndpointView] }> {
  private readonly views = new Map<string, EndpointView>();
  /** First record's time (µs), for relative times on the page. */
  startUs: number | undefined;

  apply(r: TraceRecord): void {
    this.startUs ??= r.t;
    if (r.kind === 'collective') return; // a communicator's call, not an endpoint's
    const key = `${r.self}→${r.peer}`;
    let v = this.views.get(key);
    if (!v) {
      v = {
        key,
        self: r.self,
        peer: r.peer,
        pid: r.pid,
        state: 'INIT',
        transitions: [],
        frames: { sent: 0, received: 0 },
        cache: {},
        closed: false,
        persistent: {},
        updated: r.t,
      };
      this.views.set(key, v);
    }
    v.updated = r.t;
    if (r.kind === 'frame') {
      if (r.dir === 'send') v.frames.sent++;
      else v.frames.received++;
      if (r.frame === 'CLOSE') v.closed = true;
    } else if (r.kind === 'state') {
      const tr: TransitionView = { t: r.t, from: String(r.from), to: String(r.to) };
      if (typeof r.tries === 'number') tr.tries = r.tries;
      if (typeof r.reason === 'string') tr.reason = r.reason;
      v.transitions.push(tr);
      if (v.transitions.length > RECENT_TRANSITIONS) v.transitions.shift();
      v.state = tr.to;
    } else if (r.kind === 'persistent') {
      const id = String(r.transfer);
      const p = (v.persistent[id] ??= {
        transfer: Number(r.transfer),
        role: String(r.role),
        state: String(r.from),
        transitions: 0,
        states: [String(r.from)],
        updated: r.t,
      });
      p.state = String(r.to);
      p.states.push(p.state);
      if (p.states.length > RECENT_TRANSITIONS + 1) p.states.shift();
      p.transitions++;
      p.updated = r.t;
      if (typeof r.reason === 'string') p.reason = r.reason;
    } else {
      const type = String(r.type);
      v.cache[type] = (v.cache[type] ?? 0) + 1;
    }
    this.emit('change', v);
  }

  endpoints(): EndpointView[] {
    return [...this.views.values()].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  }
}
