/**
 * `smcuda diagram`: Mermaid, DOT and SVG pictures of the state machines,
 * generated from their XState definitions (src/diagram/).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ChromiumUnavailableError } from '../diagram/chromium.js';
import { findMachine, MACHINES, type DrawableMachine } from '../diagram/machines.js';
import { DIAGRAM_FORMATS, FILE_EXTENSION, graphOf, renderAll, type DiagramFormat } from '../diagram/render.js';
import { parse, UsageError } from './usage.js';

const HELP = `usage: smcuda diagram [options]

Draws each protocol state machine from its XState definition: every state
(sub-states as composite states) and every transition — events, eventless
(always) branches, the outcomes of invoked checks (done, failed) and 'after'
timeouts — labelled "trigger [condition] / frames sent".

  --machine NAME        one machine: ${MACHINES.map((m) => m.name).join(', ')} (default: all with --out or --json,
                        else the first, ${MACHINES[0]!.name})
  --format LIST         mermaid | dot | svg, or several comma-separated (default mermaid)
                        svg is rendered by Mermaid in headless Chromium
                        (/usr/bin/chromium or $SMCUDA_CHROMIUM; exits 1 where none is installed)
  --out DIR             write DIR/<machine>.mmd|.dot|.svg instead of printing
                        (needed for more than one machine or format)
  --json                print the machines' graphs as JSON (states, edges, files written)
  -h, --help            this help

Examples:
  smcuda diagram                                   # Mermaid stateDiagram-v2 on stdout
  smcuda diagram --format dot | dot -Tpng > n.png  # with Graphviz installed
  smcuda diagram --format mermaid,dot,svg --out docs/diagrams   # all pictures into a folder`;

export async function runDiagram(argv: string[]): Promise<number> {
  const a = parse(argv, {
    machine: { type: 'string' },
    format: { type: 'string', default: 'mermaid' },
    out: { type: 'string' },
    json: { type: 'boolean', default: false },
    help: { type: 'boolean', short: 'h', default: false },
  });
  if (a.help) {
    console.log(HELP);
    return 0;
  }
  let machines: readonly DrawableMachine[] = MACHINES;
  if (a.machine !== undefined) {
    const m = findMachine(a.machine);
    if (!m) throw new UsageError(`no machine '${a.machine}'; there are: ${MACHINES.map((x) => x.name).join(', ')}`);
    machines = [m];
  } else if (a.out === undefined && !a.json) {
    machines = [MACHINES[0]!]; // to stdout, one picture: the negotiation, as before there were others
  }
  const formats = [...new Set(a.format!.split(',').map((f) => f.trim()))] as DiagramFormat[];
  for (const f of formats) {
    if (!DIAGRAM_FORMATS.includes(f)) throw new UsageError(`--format must be ${DIAGRAM_FORMATS.join(', ')} or a comma-separated list of them, got '${f}'`);
  }
  if (a.out === undefined && !a.json && machines.length * formats.length > 1) {
    throw new UsageError(`${machines.length * formats.length} diagrams cannot all go to stdout: give --out DIR (or one --machine and one --format)`);
  }

  let outputs;
  try {
    outputs = a.json && a.out === undefined ? [] : await renderAll(machines, formats);
  } catch (err) {
    if (err instanceof ChromiumUnavailableError) {
      console.error(`smcuda diagram: ${err.message}`);
      return 1;
    }
    throw err;
  }
  const files: string[] = [];
  if (a.out !== undefined) {
    mkdirSync(a.out, { recursive: true });
    for (const o of outputs) {
      const path = join(a.out, `${o.machine.name}.${FILE_EXTENSION[o.format]}`);
      writeFileSync(path, o.text);
      files.push(path);
    }
  }
  if (a.json) {
    const report = machines.map((m) => ({
      name: m.name,
      summary: m.summary,
      source: m.source,
      graph: graphOf(m),
      files: files.filter((f) => f.startsWith(join(a.out ?? '', `${m.name}.`))),
    }));
    console.log(JSON.stringify({ machines: report }, null, 2));
  } else if (a.out !== undefined) {
    for (const f of files) console.log(`wrote ${f}`);
  } else {
    process.stdout.write(outputs[0]!.text);
  }
  return 0;
}
