/**
 * Ctrl-C (SIGINT) or SIGTERM during `smcuda demo`, `soak` or `bench`: stop
 * the workers, remove their shared-memory segments and the socket folder,
 * say so, and exit 130 / 143. Without this the workers' rings, staging and
 * simulated device memory (hundreds of MB in /dev/shm) and the folder stayed
 * behind until some later transport swept them.
 */
import { rmSync } from 'node:fs';
import { sweepDeadSegments } from '../segment-owner.js';

export interface Interruptible {
  /** The command's name, for the message. */
  command: string;
  /** The socket folder to remove. */
  dir: string;
  /** The workers' pids (for the message). */
  pids(): number[];
  /** SIGKILLs every worker. */
  kill(): void;
  /** Resolves once every worker has exited. */
  exited(): Promise<unknown>;
}

/** Installs the handlers; the returned function removes them (call it when the command ends normally). */
export function cleanUpOnInterrupt(o: Interruptible): () => void {
  let interrupted = false;
  const onSignal = (signal: NodeJS.Signals) => {
    // A second Ctrl-C while cleaning up is ignored: the clean-up is quick, and leaving now would skip it.
    if (interrupted) return;
    interrupted = true;
    void stop(o, signal);
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  return () => {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  };
}

async function stop(o: Interruptible, signal: NodeJS.Signals): Promise<never> {
  process.stderr.write(`\nsmcuda ${o.command}: ${signal}: stopping the workers and removing what they left…\n`);
  const pids = o.pids();
  o.kill();
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([o.exited().catch(() => undefined), new Promise<void>((r) => (timer = setTimeout(r, 5_000)))]);
  clearTimeout(timer);
  // The workers are dead now: their segments (and any other dead process's of this user) go.
  const removed = sweepDeadSegments();
  rmSync(o.dir, { recursive: true, force: true });
  process.stderr.write(
    `smcuda ${o.command}: interrupted: ${pids.length} worker(s) stopped${pids.length ? ` (pid ${pids.join(', ')})` : ''}, ` +
      `${removed.length} shared-memory segment(s) and the socket folder ${o.dir} removed\n`,
  );
  process.exit(signal === 'SIGINT' ? 130 : 143);
}
