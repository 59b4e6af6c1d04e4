/** `smcuda inspect` as a child process: started, its URL read from its --json line, stopped with SIGTERM. */
import { spawn, type ChildProcess } from 'node:child_process';
import { CLI } from './cli.js';

export interface InspectProcess {
  url: string;
  child: ChildProcess;
  stop(): Promise<number | null>;
}

export function startInspect(trace: string): Promise<InspectProcess> {
  const child = spawn(process.execPath, [CLI, 'inspect', '--trace', trace, '--port', '0', '--json'], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stderr!.on('data', (d: Buffer) => (err += d));
  return new Promise((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`smcuda inspect exited with ${code}: ${err}`)));
    child.stdout!.on('data', (d: Buffer) => {
      out += d;
      const line = out.split('\n')[0]!;
      if (!out.includes('\n')) return;
      const { url } = JSON.parse(line) as { url: string };
      child.removeAllListeners('exit');
      resolve({
        url,
        child,
        stop: () =>
          new Promise((done) => {
            if (child.exitCode !== null) return done(child.exitCode);
            child.once('exit', (code) => done(code));
            child.kill('SIGTERM');
          }),
      });
    });
  });
}
