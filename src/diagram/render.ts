/** One machine in each output format: the texts `smcuda diagram` prints or writes, and the drift test compares. */
import { machineGraph, type MachineGraph } from './graph.js';
import { toDot } from './dot.js';
import type { DrawableMachine } from './machines.js';
import { toMermaidState } from './mermaid-state.js';
import { renderMermaidSvgs } from './svg.js';

export const DIAGRAM_FORMATS = ['mermaid', 'dot', 'svg'] as const;
export type DiagramFormat = (typeof DIAGRAM_FORMATS)[number];

export const FILE_EXTENSION: Record<DiagramFormat, string> = { mermaid: 'mmd', dot: 'dot', svg: 'svg' };

export function header(m: DrawableMachine): string {
  return `generated from ${m.source} by \`smcuda diagram\`: do not edit`;
}

export function graphOf(m: DrawableMachine): MachineGraph {
  return machineGraph(m.machine, m.vocabulary);
}

export function mermaidOf(m: DrawableMachine, highlight?: string[]): string {
  return toMermaidState(graphOf(m), { header: header(m), ...(highlight ? { highlight } : {}) });
}

export function dotOf(m: DrawableMachine): string {
  return toDot(graphOf(m), header(m));
}

/** Texts for each machine × format; SVGs are rendered together in one browser. */
export async function renderAll(
  machines: readonly DrawableMachine[],
  formats: readonly DiagramFormat[],
): Promise<{ machine: DrawableMachine; format: DiagramFormat; text: string }[]> {
  const out: { machine: DrawableMachine; format: DiagramFormat; text: string }[] = [];
  const svgs = formats.includes('svg') ? await renderMermaidSvgs(machines.map((m) => mermaidOf(m))) : [];
  machines.forEach((machine, i) => {
    for (const format of formats) {
      const text = format === 'mermaid' ? mermaidOf(machine) : format === 'dot' ? dotOf(machine) : svgs[i]!;
      out.push({ machine, format, text });
    }
  });
  return out;
}
