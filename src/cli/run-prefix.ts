/**
 * One rank's output stream, written line by line with its rank in front
 * (`[2] line`), so that the ranks' lines interleave whole. Bytes are split
 * at '\n' only: a multi-byte character is never cut. A last line without
 * its '\n' is written, with one added, when the stream ends (`flush`).
 */
import type { Readable } from 'node:stream';

export interface LineSink {
  write(chunk: Uint8Array | string): unknown;
}

export class LinePrefixer {
  private pending: Buffer = Buffer.alloc(0);
  private readonly prefix: Buffer;

  constructor(
    rank: number,
    private readonly sink: LineSink,
  ) {
    this.prefix = Buffer.from(`[${rank}] `);
  }

  /** Writes every whole line in `chunk` (with what was pending before it). */
  push(chunk: Buffer): void {
    let data = this.pending.length ? Buffer.concat([this.pending, chunk]) : chunk;
    const out: Buffer[] = [];
    for (let nl = data.indexOf(0x0a); nl >= 0; nl = data.indexOf(0x0a)) {
      out.push(this.prefix, data.subarray(0, nl + 1));
      data = data.subarray(nl + 1);
    }
    // Copied: a subarray would keep the whole chunk alive.
    this.pending = Buffer.from(data);
    if (out.length) this.sink.write(Buffer.concat(out));
  }

  /** The last, unterminated line, if any. */
  flush(): void {
    if (this.pending.length === 0) return;
    this.sink.write(Buffer.concat([this.prefix, this.pending, Buffer.from('\n')]));
    this.pending = Buffer.alloc(0);
  }
}

/** Prefixes everything `stream` carries onto `sink`; resolves when it ends (flushed) or closes. */
export function pipePrefixed(stream: Readable, rank: number, sink: LineSink): Promise<void> {
  const p = new LinePrefixer(rank, sink);
  stream.on('data', (chunk: Buffer) => p.push(chunk));
  return new Promise((resolve) => {
    const done = () => {
      p.flush();
      resolve();
    };
    stream.once('end', done);
    stream.once('close', done);
    stream.once('error', done);
  });
}
