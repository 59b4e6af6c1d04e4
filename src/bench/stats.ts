/**
 * Summary statistics of benchmark samples. Latency figures report the
 * median with p10/p90 (a median resists the occasional scheduler hiccup
 * that a mean would smear over every figure); throughput figures are totals.
 */

export interface Summary {
  /** Samples summarised (after warm-up). */
  n: number;
  median: number;
  p10: number;
  p90: number;
  min: number;
  max: number;
}

/** The q-quantile of ascending `sorted`, by linear interpolation between ranks. */
export function quantile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return NaN;
  const pos = (sorted.length - 1) * Math.min(1, Math.max(0, q));
  const lo = Math.floor(pos);
  const hi = Math.ceil(pos);
  return sorted[lo]! + (sorted[hi]! - sorted[lo]!) * (pos - lo);
}

export function summarize(samples: readonly number[]): Summary {
  const s = [...samples].sort((a, b) => a - b);
  return { n: s.length, median: quantile(s, 0.5), p10: quantile(s, 0.1), p90: quantile(s, 0.9), min: s[0] ?? NaN, max: s[s.length - 1] ?? NaN };
}

export function median(samples: readonly number[]): number {
  return summarize(samples).median;
}

/** Bytes per second as GB/s (10^9, as link rates and the anchors are quoted). */
export function gbPerSecond(bytes: number, seconds: number): number {
  return seconds > 0 ? bytes / seconds / 1e9 : 0;
}
