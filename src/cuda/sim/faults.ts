/**
 * Injected faults, as live state: counters of the notReady window, the queue
 * of open failures still to deliver, the seeded PRNG of random open failures.
 * Set from the configuration at start and replaced by `inject`.
 */
import { resolveFaults, type ResolvedFaults, type SimDevice, type SimFaults } from './config.js';
import { mulberry32 } from './prng.js';
import type { CudaErrorName } from './result-codes.js';

export class FaultState {
  private faults: ResolvedFaults;
  private readyCalls = 0;
  private crashCalls = 0;
  private since = performance.now();
  private pendingOpenFailures: CudaErrorName[];
  private random: () => number;

  constructor(
    initial: ResolvedFaults,
    private readonly devices: SimDevice[],
  ) {
    this.faults = initial;
    this.pendingOpenFailures = [...initial.openFailures];
    this.random = mulberry32(initial.openFailureRate.seed);
  }

  get current(): ResolvedFaults {
    return this.faults;
  }

  /** Replaces the faults named in `f`; the others stay. A new notReady window starts now. */
  inject(f: SimFaults): void {
    const merged: SimFaults = {
      notReady: this.faults.notReady,
      noPeerAccess: this.faults.noPeerAccess,
      openFailures: this.pendingOpenFailures,
      openFailureRate: this.faults.openFailureRate,
      maxOpenMappings: this.faults.maxOpenMappings,
      copyDelayMs: this.faults.copyDelayMs,
      copyBandwidthGBs: this.faults.copyBandwidthGBs,
      pageableLagMs: this.faults.pageableLagMs,
      ipcOpenFails: this.faults.ipcOpenFails ?? false,
      ...(this.faults.crashOn ? { crashOn: this.faults.crashOn } : {}),
      ...f,
    };
    this.faults = resolveFaults(merged, this.devices);
    this.pendingOpenFailures = [...this.faults.openFailures];
    if (f.notReady) {
      this.readyCalls = 0;
      this.since = performance.now();
    }
    if (f.openFailureRate) this.random = mulberry32(this.faults.openFailureRate.seed);
  }

  /** Whether this call of `call` is the one `crashOn` names (counts the calls of that name). */
  crashDue(call: string): boolean {
    const c = this.faults.crashOn;
    if (c === null || c.call !== call) return false;
    return this.crashCalls++ === c.after;
  }

  /** Counts one isReady() call; true while the notReady window is open. */
  notReadyNow(): boolean {
    const nr = this.faults.notReady;
    this.readyCalls++;
    if (this.readyCalls <= nr.calls) return true;
    if (nr.forMs > 0 && performance.now() - this.since < nr.forMs) return true;
    if (nr.untilEpochMs > 0 && Date.now() < nr.untilEpochMs) return true;
    return false;
  }

  peerDenied(a: string, b: string): boolean {
    return this.faults.noPeerAccess.some(([x, y]) => (x === a && y === b) || (x === b && y === a));
  }

  /** The error a new IPC mapping must fail with now, if any (consumes a queued failure). */
  openFailure(openMappings: number): CudaErrorName | undefined {
    if (this.faults.ipcOpenFails) return this.faults.ipcOpenFails;
    const queued = this.pendingOpenFailures.shift();
    if (queued) return queued;
    const rate = this.faults.openFailureRate;
    if (rate.probability > 0 && this.random() < rate.probability) {
      return rate.codes[Math.floor(this.random() * rate.codes.length)]!;
    }
    if (openMappings >= this.faults.maxOpenMappings.limit) return this.faults.maxOpenMappings.code;
    return undefined;
  }

  /** How long a synchronous pageable write (cuMemcpyHtoD, cuMemsetD8) lags on the legacy stream (0: none). */
  get pageableLagMs(): number {
    return this.faults.pageableLagMs;
  }

  /** Simulated duration of moving `bytes`. */
  copyMs(bytes: number): number {
    const bw = this.faults.copyBandwidthGBs;
    return this.faults.copyDelayMs + (bw > 0 ? bytes / (bw * 1e6) : 0);
  }
}
