/**
 * Figures that move with the machine (streaming, bidirectional, all-to-all,
 * the bandwidth targets, same GPU, the memory kinds' transfers, the 8 B
 * half round trip against the native floor) are the median of several runs
 * in one call, never one run and never the best: on 2 × H200 one run of
 * 1 MiB streaming read up to twice as much in one full run as in another of
 * the same build, the
 * all-to-all 69–80 % of raw, same GPU at 256 MiB 84.9 % and then 100.3 %.
 * Each run of smcuda comes right after a run of its baseline, so a slow
 * spell of the host weighs on both.
 */
import { summarize, type Summary } from './stats.js';

export interface PairedRuns {
  /** smcuda's runs. */
  value: Summary;
  /** The baseline's runs. */
  baseline: Summary;
  values: number[];
  baselines: number[];
}

/** `runs` times: `baseline()`, then `measure()`; each resolves with its run's figure (GB/s, or µs). */
export async function pairedRuns(runs: number, baseline: () => Promise<number>, measure: () => Promise<number>): Promise<PairedRuns> {
  const values: number[] = [];
  const baselines: number[] = [];
  for (let i = 0; i < runs; i++) {
    baselines.push(await baseline());
    values.push(await measure());
  }
  return { value: summarize(values), baseline: summarize(baselines), values, baselines };
}

/** The runs of a GB/s figure as its `details` keep them: how many, each run of smcuda and of its baseline, the baseline's spread. */
export function runsDetails(r: PairedRuns): { runs: number; runsGBs: number[]; rawRunsGBs: number[]; rawStats: Summary } {
  return { runs: r.values.length, runsGBs: r.values, rawRunsGBs: r.baselines, rawStats: r.baseline };
}
