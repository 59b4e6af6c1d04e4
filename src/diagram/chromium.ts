/**
 * Headless Chromium through playwright-core, for rendering Mermaid to SVG and
 * for the inspector's browser test. playwright-core downloads no browser: it
 * drives the system's Chromium (Debian: `apt-get install chromium`), found at
 * $SMCUDA_CHROMIUM or /usr/bin/chromium. Both playwright-core and mermaid are
 * optional peer dependencies (a user installs them beside smcuda; our own
 * tests have them as dev dependencies), loaded only when a picture or the
 * inspector page is asked for.
 */
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { type Env, envChromium } from '../env.js';
import { SmcudaError } from '../errors.js';
import type { Browser } from 'playwright-core';

export const CHROMIUM_CANDIDATES = ['/usr/bin/chromium', '/usr/bin/chromium-browser'];

/** Flags for a quiet, offline, sandbox-free run (CI runs as root, without a GPU). */
export const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--no-first-run'];

/** The Chromium executable, or undefined where none is installed. */
export function findChromium(env?: Env): string | undefined {
  const fromEnv = envChromium(env);
  if (fromEnv) return existsSync(fromEnv) ? fromEnv : undefined;
  return CHROMIUM_CANDIDATES.find((p) => existsSync(p));
}

export class ChromiumUnavailableError extends SmcudaError {
  constructor(message: string) {
    super('SMCUDA_NO_CHROMIUM', message);
  }
}

export async function launchChromium(): Promise<Browser> {
  const executablePath = findChromium();
  if (!executablePath) {
    throw new ChromiumUnavailableError(
      `rendering SVG needs Chromium, and none was found (${envChromium() ? `SMCUDA_CHROMIUM=${envChromium()} does not exist` : `looked for ${CHROMIUM_CANDIDATES.join(', ')}`}). ` +
        'Install it (Debian/Ubuntu: apt-get install -y --no-install-recommends chromium) or set SMCUDA_CHROMIUM; ' +
        'the Mermaid and DOT formats need no browser.',
    );
  }
  let chromium: typeof import('playwright-core').chromium;
  try {
    ({ chromium } = await import('playwright-core'));
  } catch (err) {
    throw new ChromiumUnavailableError(
      `rendering SVG needs the optional peer dependency playwright-core: install it beside smcuda with 'npm install playwright-core mermaid': ${(err as Error).message}`,
    );
  }
  return chromium.launch({ executablePath, args: CHROMIUM_ARGS, headless: true });
}

/** Path of mermaid's browser bundle in node_modules (served or inlined locally, never from a CDN). */
export function mermaidBundlePath(): string {
  const require = createRequire(import.meta.url);
  try {
    return require.resolve('mermaid/dist/mermaid.min.js');
  } catch {
    throw new ChromiumUnavailableError(MERMAID_MISSING);
  }
}

/** What to do when the browser bundle of mermaid is missing (the inspector page shows it too). */
export const MERMAID_MISSING =
  "drawing the state machine needs the optional package mermaid, which is not installed: run 'npm install mermaid' in the project that has smcuda, then reload";
