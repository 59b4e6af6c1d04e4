/**
 * A forked worker's line to the command that started it (demo, soak): the
 * parent's messages in order, a way to answer, and the rule that a worker
 * never outlives its parent (IPC 'disconnect' ends the process).
 */

export interface ParentLink<In> {
  /** The parent's next message, in the order they were sent. */
  next(): Promise<In>;
  /** Sends a message to the parent. */
  tell(message: object): void;
  /** Done: lets go of the parent so the event loop can end (no exit on disconnect). */
  release(): void;
}

/** Reads the worker's config from `envVar`; exits with a message when not started by `command`. */
export function workerConfig<T>(envVar: string, command: string): T {
  const cfg = JSON.parse(process.env[envVar] ?? 'null') as T | null;
  if (!cfg || !process.send) {
    console.error(`this worker is started by \`${command}\`, not by hand`);
    process.exit(2);
  }
  return cfg;
}

export function parentLink<In>(): ParentLink<In> {
  const orphaned = () => process.exit(1);
  process.on('disconnect', orphaned);
  const inbox: In[] = [];
  let wake: (() => void) | undefined;
  process.on('message', (m: In) => {
    inbox.push(m);
    wake?.();
  });
  return {
    async next() {
      while (inbox.length === 0) await new Promise<void>((resolve) => (wake = resolve));
      return inbox.shift()!;
    },
    tell(message) {
      process.send!(message);
    },
    release() {
      process.off('disconnect', orphaned);
      process.disconnect();
    },
  };
}
