/**
 * A MachineGraph as a Mermaid stateDiagram-v2. Compound states are composite
 * states; a transition between two children of the same compound state is
 * written inside its block, every other one at the top level (Mermaid lays out
 * edges that cross a composite boundary only from there).
 *
 * Mermaid ids are the state path joined by '_' ('INIT_idle'); children are
 * shown by their own key (`state "idle" as INIT_idle`). `highlight` (state ids)
 * adds a `current` class, which the inspector uses for the current state.
 */
import { allStates, ANY_STATE, drawnEdges, type GraphEdge, type GraphState, type MachineGraph } from './graph.js';

export interface MermaidStateOptions {
  /** First comment line, e.g. where the diagram came from. */
  header?: string;
  /** State ids to mark with the `current` class. */
  highlight?: string[];
}

export const ANY_STATE_MERMAID_ID = 'ANY_STATE';

export function mermaidId(stateId: string): string {
  if (stateId === ANY_STATE) return ANY_STATE_MERMAID_ID;
  return stateId.replace(/[^A-Za-z0-9_]/g, '_');
}

/** Text Mermaid accepts in a transition label or state name. */
function text(s: string): string {
  return s
    .replace(/[;#:{}"\n]/g, ' ')
    .replace(/\s+/g, ' ')
    .trim();
}

export function toMermaidState(graph: MachineGraph, options: MermaidStateOptions = {}): string {
  const lines: string[] = ['---', `title: ${text(graph.id)}`, '---', 'stateDiagram-v2'];
  const comment = (s: string) => lines.push(`  %% ${s.replace(/\s+/g, ' ')}`);
  if (options.header) comment(options.header);
  if (graph.description) comment(graph.description);
  for (const note of graph.globalNotes) comment(`in any state: ${note}`);

  const parentOf = new Map<string, string>();
  for (const s of allStates(graph)) for (const c of s.children) parentOf.set(c.id, s.id);
  // An edge goes inside a composite block when both ends are children of it.
  const blockOf = (e: GraphEdge): string | undefined => {
    const p = parentOf.get(e.source);
    return p !== undefined && (e.target === undefined || parentOf.get(e.target) === p) ? p : undefined;
  };
  const edgesIn = new Map<string | undefined, GraphEdge[]>();
  for (const e of drawnEdges(graph)) {
    const b = blockOf(e);
    edgesIn.set(b, [...(edgesIn.get(b) ?? []), e]);
  }
  const edgeLine = (e: GraphEdge, indent: string) => `${indent}${mermaidId(e.source)} --> ${mermaidId(e.target ?? e.source)} : ${text(e.label)}`;

  const writeState = (s: GraphState, indent: string) => {
    const id = mermaidId(s.id);
    const named = s.path.length > 1 || id !== s.key;
    if (s.children.length === 0) {
      if (named) lines.push(`${indent}state "${text(s.key)}" as ${id}`);
      return;
    }
    if (named) lines.push(`${indent}state "${text(s.key)}" as ${id}`);
    lines.push(`${indent}state ${id} {`);
    if (s.initial) lines.push(`${indent}  [*] --> ${mermaidId(s.initial)}`);
    for (const c of s.children) writeState(c, `${indent}  `);
    for (const e of edgesIn.get(s.id) ?? []) lines.push(edgeLine(e, `${indent}  `));
    lines.push(`${indent}}`);
  };

  if (graph.initial) lines.push(`  [*] --> ${mermaidId(graph.initial)}`);
  for (const s of graph.states) writeState(s, '  ');
  if (graph.edges.some((e) => e.source === ANY_STATE)) lines.push(`  state "any state" as ${ANY_STATE_MERMAID_ID}`);
  for (const e of edgesIn.get(undefined) ?? []) lines.push(edgeLine(e, '  '));

  lines.push('  classDef pseudo fill:#ffffff,stroke:#999999,stroke-dasharray:4 3,color:#666666');
  lines.push('  classDef stable stroke-width:3px');
  lines.push('  classDef current fill:#ffd54f,stroke:#e65100,stroke-width:3px');
  if (graph.edges.some((e) => e.source === ANY_STATE)) lines.push(`  class ${ANY_STATE_MERMAID_ID} pseudo`);
  const stable = allStates(graph).filter((s) => s.tags.includes('stable') && s.children.length === 0);
  if (stable.length) lines.push(`  class ${stable.map((s) => mermaidId(s.id)).join(', ')} stable`);
  if (options.highlight?.length) lines.push(`  class ${options.highlight.map(mermaidId).join(', ')} current`);
  return `${lines.join('\n')}\n`;
}
