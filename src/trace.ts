/**
 * Tracing: every control frame, state transition and cache event as one JSON
 * line, with a timestamp, the process and the endpoint. Off by default; when
 * off, the endpoint holds `undefined` and pays one property check per frame.
 *
 * Several processes may append to one file: each line is written with one
 * write(2) on a file opened O_APPEND, so lines never interleave.
 */
import { closeSync, constants, fstatSync, openSync, writeSync } from 'node:fs';
import { AccessDeniedError } from './errors.js';
import { FrameType, HandleKind, SegmentKind, type Frame } from './wire/frames.js';

/** One line of a trace file. */
export interface TraceRecord {
  /** Wall-clock microseconds since the epoch (comparable across processes). */
  t: number;
  pid: number;
  /** This transport's id. */
  self: string;
  /** The endpoint's peer id. */
  peer: string;
  /** 'collective': one completed call of a Communicator (peer '*'): op, dtype, count, algorithm, bytes, us. */
  kind: 'frame' | 'state' | 'cache' | 'persistent' | 'collective';
  [field: string]: unknown;
}

/** Receives every traced event of a transport's endpoints (FileTracer writes them to a file). */
export interface Tracer {
  /** `atUs`: when it happened, if not now (e.g. a HELLO sent before the peer's id was known). */
  frame(peer: string, dir: 'send' | 'recv', frame: Frame, atUs?: number): void;
  state(peer: string, from: string, to: string, info: { tries: number; reason?: string }): void;
  cache(peer: string, event: object): void;
  /** A persistent transfer's machine (machines/persistent.ts) changed state. */
  persistent?(peer: string, transfer: number, from: string, to: string, info: { role: string; reason?: string }): void;
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
    // A record's `kind` is its own ('frame'): a frame's HandleKind (RGET, REG_OFFER, FD_*) is traced by name
    // as `handleKind`, SEGMENT's SegmentKind as `segmentKind`.
    if (k === 'kind') {
      if (frame.type === FrameType.SEGMENT) out.segmentKind = SegmentKind[v as SegmentKind] ?? v;
      else out.handleKind = HandleKind[v as HandleKind] ?? v;
    } else if (v instanceof Uint8Array) out[k] = k === 'data' ? v.byteLength : v.byteLength > 0;
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
 * Opens `path` for appending, as a trace file may safely be: created 0600,
 * never through a symbolic link (another user's link could make us append to
 * a file of theirs, or of root's), and only a regular file this uid owns (a
 * file another user pre-created in /tmp would let them read the trace).
 * Anything else: AccessDeniedError, and nothing is written.
 */
export function openTraceFile(path: string): number {
  let fd: number;
  try {
    fd = openSync(path, constants.O_WRONLY | constants.O_APPEND | constants.O_CREAT | constants.O_NOFOLLOW | constants.O_NONBLOCK, 0o600);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ELOOP') throw new AccessDeniedError(`trace file ${path} is a symbolic link: refused (give the path of a regular file of yours)`);
    throw new AccessDeniedError(`cannot open the trace file ${path}: ${(err as Error).message}`);
  }
  const st = fstatSync(fd);
  const uid = process.getuid?.();
  const why = !st.isFile()
    ? 'is not a regular file'
    : uid !== undefined && st.uid !== uid
      ? `belongs to uid ${st.uid}, not to this process (uid ${uid})`
      : undefined;
  if (why) {
    closeSync(fd);
    throw new AccessDeniedError(`trace file ${path} ${why}: refused (remove it, or trace to a path of your own)`);
  }
  return fd;
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
    this.fd = openTraceFile(path);
  }

  private write(peer: string, kind: TraceRecord['kind'], fields: Record<string, unknown>, atUs = nowUs()): void {
    if (this.fd === undefined) return;
    const rec = { t: atUs, pid: process.pid, self: this.self, peer, kind, ...fields };
    writeSync(this.fd, `${JSON.stringify(rec, jsonSafe)}\n`);
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

  persistent(peer: string, transfer: number, from: string, to: string, info: { role: string; reason?: string }): void {
    this.write(peer, 'persistent', { transfer, from, to, ...info });
  }

  /** One completed collective call (src/collectives/), not tied to one peer. */
  collective(event: object): void {
    this.write('*', 'collective', { ...event });
  }

  close(): void {
    if (this.fd !== undefined) closeSync(this.fd);
    this.fd = undefined;
  }
}
