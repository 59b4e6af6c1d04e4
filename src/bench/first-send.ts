/**
 * The first-send suite's instruments: a fresh pair of processes, a fresh
 * endpoint, one device message from rank 1 to rank 0, timed from rank 1's
 * send() to rank 0's delivery on one clock shared by the processes
 * (performance.timeOrigin + now()), with what happened in between:
 *  - every negotiation state each side entered, and when;
 *  - every driver call and how long it took (the first cuIpcOpenMemHandle
 *    of a peer's memory sets up peer access; then the probe open, the
 *    data's open).
 * `breakdown` turns the two sides' records into where the milliseconds went.
 */
import type { CudaDriver } from '../cuda/driver.js';
import type { Endpoint } from '../endpoint.js';
import type { FirstSendResult, PathCounts } from './protocol.js';

/** Milliseconds since the epoch, with the resolution of performance.now(): comparable between processes of one host. */
export const epochMs = (): number => performance.timeOrigin + performance.now();

/** Driver calls that open a peer's memory: the first one of a process also sets up peer access. */
export const OPEN_CALLS = ['ipcOpenMemHandle', 'vmmImport', 'memPoolImport', 'memPoolImportPointer'] as const;

export interface CallRecord {
  call: string;
  at: number;
  ms: number;
}

/**
 * `driver` with every call recorded into `calls` (name, start, duration).
 * Methods run on the driver itself (not the proxy): drivers keep private
 * fields. Only for the first-send suite: a few hundred calls, not a hot path.
 */
export function timedDriver(driver: CudaDriver, calls: CallRecord[]): CudaDriver {
  return new Proxy(driver, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target) as unknown;
      if (typeof value !== 'function') return value;
      const fn = value as (...a: unknown[]) => unknown;
      if (typeof prop !== 'string') return fn.bind(target);
      return (...args: unknown[]) => {
        const at = epochMs();
        try {
          return fn.apply(target, args);
        } finally {
          calls.push({ call: prop, at, ms: epochMs() - at });
        }
      };
    },
  });
}

/** Records each negotiation state `ep` enters from now on. */
export function recordStates(ep: Endpoint): Array<{ state: string; at: number }> {
  const states: Array<{ state: string; at: number }> = [];
  ep.on('state', (state: string) => states.push({ state, at: epochMs() }));
  return states;
}

export interface FirstSendBreakdown {
  /** rank 1's send() → rank 0's recv resolved. */
  totalMs: number;
  /** Where the negotiation stood when the message was sent (INIT: it had not started). */
  stateAtSend: string;
  /** The longest peer open on each side (the first one of a process sets up peer access). */
  firstOpenMs: { initiator: number; responder: number };
  /** All timed driver calls between send and delivery, both sides, summed. */
  driverMs: number;
  /** Negotiation states entered between send and delivery, ms after the send, by side. */
  states: { initiator: Array<{ state: string; ms: number }>; responder: Array<{ state: string; ms: number }> };
  /** The rest: control hops, JavaScript, the copy itself. */
  otherMs: number;
  /** The slowest driver calls of either side since the endpoint opened (ms relative to the send: negative = before it). */
  slowest: Array<{ side: 'initiator' | 'responder'; call: string; atMs: number; ms: number }>;
  paths?: PathCounts;
  /** Endpoint.negotiate() before the send (the prepared variant), ms. */
  negotiateMs?: number;
}

export function breakdown(initiator: FirstSendResult, responder: FirstSendResult): FirstSendBreakdown {
  const t0 = initiator.at;
  const t1 = responder.at;
  const inWindow = (at: number) => at >= t0 && at <= t1;
  const calls = [...initiator.calls, ...responder.calls].filter((c) => inWindow(c.at));
  const openCalls = new Set<string>(OPEN_CALLS);
  const opens = (r: FirstSendResult) => Math.max(0, ...r.calls.filter((c) => openCalls.has(c.call)).map((c) => c.ms));
  const slowest = [
    ...initiator.calls.map((c) => ({ side: 'initiator' as const, call: c.call, atMs: c.at - t0, ms: c.ms })),
    ...responder.calls.map((c) => ({ side: 'responder' as const, call: c.call, atMs: c.at - t0, ms: c.ms })),
  ]
    .sort((a, b) => b.ms - a.ms)
    .slice(0, 8);
  const before = initiator.states.filter((s) => s.at <= t0);
  const rel = (r: FirstSendResult) => r.states.filter((s) => inWindow(s.at)).map((s) => ({ state: s.state, ms: s.at - t0 }));
  const driverMs = calls.reduce((a, c) => a + c.ms, 0);
  const totalMs = t1 - t0;
  return {
    totalMs,
    stateAtSend: before.length > 0 ? before[before.length - 1]!.state : 'INIT',
    firstOpenMs: { initiator: opens(initiator), responder: opens(responder) },
    driverMs,
    states: { initiator: rel(initiator), responder: rel(responder) },
    otherMs: Math.max(0, totalMs - driverMs),
    slowest,
    ...(initiator.paths ? { paths: initiator.paths } : {}),
    ...(initiator.negotiateMs !== undefined ? { negotiateMs: initiator.negotiateMs } : {}),
  };
}
