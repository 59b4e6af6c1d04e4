/**
 * Removes simulator segments left in /dev/shm by processes that died without
 * running their exit hook (SIGKILL, a crash). Segment names carry the owner's
 * pid, start time, boot and pid namespace (src/segment-owner.ts), so a segment
 * whose owner is gone is told apart from a live one's, even across pid reuse
 * and namespaces. Transport.create sweeps every kind; this is the
 * simulator-only form for tests and tooling.
 */
import { sweepDeadSegments } from '../../segment-owner.js';

/** Unlinks the simulator segments of dead owners; returns their names (without the leading '/'). */
export function sweepSimSegments(dir = '/dev/shm'): string[] {
  return sweepDeadSegments({ dir, kinds: ['sim'] });
}
