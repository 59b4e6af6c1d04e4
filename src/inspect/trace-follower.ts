/**
 * Follows a trace file as processes append to it (like `tail -F`): reads what
 * is there, then polls for more. Polling rather than fs.watch because the
 * writers are other processes and fs.watch misses appends on some file
 * systems; 100 ms is quick enough for a person watching a page.
 * A file that does not exist yet is waited for; one that shrinks (rewritten)
 * is read again from the start.
 *
 * Read a bounded piece at a time, line by line: a line longer than
 * `maxLineBytes` (a trace record is a few hundred bytes) is skipped up to its
 * newline with a warning, never held whole (a 640 MiB line without a newline
 * made one string too long for V8: RangeError, the inspector died).
 */
import { open, stat } from 'node:fs/promises';
import { debug } from '../debug.js';
import { ConfigError } from '../errors.js';
import type { TraceRecord } from '../trace.js';
import { parseRecord } from '../diagram/trace-records.js';

/** The longest trace line read; longer ones are skipped. */
export const MAX_TRACE_LINE_BYTES = 1 << 20;
/** Bytes read from the file at a time. */
const READ_BYTES = 1 << 20;
const NEWLINE = 0x0a;

export interface TraceFollowerOptions {
  /** Poll interval in ms (default 100). */
  intervalMs?: number;
  /** Lines longer than this many bytes are skipped with a warning (default 1 MiB). */
  maxLineBytes?: number;
  /** Told of each skipped overlong line (default: debug output only). */
  onWarning?: (message: string) => void;
}

export class TraceFollower {
  private offset = 0;
  /** The start of a line not yet complete. */
  private partial: Buffer[] = [];
  private partialBytes = 0;
  /** Inside an overlong line: dropping bytes until its newline. */
  private skipping = false;
  private timer: NodeJS.Timeout | undefined;
  private reading = false;
  private closed = false;
  private readonly intervalMs: number;
  private readonly maxLineBytes: number;
  private readonly onWarning: ((message: string) => void) | undefined;
  /** Lines that were not trace records (skipped). */
  skipped = 0;
  /** Lines longer than maxLineBytes (skipped). */
  skippedLong = 0;

  constructor(
    readonly path: string,
    private readonly onRecord: (r: TraceRecord) => void,
    options: number | TraceFollowerOptions = {},
  ) {
    const o = typeof options === 'number' ? { intervalMs: options } : options;
    this.intervalMs = o.intervalMs ?? 100;
    this.maxLineBytes = o.maxLineBytes ?? MAX_TRACE_LINE_BYTES;
    if (!Number.isInteger(this.maxLineBytes) || this.maxLineBytes < 1)
      throw new ConfigError(`maxLineBytes must be an integer ≥ 1, got ${String(this.maxLineBytes)}`);
    this.onWarning = o.onWarning;
  }

  /** Reads what the file holds now, then keeps polling. */
  async start(): Promise<void> {
    await this.poll();
    if (!this.closed) this.timer = setInterval(() => void this.poll(), this.intervalMs);
  }

  async poll(): Promise<void> {
    if (this.reading || this.closed) return;
    this.reading = true;
    try {
      let size: number;
      try {
        size = (await stat(this.path)).size;
      } catch {
        return; // not there yet
      }
      if (size < this.offset) {
        debug('trace %s shrank to %d bytes: reading it again', this.path, size);
        this.offset = 0;
        this.partial = [];
        this.partialBytes = 0;
        this.skipping = false;
      }
      if (size === this.offset) return;
      const fh = await open(this.path, 'r');
      try {
        const buf = Buffer.allocUnsafe(Math.min(READ_BYTES, size - this.offset));
        while (this.offset < size && !this.closed) {
          const { bytesRead } = await fh.read(buf, 0, Math.min(buf.length, size - this.offset), this.offset);
          if (bytesRead === 0) break;
          this.offset += bytesRead;
          this.feed(buf.subarray(0, bytesRead));
        }
      } finally {
        await fh.close();
      }
    } finally {
      this.reading = false;
    }
  }

  close(): void {
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  /** Splits `chunk` into lines (the buffer is reused: whatever is kept is copied). */
  private feed(chunk: Buffer): void {
    let start = 0;
    for (;;) {
      const nl = chunk.indexOf(NEWLINE, start);
      const end = nl < 0 ? chunk.length : nl;
      if (this.skipping) {
        if (nl >= 0) this.skipping = false;
      } else if (this.partialBytes + (end - start) > this.maxLineBytes) {
        this.skipLong(nl < 0);
      } else if (nl < 0) {
        if (end > start) {
          this.partial.push(Buffer.from(chunk.subarray(start, end)));
          this.partialBytes += end - start;
        }
      } else {
        const line =
          this.partialBytes === 0 ? chunk.toString('utf8', start, end) : Buffer.concat([...this.partial, chunk.subarray(start, end)]).toString('utf8');
        this.partial = [];
        this.partialBytes = 0;
        this.line(line);
      }
      if (nl < 0) return;
      start = nl + 1;
    }
  }

  /** The line being read is over the bound: dropped, and the rest of it (`more`: its newline is still to come). */
  private skipLong(more: boolean): void {
    this.partial = [];
    this.partialBytes = 0;
    this.skipping = more;
    this.skippedLong++;
    const msg = `trace ${this.path}: skipped a line longer than ${this.maxLineBytes} bytes (not a trace record)`;
    debug('%s', msg);
    this.onWarning?.(msg);
  }

  private line(line: string): void {
    if (!line.trim()) return;
    const rec = parseRecord(line);
    if (rec) this.onRecord(rec);
    else this.skipped++;
  }
}
