/**
 * Tracing: every control frame, state transition and cache event as one JSON
 * line, with a timestamp, the process and the endpoint. Off by default; when
 * off, the endpoint holds `undefined` and pays one property check per frame.
 *
 * Several processes may append to one file: each line is written with one
 * write(2) on a file opened O_APPEND, so lines never interleave.
 */
import { closeSync, openSync, writeSync } from 'node:fs';
import { FrameType, type Frame } from './wire/frames.js';

/** One line of a trace file. */
export interface TraceRecord {
  /** Wall-clock microseconds since the epoch (comparable across processes). */
  t: number;
  pid: number;
  /** This transport's id. */
  self: string;
  /** The endpoint's peer id. */
  peer: string;
  kind: 'frame' | 'state' | 'cache';
  [field: string]: unknown;
}

/** Receives every traced event of a transport's endpoints (FileTracer writes them to a file). */
export interface Tracer {
  /** `atUs`: when it happened, if not now (e.g. a HELLO sent before the peer's id was known). */
  frame(peer: string, dir: 'send' | 'recv', frame: Frame, atUs?: number): void;
  state(peer: string, from: string, to: string, info: { tries: number; reason?: string }): void;
  cache(peer: string, event: object): void;
  close(): void;
}

const origin = performance.timeOrigin;

/** Wall-clock microseconds since the epoch, comparable across processes. */
export function nowUs(): number {
  return Math.round((origin + performance.now()) * 1000);
}

/** Summarises a frame for the trace: its fields, without payload bytes or handles. */
export function describeFrame(frame: Frame): Record<string, unknown> {
  const out: Record<string, unknown> = { frame: FrameType[frame.type] };
  for (const [k, v] of Object.entries(frame)) {
    if (k === 'type') continue;
    if (v instanceof Uint8Array) out[k] = k === 'data' ? v.byteLength : v.byteLength > 0;
    else if (typeof v === 'bigint') out[k] = `0x${v.toString(16)}`;
    else out[k] = v;
  }
  return out;
}

function jsonSafe(_key: string, v: unknown): unknown {
  if (typeof v === 'bigint') return `0x${v.toString(16)}`;
  if (v instanceof Uint8Array) return v.byteLength;
  return v;
}

/**
 * The Tracer that `Transport.create({ trace: path })` and `SMCUDA_TRACE=path`
 * make: appends one JSON line (a TraceRecord) per control frame, negotiation
 * transition and cache event to `path`. Several processes may share one
 * file. Read it with `smcuda trace path` (a sequence diagram or timelines)
 * or `smcuda inspect --trace path`. Give one to an own transport wrapper to
 * trace the same records.
 */
export class FileTracer implements Tracer {
  private fd: number | undefined;

  constructor(
    readonly path: string,
    private readonly self: string,
  ) {
    this.fd = openSync(path, 'a');
  }

  private write(peer: string, kind: TraceRecord['kind'], fields: Record<string, unknown>, atUs = nowUs()): void {
    if (this.fd === undefined) return;
    const rec = { t: atUs, pid: process.pid, self: this.self, peer, kind, ...fields };
    writeSync(this.fd, JSON.stringify(rec, jsonSafe) + '\n');
  }

  frame(peer: string, dir: 'send' | 'recv', frame: Frame, atUs?: number): void {
    this.write(peer, 'frame', { dir, ...describeFrame(frame) }, atUs);
  }

  state(peer: string, from: string, to: string, info: { tries: number; reason?: string }): void {
    this.write(peer, 'state', { from, to, ...info });
  }

  cache(peer: string, event: object): void {
    this.write(peer, 'cache', { ...event });
  }

  close(): void {
    if (this.fd !== undefined) closeSync(this.fd);
    this.fd = undefined;
  }
}
