/**
 * Compiles the negotiation's code before an endpoint needs it: one
 * negotiation between two in-memory negotiators with stub effects (no
 * driver, nothing on any wire), once per process. Otherwise a fresh
 * process's first negotiation runs XState's transition code, and the
 * machine's, for the first time on the way of its first device message (which
 * waits for the negotiation). Both sides of a negotiation in one process on
 * the development machine took a third of their cold time after this
 * warm-up (5 fresh processes each); the warm-up itself runs in a
 * setImmediate after Transport.create. Across two fresh processes on
 * 2xH100, `ep.negotiate()` right after connecting took about a third less
 * (median of 5 each, same run).
 */
import { createNegotiator, type Negotiator } from './negotiator.js';

let warmed: Promise<void> | undefined;

/** Runs the warm-up negotiation once per process; resolves when it is done (never rejects). */
export function warmNegotiation(): Promise<void> {
  warmed ??= run().catch(() => {});
  return warmed;
}

async function run(): Promise<void> {
  const probe = new Uint8Array(72);
  const sides: Negotiator[] = [];
  const side = (id: string, peer: string, uuid: string, other: () => Negotiator) =>
    createNegotiator({
      localId: id,
      peerId: peer,
      options: {},
      send: (frame) => queueMicrotask(() => other().receive(frame)),
      checkReady: async () => ({ ready: true, deviceUuid: uuid, probe }),
      checkPeerAccess: async () => true,
      openProbe: async () => {},
    });
  sides.push(side('warm-up-a', 'warm-up-b', 'GPU-warm-up-a', () => sides[1]!));
  sides.push(side('warm-up-b', 'warm-up-a', 'GPU-warm-up-b', () => sides[0]!));
  try {
    sides[0]!.gpuSend();
    await Promise.all(sides.map((s) => s.settled()));
  } finally {
    for (const s of sides) s.stop();
  }
}
