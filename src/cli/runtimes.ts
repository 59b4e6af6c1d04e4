/**
 * The JavaScript runtimes `smcuda demo --runtime` can start ranks under, and
 * where their executables are found: Node.js is the one running this command
 * (else `node` on PATH); Bun and Deno are looked up on PATH, then in the
 * node_modules/.bin folders above the current directory and above this
 * package (both install from npm: `npm install bun deno`).
 */
import { accessSync, constants } from 'node:fs';
import { delimiter, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { SmcudaError } from '../errors.js';

const PACKAGE_DIR = dirname(fileURLToPath(import.meta.url));

export const RUNTIMES = ['node', 'bun', 'deno'] as const;
export type RuntimeName = (typeof RUNTIMES)[number];

export interface RuntimeCommand {
  name: RuntimeName;
  /** The executable. */
  command: string;
  /** Arguments before the script: Deno needs `run` and its permissions (-A: sockets, shared memory, the addon). */
  args: string[];
}

function executable(file: string): boolean {
  try {
    accessSync(file, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

function binFoldersAbove(dir: string): string[] {
  const out: string[] = [];
  for (let d = dir; ; d = dirname(d)) {
    out.push(join(d, 'node_modules', '.bin'));
    if (dirname(d) === d) return out;
  }
}

/** Where `name` is looked for, in order. */
export function searchPath(env: NodeJS.ProcessEnv = process.env, from: string[] = [process.cwd(), PACKAGE_DIR]): string[] {
  const dirs = [...(env.PATH ?? '').split(delimiter).filter(Boolean), ...from.flatMap(binFoldersAbove)];
  return [...new Set(dirs)];
}

export class RuntimeNotFoundError extends SmcudaError {
  constructor(name: string, looked: string[]) {
    super(
      'SMCUDA_RUNTIME_NOT_FOUND',
      `runtime '${name}' not found on PATH or in node_modules/.bin (looked in ${looked.length} folders). ` +
        `Install it with 'npm install ${name}' in this project (the package ships the executable), or put it on PATH.`,
    );
  }
}

/** `from`: folders whose node_modules/.bin (and their parents') are searched after PATH: the current directory and this package's. */
export function findRuntime(name: RuntimeName, env: NodeJS.ProcessEnv = process.env, from?: string[]): RuntimeCommand {
  const args = name === 'deno' ? ['run', '-A'] : [];
  if (name === 'node' && !process.versions.bun && !process.versions.deno) return { name, command: process.execPath, args };
  const looked = searchPath(env, from);
  for (const dir of looked) {
    const file = join(dir, name);
    if (executable(file)) return { name, command: file, args };
  }
  throw new RuntimeNotFoundError(name, looked);
}

/** This process's runtime and version, e.g. "bun 1.4.5". */
export function currentRuntime(): string {
  const v = process.versions as Record<string, string | undefined>;
  if (v.bun) return `bun ${v.bun}`;
  if (v.deno) return `deno ${v.deno}`;
  return `node ${process.versions.node}`;
}
