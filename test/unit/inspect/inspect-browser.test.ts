/// <reference lib="dom" />
/// <reference lib="dom.iterable" />
// (page.evaluate callbacks run in the browser: their globals are the DOM's)
/**
 * The inspector page in a real browser: `smcuda inspect` follows the trace of
 * a 2-rank `smcuda demo`, and headless Chromium (playwright-core driving
 * /usr/bin/chromium) watches each endpoint appear and its state change to OK.
 * The screenshot goes to docs/inspector.png when SMCUDA_UPDATE_DOCS=1, else to
 * a temporary folder (so that test runs leave the checkout clean).
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { findChromium, launchChromium } from '../../../src/diagram/chromium.js';
import { CLI } from '../../helpers/cli.js';
import { startInspect } from '../../helpers/inspect-process.js';

const dir = mkdtempSync(join(tmpdir(), 'smcuda-inspect-browser-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const SCREENSHOT = process.env.SMCUDA_UPDATE_DOCS === '1' ? new URL('../../../docs/inspector.png', import.meta.url).pathname : join(dir, 'inspector.png');

function runDemo(trace: string): Promise<number | null> {
  // Enough messages that the endpoints stay OK for a while after negotiating.
  const child = spawn(process.execPath, [CLI, 'demo', '--driver', 'sim', '--sizes', '8,64K,1M', '--iters', '8', '--trace', trace], { stdio: 'ignore' });
  return new Promise((resolve) => child.once('exit', resolve));
}

describe.skipIf(!findChromium())(`inspector page in headless Chromium${findChromium() ? '' : ' (skipped: no /usr/bin/chromium)'}`, () => {
  it('shows each endpoint of a running demo, and its state changing to OK', async () => {
    const trace = join(dir, 'demo.jsonl');
    const insp = await startInspect(trace);
    const browser = await launchChromium();
    try {
      const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
      const external: string[] = [];
      page.on('request', (r) => {
        if (!r.url().startsWith(insp.url)) external.push(r.url());
      });
      await page.goto(insp.url);
      await page.waitForFunction(() => document.getElementById('conn')?.textContent === 'live');
      // Record every state each endpoint shows, however briefly.
      await page.evaluate(() => {
        const seen: Record<string, string[]> = {};
        (window as unknown as { seen: typeof seen }).seen = seen;
        const note = () => {
          for (const el of document.querySelectorAll<HTMLElement>('[data-endpoint]')) {
            const s = el.querySelector<HTMLElement>('[data-role=state]')?.dataset.state;
            const list = (seen[el.dataset.endpoint!] ??= []);
            if (s && list.at(-1) !== s) list.push(s);
          }
        };
        new MutationObserver(note).observe(document.body, { subtree: true, childList: true, attributes: true, characterData: true });
      });

      const demo = runDemo(trace);
      await page.waitForFunction(
        () => {
          const cards = [...document.querySelectorAll<HTMLElement>('[data-endpoint]')];
          return (
            cards.length === 2 &&
            cards.every((c) => c.querySelector<HTMLElement>('[data-role=state]')?.dataset.state === 'OK' && c.querySelector('.diagram svg'))
          );
        },
        undefined,
        { timeout: 30_000 },
      );
      await page.screenshot({ path: SCREENSHOT, fullPage: true });
      expect(await demo).toBe(0);
      await new Promise((r) => setTimeout(r, 500)); // the trace's last lines reach the page

      // Each diagram highlights the state its endpoint shows.
      const marks = await page.$$eval('[data-endpoint]', (cards) =>
        cards.map((c) => ({
          state: c.querySelector<HTMLElement>('[data-role=state]')!.dataset.state!,
          marked: [...c.querySelectorAll('.smcuda-current')].map((e) => e.getAttribute('data-id') ?? e.id),
        })),
      );
      for (const m of marks) {
        expect(m.marked.length).toBe(1);
        expect(m.marked[0]).toMatch(new RegExp(`(^${m.state}$)|-state-${m.state}-\\d+$`));
      }

      const seen = await page.evaluate(() => (window as unknown as { seen: Record<string, string[]> }).seen);
      expect(Object.keys(seen).sort()).toEqual(['rank0→rank1', 'rank1→rank0']);
      for (const states of Object.values(seen)) {
        expect(states).toContain('OK');
        expect(states.indexOf('OK')).toBeGreaterThan(0); // it changed to OK: something came before
      }
      const transitions = await page.$$eval('[data-endpoint] [data-role=transitions]', (els) => els.map((e) => e.textContent ?? ''));
      // Whoever sends a GPU message first asks (INIT→SENT); the other side may
      // get that request before its own first GPU send and answer it (INIT→ACKING).
      for (const t of transitions) expect(t).toMatch(/INIT→(SENT|ACKING)/);
      expect(transitions.join(' ')).toMatch(/INIT→SENT/);
      expect(transitions.join(' ')).toMatch(/(SENT|ACKED)→OK/);
      const misses = await page.$$eval('[data-cache=miss]', (els) => els.map((e) => Number(e.textContent)));
      expect(misses.some((n) => n > 0)).toBe(true);
      expect(external).toEqual([]);
      expect(readFileSync(SCREENSHOT).subarray(1, 4).toString()).toBe('PNG');
    } finally {
      await browser.close();
      await insp.stop();
    }
  });
});
