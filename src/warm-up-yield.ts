/**
 * The data path's warm-up (src/data-path-warm-up.ts) gives way to real
 * work: the first time a real endpoint starts device work — a device send,
 * a device receive posted, `negotiate()` or `register()`, the peer's
 * negotiation reaching it, a device message arriving — it says so here,
 * once per endpoint (src/endpoint.ts, `realWork`), and a
 * warm-up still running stops at its next step (one that has not begun yet
 * never starts). The warm-up's own endpoints, on the simulated drivers it
 * marks, say nothing. One flag per process, as the warm-up runs once per
 * process; it sits below the Transport so the endpoint can set it.
 */

let started: { peerId: string; what: string } | undefined;
const warmUpDrivers = new WeakSet<object>();

/**
 * A real endpoint (to `peerId`) started device work (`what`): a warm-up
 * running stops at its next step, one not started yet never starts. The
 * endpoint calls it once (later calls change nothing).
 */
export function realWorkStarted(peerId: string, what: string): void {
  started ??= { peerId, what };
}

/** Whether real work has started in this process: the warm-up gives way. */
export function isYielding(): boolean {
  return started !== undefined;
}

/** What started real work first (for the warm-up's debug line), if anything did. */
export function firstRealWork(): { peerId: string; what: string } | undefined {
  return started;
}

/** The warm-up's own driver: the endpoints on it are not real work. */
export function markWarmUpDriver(driver: object): void {
  warmUpDrivers.add(driver);
}

/** Whether an endpoint on `driver` should tell the warm-up of its first real work: not on the warm-up's own drivers, nor once real work started. */
export function tellsWarmUp(driver: object): boolean {
  return started === undefined && !warmUpDrivers.has(driver);
}

/** @internal Tests: forget that real work started (endpoints made before keep what they read). */
export function resetRealWork(): void {
  started = undefined;
}
