/**
 * A MachineGraph as Graphviz DOT. Compound states are clusters; an edge to or
 * from a compound state is drawn to its initial child with lhead/ltail set to
 * the cluster (compound=true), which is how Graphviz draws an edge ending at a
 * cluster's border.
 */
import { allStates, ANY_STATE, drawnEdges, type GraphState, type MachineGraph } from './graph.js';

function q(s: string): string {
  return `"${s.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n')}"`;
}

function nodeId(stateId: string): string {
  return stateId === ANY_STATE ? 'any_state' : stateId.replace(/[^A-Za-z0-9_]/g, '_');
}

export function toDot(graph: MachineGraph, header?: string): string {
  const byId = new Map(allStates(graph).map((s) => [s.id, s]));
  const isInside = (id: string, ancestor: string) => id.startsWith(`${ancestor}.`);
  /** The atomic state an edge to/from `s` attaches to. */
  const anchor = (s: GraphState): GraphState => {
    let cur = s;
    while (cur.children.length) cur = byId.get(cur.initial ?? cur.children[0]!.id) ?? cur.children[0]!;
    return cur;
  };

  const lines: string[] = [];
  if (header) lines.push(`// ${header}`);
  lines.push(`digraph ${q(graph.id)} {`);
  lines.push('  compound=true;');
  lines.push('  rankdir=TB;');
  const title = graph.globalNotes.length ? `${graph.id}\\nin any state: ${graph.globalNotes.join('; ')}` : graph.id;
  lines.push(`  label=${q(title).replace(/\\\\n/g, '\\n')}; labelloc=t; fontname="Helvetica";`);
  lines.push('  node [shape=box, style=rounded, fontname="Helvetica"];');
  lines.push('  edge [fontname="Helvetica", fontsize=10];');

  const writeState = (s: GraphState, indent: string, startId: string) => {
    if (s.children.length === 0) {
      const attrs = [`label=${q(s.key)}`];
      if (s.tags.includes('stable')) attrs.push('penwidth=2.5');
      if (s.description) attrs.push(`tooltip=${q(s.description)}`);
      lines.push(`${indent}${nodeId(s.id)} [${attrs.join(', ')}];`);
      return;
    }
    lines.push(`${indent}subgraph ${q(`cluster_${nodeId(s.id)}`)} {`);
    lines.push(`${indent}  label=${q(s.key)}; style=rounded;${s.description ? ` tooltip=${q(s.description)};` : ''}`);
    if (s.initial) {
      lines.push(`${indent}  ${startId} [shape=point, width=0.12, label=""];`);
      lines.push(`${indent}  ${startId} -> ${nodeId(s.initial)};`);
    }
    for (const c of s.children) writeState(c, `${indent}  `, `${nodeId(c.id)}__start`);
    lines.push(`${indent}}`);
  };

  if (graph.initial) {
    lines.push('  __start [shape=point, width=0.15, label=""];');
    const init = byId.get(graph.initial)!;
    lines.push(`  __start -> ${nodeId(anchor(init).id)}${init.children.length ? ` [lhead=${q(`cluster_${nodeId(init.id)}`)}]` : ''};`);
  }
  for (const s of graph.states) writeState(s, '  ', `${nodeId(s.id)}__start`);
  if (graph.edges.some((e) => e.source === ANY_STATE)) {
    lines.push('  any_state [label="any state", style="rounded,dashed", fontcolor="#666666", color="#999999"];');
  }

  for (const e of drawnEdges(graph)) {
    const attrs = [`label=${q(e.label)}`];
    if (e.kind === 'always') attrs.push('style=dashed');
    if (e.kind === 'after') attrs.push('style=dotted');
    if (e.description) attrs.push(`tooltip=${q(e.description)}`);
    const src = e.source === ANY_STATE ? undefined : byId.get(e.source)!;
    const dst = e.target === undefined ? src : byId.get(e.target)!;
    const from = e.source === ANY_STATE ? 'any_state' : nodeId(anchor(src!).id);
    let to = dst ? nodeId(anchor(dst).id) : from;
    if (src?.children.length && !(e.target && isInside(e.target, src.id))) attrs.push(`ltail=${q(`cluster_${nodeId(src.id)}`)}`);
    if (dst?.children.length && !(e.source !== ANY_STATE && isInside(e.source, dst.id))) attrs.push(`lhead=${q(`cluster_${nodeId(dst.id)}`)}`);
    if (e.target === undefined) to = from;
    lines.push(`  ${from} -> ${to} [${attrs.join(', ')}];`);
  }
  lines.push('}');
  return `${lines.join('\n')}\n`;
}
