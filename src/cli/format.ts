/** Small text helpers for the CLI's tables. */
import { ArgumentRangeError } from '../errors.js';

export function formatBytes(n: number): string {
  if (n < 1024) return `${n} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let v = n / 1024;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${Number.isInteger(v) ? v : v.toFixed(1)} ${units[i]}`;
}

/** Parses '0,8,4K,1M,64MiB' style sizes. */
export function parseSize(text: string): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([kmg]?)(i?b)?\s*$/i.exec(text);
  if (!m) throw new ArgumentRangeError(`not a size: ${JSON.stringify(text)} (examples: 0, 512, 4K, 1M, 64MiB)`);
  const mult = { '': 1, k: 1024, m: 1024 ** 2, g: 1024 ** 3 }[m[2]!.toLowerCase() as '' | 'k' | 'm' | 'g'];
  const v = Math.round(Number(m[1]) * mult);
  if (!Number.isSafeInteger(v)) throw new ArgumentRangeError(`size too large: ${text}`);
  return v;
}

export function table(rows: string[][]): string {
  const widths: number[] = [];
  for (const row of rows) row.forEach((cell, i) => (widths[i] = Math.max(widths[i] ?? 0, cell.length)));
  return rows
    .map((row) =>
      row
        .map((cell, i) => cell.padEnd(widths[i]!))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}

export function gbps(bytes: number, seconds: number): string {
  return seconds > 0 ? (bytes / seconds / 1e9).toFixed(2) : '-';
}

/** A duration for people: µs below 1 ms, ms below 1 s, else s. */
export function formatDuration(seconds: number): string {
  if (!(seconds >= 0)) return '-';
  if (seconds < 1e-3) return `${(seconds * 1e6).toFixed(seconds < 1e-5 ? 1 : 0)} µs`;
  if (seconds < 1) return `${(seconds * 1e3).toFixed(seconds < 1e-2 ? 2 : 1)} ms`;
  return `${seconds.toFixed(2)} s`;
}

/**
 * How fast messages of `size` went: time per message, and bandwidth from
 * 64 KiB up (below that, GB/s says nothing: "0.00 GB/s" for 8 B messages).
 */
export function rate(size: number, bytes: number, seconds: number, messages: number): string {
  const per = messages > 0 ? `${formatDuration(seconds / messages)}/msg` : '-';
  return size >= 64 << 10 ? `${per.padStart(12)}  ${bandwidth(bytes, seconds).padStart(10)}` : per.padStart(12);
}

/** Bytes per second for people: GB/s from 1 GB/s, else MB/s (never "0.00 GB/s"). */
export function bandwidth(bytes: number, seconds: number): string {
  if (!(seconds > 0)) return '-';
  const bps = bytes / seconds;
  if (bps >= 1e9) return `${(bps / 1e9).toFixed(2)} GB/s`;
  const mb = bps / 1e6;
  return `${mb >= 100 ? mb.toFixed(0) : mb >= 10 ? mb.toFixed(1) : mb.toPrecision(2)} MB/s`;
}
