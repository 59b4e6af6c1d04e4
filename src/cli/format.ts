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
  return rows.map((row) => row.map((cell, i) => cell.padEnd(widths[i]!)).join('  ').trimEnd()).join('\n');
}

export function gbps(bytes: number, seconds: number): string {
  return seconds > 0 ? (bytes / seconds / 1e9).toFixed(2) : '-';
}
