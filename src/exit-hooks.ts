/**
 * Clean-up to run when the process exits, behind one 'exit' listener: each
 * simulated driver registers one, and a process with eleven transports
 * would otherwise get Node's MaxListenersExceededWarning.
 */
const hooks = new Set<() => void>();

function runAll(): void {
  for (const hook of hooks) {
    try {
      hook();
    } catch {
      // one failing clean-up must not keep the others from running
    }
  }
}

export function onExit(hook: () => void): void {
  if (hooks.size === 0) process.on('exit', runAll);
  hooks.add(hook);
}

export function offExit(hook: () => void): void {
  if (!hooks.delete(hook)) return;
  if (hooks.size === 0) process.removeListener('exit', runAll);
}
