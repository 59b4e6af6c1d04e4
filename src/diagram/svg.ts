/**
 * Mermaid text → SVG, rendered by Mermaid itself in headless Chromium (Mermaid
 * lays text out with the browser's font metrics, so it needs a real browser).
 * The Mermaid bundle is inlined from node_modules: nothing is fetched.
 */
import { launchChromium, mermaidBundlePath } from './chromium.js';

/** Renders each Mermaid source to an SVG document, in one browser. */
export async function renderMermaidSvgs(sources: string[]): Promise<string[]> {
  const browser = await launchChromium();
  try {
    const page = await browser.newPage();
    await page.setContent('<!doctype html><html><body></body></html>');
    await page.addScriptTag({ path: mermaidBundlePath() });
    const out: string[] = [];
    for (const [i, source] of sources.entries()) {
      const svg = await page.evaluate(
        async ({ source, id }) => {
          const m = (globalThis as unknown as { mermaid: MermaidApi }).mermaid;
          m.initialize({ startOnLoad: false, theme: 'default', securityLevel: 'strict', htmlLabels: false, flowchart: { htmlLabels: false } });
          return (await m.render(id, source)).svg;
        },
        { source, id: `smcuda-diagram-${i}` },
      );
      out.push(`<?xml version="1.0" encoding="UTF-8"?>\n${svg}\n`);
    }
    return out;
  } finally {
    await browser.close();
  }
}

interface MermaidApi {
  initialize(config: Record<string, unknown>): void;
  render(id: string, text: string): Promise<{ svg: string }>;
}
