/**
 * Debug logging, on with NODE_DEBUG=smcuda (or a list containing it, e.g.
 * NODE_DEBUG=net,smcuda). Lines go to stderr as `SMCUDA <pid>: …`.
 *
 * util.debuglog decides once, on first use, whether the section is on; when it
 * is off the call is a no-op, so debug() may sit on paths that run often.
 * Arguments are formatted lazily (util.format), so pass values, not strings
 * built in advance.
 */
import { debuglog } from 'node:util';

const log = debuglog('smcuda');

/** Logs `fmt` (util.format placeholders: %s %d %j %o) when NODE_DEBUG includes smcuda. */
export function debug(fmt: string, ...args: unknown[]): void {
  log(fmt, ...args);
}

/** Whether NODE_DEBUG enables smcuda: for work that only a debug line needs. */
export function debugEnabled(): boolean {
  return log.enabled;
}
