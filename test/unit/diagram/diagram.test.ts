/**
 * `smcuda diagram`: the machine drawn from its XState definition, in each
 * format, and the committed docs/diagrams/ in step with the machine.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { machineGraph } from '../../../src/diagram/graph.js';
import { findChromium } from '../../../src/diagram/chromium.js';
import { findMachine } from '../../../src/diagram/machines.js';
import { dotOf, mermaidOf } from '../../../src/diagram/render.js';
import { NEGOTIATION_VOCABULARY } from '../../../src/diagram/vocabulary.js';
import { negotiationMachine, NEGOTIATION_STATES } from '../../../machines/negotiation.js';
import { smcuda } from '../../helpers/cli.js';

const DOCS = new URL('../../../docs/diagrams/', import.meta.url).pathname;
const negotiation = findMachine('negotiation')!;
const tmp = mkdtempSync(join(tmpdir(), 'smcuda-diagram-test-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

describe('graph of the negotiation machine', () => {
  const graph = machineGraph(negotiationMachine as never, NEGOTIATION_VOCABULARY);
  const edge = (source: string, target: string | undefined, labelPart: string) =>
    graph.edges.find((e) => e.source === source && e.target === target && e.label.includes(labelPart));

  it('has the six top-level states, INIT first, and the sub-states as children', () => {
    expect(graph.states.map((s) => s.id)).toEqual([...NEGOTIATION_STATES]);
    expect(graph.initial).toBe('INIT');
    expect(graph.states.find((s) => s.id === 'INIT')!.children.map((c) => c.key)).toEqual(['idle', 'checkingSend', 'checkingRequest']);
    expect(graph.states.find((s) => s.id === 'SENT')!.children.map((c) => c.key)).toEqual(['waiting', 'openingProbe']);
    expect(graph.states.find((s) => s.id === 'ACKING')!.children.map((c) => c.key)).toEqual(['deciding', 'checkingPeerAccess', 'openingProbe']);
  });

  it("includes ACKING.deciding's eventless branches, with their guards in words", () => {
    expect(edge('ACKING.deciding', 'ACKING.openingProbe', 'always [same GPU and same-GPU IPC on]')?.kind).toBe('always');
    expect(edge('ACKING.deciding', 'BAD', 'always [same GPU and same-GPU IPC off] / send IPC_ACK(no)')).toBeDefined();
    expect(edge('ACKING.deciding', 'ACKING.checkingPeerAccess', 'always [else]')).toBeDefined();
  });

  it('labels invoked outcomes by the check and after-timeouts by the option, never by internal ids', () => {
    expect(edge('INIT.checkingSend', 'SENT', 'checkReady done [ready] / send IPC_REQ')?.kind).toBe('done');
    expect(edge('ACKING.checkingPeerAccess', 'BAD', 'checkPeerAccess failed')?.kind).toBe('error');
    expect(edge('SENT', 'BAD', 'after requestTimeoutMs / send IPC_ABORT')?.kind).toBe('after');
    expect(edge('ACKED', 'BAD', 'after confirmTimeoutMs')).toBeDefined();
    for (const e of graph.edges) expect(e.label).not.toMatch(/xstate\.|readyToSend|readyToAnswer|peerAccess\b|#negotiation/);
  });

  it('shows the tie-break and the retry as event edges', () => {
    expect(edge('SENT.waiting', undefined, 'IPC_REQ [my id is lower] / ignore')).toBeDefined();
    expect(edge('SENT.waiting', 'ACKING', "IPC_REQ [peer's id is lower]")).toBeDefined();
    expect(edge('SENT.waiting', 'INIT', 'IPC_NOTREADY [my attempt and tries left]')).toBeDefined();
    expect(edge('SENT.waiting', 'SENT.openingProbe', 'IPC_ACK [my attempt and ok]')).toBeDefined();
  });

  it('shows the probe: opened before ACK(yes) and before CONFIRM, a failure BAD on both paths', () => {
    expect(edge('ACKING.checkingPeerAccess', 'ACKING.openingProbe', 'checkPeerAccess done [peer access]')?.kind).toBe('done');
    expect(edge('ACKING.openingProbe', 'ACKED', 'openProbe done / send IPC_ACK(yes)')?.kind).toBe('done');
    expect(edge('ACKING.openingProbe', 'BAD', 'openProbe failed / send IPC_ACK(no)')?.kind).toBe('error');
    expect(edge('SENT.openingProbe', 'OK', 'openProbe done / send IPC_CONFIRM')?.kind).toBe('done');
    expect(edge('SENT.openingProbe', 'BAD', 'openProbe failed / send IPC_ABORT')?.kind).toBe('error');
  });

  it('draws transitions declared on the root from "any state"', () => {
    expect(edge('*', 'BAD', 'PEER_LOST')).toBeDefined();
    expect(graph.globalNotes.join()).toContain('IPC_REQ, IPC_ACK, IPC_NOTREADY, IPC_CONFIRM: ignore');
  });
});

describe('smcuda diagram', () => {
  it('prints a Mermaid stateDiagram-v2 with composite states by default', async () => {
    const r = await smcuda(['diagram']);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('stateDiagram-v2');
    expect(r.stdout).toContain('state INIT {');
    expect(r.stdout).toContain('state ACKING {');
    expect(r.stdout).toContain('state SENT {');
    expect(r.stdout).toContain('ACKING_openingProbe --> ACKED : openProbe done / send IPC_ACK(yes)');
    expect(r.stdout).toContain('SENT_openingProbe --> OK : openProbe done / send IPC_CONFIRM');
    expect(r.stdout).toBe(mermaidOf(negotiation));
  });

  it('prints Graphviz DOT with clusters for the composite states', async () => {
    const r = await smcuda(['diagram', '--machine', 'negotiation', '--format', 'dot']);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^\/\/ generated from machines\/negotiation\.ts/);
    expect(r.stdout).toContain('digraph "negotiation" {');
    expect(r.stdout).toContain('subgraph "cluster_INIT"');
    expect(r.stdout).toContain('lhead="cluster_ACKING"');
    expect(r.stdout).toMatch(/SENT_waiting -> BAD \[label="after requestTimeoutMs \/ send IPC_ABORT"[^\]]*ltail="cluster_SENT"/);
    expect(r.stdout.trim().endsWith('}')).toBe(true);
  });

  it('writes files with --out and describes the graph with --json', async () => {
    const r = await smcuda(['diagram', '--format', 'mermaid,dot', '--out', tmp, '--json']);
    expect(r.code).toBe(0);
    const report = JSON.parse(r.stdout) as { machines: { name: string; files: string[]; graph: { states: { id: string }[] } }[] };
    expect(report.machines[0]!.name).toBe('negotiation');
    expect(report.machines[0]!.graph.states.map((s) => s.id)).toEqual([...NEGOTIATION_STATES]);
    expect(report.machines[0]!.files.sort()).toEqual([join(tmp, 'negotiation.dot'), join(tmp, 'negotiation.mmd')]);
    expect(readFileSync(join(tmp, 'negotiation.mmd'), 'utf8')).toBe(mermaidOf(negotiation));
  });

  it('refuses bad usage with exit code 2 and a clear message', async () => {
    const bad = await smcuda(['diagram', '--format', 'png']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('--format must be mermaid, dot, svg');
    const unknown = await smcuda(['diagram', '--machine', 'nope']);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain("no machine 'nope'; there are: negotiation");
    const many = await smcuda(['diagram', '--format', 'mermaid,dot']);
    expect(many.code).toBe(2);
    expect(many.stderr).toContain('give --out DIR');
  });

  it('says clearly that SVG needs Chromium, and exits 1, where there is none', async () => {
    const r = await smcuda(['diagram', '--format', 'svg'], { SMCUDA_CHROMIUM: join(tmp, 'no-such-chromium') });
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('rendering SVG needs Chromium');
    expect(r.stderr).toContain('apt-get install');
  });

  it.skipIf(!findChromium())(`renders SVG with Mermaid in headless Chromium${findChromium() ? '' : ' (skipped: no /usr/bin/chromium)'}`, async () => {
    const r = await smcuda(['diagram', '--format', 'svg']);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^<\?xml[^>]*>\s*<svg/);
    for (const s of NEGOTIATION_STATES) expect(r.stdout).toContain(`>${s}<`);
  });
});

describe('docs/diagrams/', () => {
  it.each([
    ['negotiation.mmd', () => mermaidOf(negotiation)],
    ['negotiation.dot', () => dotOf(negotiation)],
    ['persistent.mmd', () => mermaidOf(findMachine('persistent')!)],
    ['persistent.dot', () => dotOf(findMachine('persistent')!)],
  ])('%s is up to date with the machine (run `npm run diagrams`)', (file, make) => {
    expect(existsSync(join(DOCS, file)), `docs/diagrams/${file} is missing: run npm run diagrams`).toBe(true);
    expect(readFileSync(join(DOCS, file), 'utf8'), `docs/diagrams/${file} is out of date: run npm run diagrams`).toBe(make());
  });

  it('has the rendered negotiation.svg', () => {
    expect(readFileSync(join(DOCS, 'negotiation.svg'), 'utf8')).toContain('<svg');
  });
});
