/**
 * The JSON document `smcuda bench --json` prints and `--out` writes as
 * bench.json. Figures (figures.ts) carry the targets; series carry every
 * measured point for the plots.
 */
import type { Figure } from './figures.js';

export interface SeriesPoint {
  /** allreduce: time per call against size (the collectives suite; not drawn, listed by size). */
  plot: 'bandwidth' | 'latency' | 'allreduce';
  /** Legend entry, e.g. 'smcuda RGET (GPU0→GPU1)'. */
  series: string;
  size: number;
  value: number;
  unit: 'GB/s' | 'µs';
  p10?: number;
  p90?: number;
  iterations?: number;
  /** Messages by data path, where the point is smcuda's. */
  paths?: Record<string, number>;
}

export interface MachineInfo {
  driver: string;
  driverReason: string;
  node: string;
  platform: string;
  arch: string;
  cpus: number;
  cpuModel: string;
  hostname: string;
  /** The devices the workers used, per layout. */
  devices: Array<{ layout: string; rank: number; index: number; name: string; uuid: string; totalMemory: number }>;
}

export interface BenchReport {
  tool: 'smcuda bench';
  version: string;
  /** ISO 8601, start of the run. */
  date: string;
  durationMs: number;
  machine: MachineInfo;
  options: { driver: string; sizes: number[]; suites: string[]; smoke: boolean; window: number };
  figures: Figure[];
  series: SeriesPoint[];
  notes: string[];
  /** Files written by --out, relative to that directory. */
  files?: string[];
}
