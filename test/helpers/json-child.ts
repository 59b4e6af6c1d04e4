/**
 * Runs `node script args` to its exit, as the GPU tests run their ranks:
 * SIGKILLed past `limitMs` (a hang fails the test instead of stalling it),
 * its output kept, and its last stdout line read as its JSON report.
 */
import { spawn } from 'node:child_process';

export interface JsonChildExit<T> {
  code: number | null;
  signal: NodeJS.Signals | null;
  pid: number;
  /** The last stdout line, parsed; undefined if there was none or it was no JSON. */
  out: T | undefined;
  stdout: string;
  stderr: string;
  ms: number;
}

export function runJsonChild<T = Record<string, unknown>>(script: string, args: string[], env: NodeJS.ProcessEnv, limitMs: number): Promise<JsonChildExit<T>> {
  return new Promise((resolve) => {
    const t0 = performance.now();
    const child = spawn(process.execPath, [script, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    const limit = setTimeout(() => child.kill('SIGKILL'), limitMs);
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (b) => (stdout += b));
    child.stderr.on('data', (b) => (stderr += b));
    // 'close', not 'exit': only then has its last stdout line been read.
    child.on('close', (code, signal) => {
      clearTimeout(limit);
      const line = stdout.trim().split('\n').at(-1);
      let out: T | undefined;
      try {
        out = line ? (JSON.parse(line) as T) : undefined;
      } catch {
        out = undefined;
      }
      resolve({ code, signal, pid: child.pid!, out, stdout, stderr, ms: performance.now() - t0 });
    });
  });
}
