/** The micro-benchmarks' one timing loop (flight-recorder-microbench.ts, call-check-microbench.ts). */

const gc = (globalThis as { gc?: () => void }).gc;

/** The best over `rounds` of the mean ns per iteration of `fn` over `n` iterations (the best: other processes share the cores; run with --expose-gc). */
export function measure(n: number, rounds: number, fn: (i: number) => void): number {
  const out: number[] = [];
  for (let r = 0; r < rounds; r++) {
    gc?.();
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < n; i++) fn(i);
    out.push(Number(process.hrtime.bigint() - t0) / n);
  }
  return Math.min(...out);
}
