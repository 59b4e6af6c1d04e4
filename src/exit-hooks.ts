/**
 * Clean-up to run when the process exits, behind one listener per event: each
 * simulated driver registers one, and a process with eleven transports
 * would otherwise get Node's MaxListenersExceededWarning.
 */

/** One listener of `event` that runs every hook added, the listener added with the first hook and removed with the last. */
function hooksOn(event: 'exit' | 'beforeExit'): { add(hook: () => void): void; remove(hook: () => void): void } {
  const hooks = new Set<() => void>();
  const runAll = (): void => {
    for (const hook of [...hooks]) {
      try {
        hook();
      } catch {
        // one failing clean-up must not keep the others from running
      }
    }
  };
  return {
    add(hook) {
      if (hooks.size === 0) process.on(event, runAll);
      hooks.add(hook);
    },
    remove(hook) {
      if (!hooks.delete(hook)) return;
      if (hooks.size === 0) process.removeListener(event, runAll);
    },
  };
}

const exit = hooksOn('exit');
/**
 * 'beforeExit': when the event loop has nothing left to do and the process
 * would exit (never on process.exit() or a signal). A hook may start
 * asynchronous work that keeps the process alive until it ends.
 */
const beforeExit = hooksOn('beforeExit');

export const onExit = exit.add;
export const offExit = exit.remove;
/** Runs `hook` when the process would exit with nothing left to do ('beforeExit'). */
export const onBeforeExit = beforeExit.add;
export const offBeforeExit = beforeExit.remove;
