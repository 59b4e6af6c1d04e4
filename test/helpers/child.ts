/**
 * The tests' way to run a peer fixture (test/fixtures/*.mjs) in a second
 * process: it speaks the library's worker protocol (src/cli/worker-protocol.ts),
 * so a test writes `const peer = await spawnPeer('fault-peer.mjs'); await
 * peer.call('recv', { tag: 1 })`, and a failure inside the peer rejects with
 * its error code. Fixtures run compiled code: `npx tsc -p .` first.
 *
 * Three fixtures stay one-shot scripts that print one JSON line, because how
 * the process ends is what they test and an IPC channel would keep it alive:
 * native-fake-cuda.mjs (an idle poller must not hold the process),
 * sim-exit-without-close.mjs (exit hooks) and small-shm.mjs (runs inside a
 * private mount namespace through a shell).
 */
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { type StartWorkerOptions, WorkerClient } from '../../src/cli/worker-protocol.js';

export { WorkerClient, WorkerCommandError, WorkerFailedError } from '../../src/cli/worker-protocol.js';

const COMPILED = fileURLToPath(new URL('../../dist/src/cli/worker-protocol.js', import.meta.url));

/** Starts test/fixtures/`fixture` and waits until it is ready; stderr is kept for the error if it dies. */
export async function spawnPeer<Ready = unknown>(fixture: string, options: StartWorkerOptions = {}): Promise<WorkerClient<Ready>> {
  if (!existsSync(COMPILED)) throw new Error(`${COMPILED} is missing: build with \`npx tsc -p .\` before running tests with peer processes`);
  const path = fileURLToPath(new URL(`../fixtures/${fixture}`, import.meta.url));
  return WorkerClient.start<Ready>(path, { stdio: ['ignore', 'inherit', 'pipe'], ...options, name: options.name ?? `${fixture.replace(/\.mjs$/, '')} (peer)` });
}
