/// <reference lib="dom" />
/// <reference lib="dom.iterable" />
// (page.evaluate callbacks run in the browser: their globals are the DOM's)
/**
 * The inspector page at 1280 px in headless Chromium (playwright-core driving
 * /usr/bin/chromium; skipped, saying so, without it): the current state is
 * prominent (a large badge, in view, and the diagram's node marked), the
 * diagram's labels are readable (at least 11 px high as drawn), and, without
 * mermaid, the page says what to install on the page itself — never
 * playwright-core — and still shows every endpoint's state.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findChromium, launchChromium, MERMAID_MISSING } from '../../../src/diagram/chromium.js';
import { CLI } from '../../helpers/cli.js';
import { type InspectProcess, startInspect } from '../../helpers/inspect-process.js';

const dir = mkdtempSync(join(tmpdir(), 'smcuda-inspect-legible-'));
const trace = join(dir, 'demo.jsonl');
let insp: InspectProcess | undefined;
let browser: Browser | undefined;
const chromium = findChromium();

beforeAll(async () => {
  if (!chromium) return;
  // A finished 2-rank demo's trace: both endpoints end OK.
  await promisify(execFile)(process.execPath, [CLI, 'demo', '--driver', 'sim', '--sizes', '8,64K', '--iters', '1', '--trace', trace]);
  [insp, browser] = await Promise.all([startInspect(trace), launchChromium()]); // one browser for both tests
}, 60_000);
afterAll(async () => {
  await browser?.close();
  await insp?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe.skipIf(!chromium)(`inspector legibility at 1280 px${chromium ? '' : ' (skipped: no Chromium at /usr/bin/chromium or $SMCUDA_CHROMIUM)'}`, () => {
  it('shows the current state prominently, and labels readable', async () => {
    const page = await browser!.newPage({ viewport: { width: 1280, height: 900 } });
    try {
      await page.goto(insp!.url);
      await page.waitForFunction(
        () => {
          const cards = [...document.querySelectorAll<HTMLElement>('[data-endpoint]')];
          return cards.length === 2 && cards.every((c) => c.querySelector('.diagram svg .smcuda-current'));
        },
        undefined,
        { timeout: 30_000 },
      );
      const shot = join(dir, 'inspector-1280.png');
      await page.screenshot({ path: shot, fullPage: true });
      expect(readFileSync(shot).subarray(1, 4).toString()).toBe('PNG');
      const m = await page.evaluate(() => {
        const badge = document.querySelector<HTMLElement>('[data-role=state]')!;
        const r = badge.getBoundingClientRect();
        const labels = [...document.querySelectorAll<SVGGraphicsElement>('.diagram svg .nodeLabel, .diagram svg text')]
          .map((t) => t.getBoundingClientRect().height)
          .filter((h) => h > 0);
        const marked = document.querySelector('.diagram svg .smcuda-current')!.getBoundingClientRect();
        return {
          badgePx: parseFloat(getComputedStyle(badge).fontSize),
          badgeTop: r.top,
          badgeText: badge.textContent,
          labels: labels.length,
          smallestLabel: Math.min(...labels),
          markedWidth: marked.width,
          overflow: document.documentElement.scrollWidth - window.innerWidth,
        };
      });
      expect(m.badgeText).toBe('OK');
      expect(m.badgePx).toBeGreaterThanOrEqual(20); // the current state: large
      expect(m.badgeTop).toBeLessThan(300); // and in view without scrolling
      expect(m.labels).toBeGreaterThan(5);
      expect(m.smallestLabel).toBeGreaterThanOrEqual(11); // readable at 1280 px
      expect(m.markedWidth).toBeGreaterThan(20);
      expect(m.overflow).toBeLessThanOrEqual(0); // no sideways scrolling
    } finally {
      await page.close();
    }
  }, 60_000);

  it('without mermaid: says what to install on the page, not playwright-core, and shows the states', async () => {
    const page = await browser!.newPage({ viewport: { width: 1280, height: 900 } });
    try {
      // As the server answers when mermaid is not installed (src/inspect/server.ts).
      await page.route('**/mermaid.min.js', (route) => route.fulfill({ status: 404, contentType: 'text/plain', body: `${MERMAID_MISSING}\n` }));
      await page.goto(insp!.url);
      await page.waitForFunction(
        () => !document.getElementById('notice')!.hidden && document.querySelectorAll('[data-endpoint] [data-state=OK]').length === 2,
        undefined,
        { timeout: 30_000 },
      );
      const notice = await page.textContent('#notice');
      expect(notice).toContain('npm install mermaid');
      expect(notice).not.toMatch(/playwright/);
      expect(await page.textContent('body')).not.toMatch(/playwright/);
      expect(await page.$$eval('.diagram', (ds) => ds.map((d) => d.textContent))).toEqual([
        'no diagram: mermaid is not installed (see above)',
        'no diagram: mermaid is not installed (see above)',
      ]);
    } finally {
      await page.close();
    }
  }, 60_000);
});
