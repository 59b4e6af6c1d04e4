/**
 * Follows a trace file as processes append to it (like `tail -F`): reads what
 * is there, then polls for more. Polling rather than fs.watch because the
 * writers are other processes and fs.watch misses appends on some file
 * systems; 100 ms is quick enough for a person watching a page.
 * A file that does not exist yet is waited for; one that shrinks (rewritten)
 * is read again from the start.
 */
import { open, stat } from 'node:fs/promises';
import { debug } from '../debug.js';
import type { TraceRecord } from '../trace.js';
import { parseRecord } from '../diagram/trace-records.js';

export class TraceFollower {
  private offset = 0;
  private partial = '';
  private timer: NodeJS.Timeout | undefined;
  private reading = false;
  private closed = false;
  /** Lines that were not trace records (skipped). */
  skipped = 0;

  constructor(
    readonly path: string,
    private readonly onRecord: (r: TraceRecord) => void,
    private readonly intervalMs = 100,
  ) {}

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
        this.partial = '';
      }
      if (size === this.offset) return;
      const fh = await open(this.path, 'r');
      try {
        const buf = Buffer.alloc(size - this.offset);
        const { bytesRead } = await fh.read(buf, 0, buf.length, this.offset);
        this.offset += bytesRead;
        const lines = (this.partial + buf.toString('utf8', 0, bytesRead)).split('\n');
        this.partial = lines.pop()!;
        for (const line of lines) {
          if (!line.trim()) continue;
          const rec = parseRecord(line);
          if (rec) this.onRecord(rec);
          else this.skipped++;
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
}
