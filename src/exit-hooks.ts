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

const beforeExitHooks = new Set<() => void>();

function runBeforeExit(): void {
  for (const hook of [...beforeExitHooks]) {
    try {
      hook();
    } catch {
      // as above
    }
  }
}

/**
 * Runs `hook` when the event loop has nothing left to do and the process
 * would exit ('beforeExit': never on process.exit() or a signal). The hook
 * may start asynchronous work that keeps the process alive until it ends.
 */
export function onBeforeExit(hook: () => void): void {
  if (beforeExitHooks.size === 0) process.on('beforeExit', runBeforeExit);
  beforeExitHooks.add(hook);
}

export function offBeforeExit(hook: () => void): void {
  if (!beforeExitHooks.delete(hook)) return;
  if (beforeExitHooks.size === 0) process.removeListener('beforeExit', runBeforeExit);
}
