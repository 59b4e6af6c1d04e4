/**
 * docs/api/ (TypeDoc, `npm run docs:api`) has an entry for every export of
 * every entry point — runtime and type-only — read from the compiled
 * declarations with the TypeScript compiler; and the items the issue found
 * undocumented have prose. Generating takes ~20 s, so this checks the
 * committed output: after changing an export, run `npm run docs:api` and
 * commit docs/api/.
 */
import { existsSync, readFileSync } from 'node:fs';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const REGENERATE = 'Regenerate the reference with `npm run docs:api` (TypeDoc, typedoc.json) and commit docs/api/; give new exports a doc comment.';

const ENTRY_POINTS: Array<{ name: string; dts: string; doc: string; src: string }> = [
  { name: 'smcuda', dts: 'dist/src/index.d.ts', doc: 'docs/api/smcuda.md', src: '../../../src/index.js' },
  { name: 'smcuda/cuda', dts: 'dist/src/cuda/index.d.ts', doc: 'docs/api/smcuda/cuda.md', src: '../../../src/cuda/index.js' },
  { name: 'smcuda/machines', dts: 'dist/machines/index.d.ts', doc: 'docs/api/smcuda/machines.md', src: '../../../machines/index.js' },
  { name: 'smcuda/cache', dts: 'dist/cache/index.d.ts', doc: 'docs/api/smcuda/cache.md', src: '../../../cache/index.js' },
];

/** Every export of each entry point (types included), from the compiled .d.ts: one program, no type check. */
function exportsOf(): Map<string, string[]> {
  const program = ts.createProgram(
    ENTRY_POINTS.map((e) => e.dts),
    {
      target: ts.ScriptTarget.ES2022,
      module: ts.ModuleKind.NodeNext,
      moduleResolution: ts.ModuleResolutionKind.NodeNext,
      types: [],
      skipLibCheck: true,
      noEmit: true,
    },
  );
  const checker = program.getTypeChecker();
  const out = new Map<string, string[]>();
  for (const e of ENTRY_POINTS) {
    const sf = program.getSourceFile(e.dts);
    if (!sf) throw new Error(`${e.dts} is missing: compile first (npx tsc -p tsconfig.json)`);
    out.set(
      e.name,
      checker.getExportsOfModule(checker.getSymbolAtLocation(sf)!).map((s) => s.name),
    );
  }
  return out;
}

/** The level-3 headings of a generated module page: one per export (`### Name`, functions `### name()`). */
function entries(doc: string): Set<string> {
  const names = new Set<string>();
  for (const m of readFileSync(doc, 'utf8').matchAll(/^### (.+)$/gm)) names.add(m[1]!.replace(/\\/g, '').replace(/\(\)$/, ''));
  return names;
}

/** The text under a heading (until the next heading of that level or above). */
function section(doc: string, heading: string): string {
  const text = readFileSync(doc, 'utf8');
  const level = /^#+/.exec(heading)![0].length;
  const start = text.indexOf(`\n${heading}\n`);
  if (start < 0) return '';
  const rest = text.slice(start + heading.length + 2);
  const end = rest.search(new RegExp(`^#{1,${level}} `, 'm'));
  return end < 0 ? rest : rest.slice(0, end);
}

describe('docs/api (the generated API reference)', () => {
  const all = exportsOf();

  for (const e of ENTRY_POINTS) {
    it(`has an entry for every export of '${e.name}'`, async () => {
      expect(existsSync(e.doc), `${e.doc} is missing. ${REGENERATE}`).toBe(true);
      const documented = entries(e.doc);
      const missing = all.get(e.name)!.filter((n) => !documented.has(n));
      expect(missing, `exports of '${e.name}' with no entry in ${e.doc}. ${REGENERATE}`).toEqual([]);
      const stale = [...documented].filter((n) => !all.get(e.name)!.includes(n));
      expect(stale, `entries in ${e.doc} that '${e.name}' no longer exports. ${REGENERATE}`).toEqual([]);
      // The runtime exports are among them (the .d.ts and the module agree).
      const runtime = Object.keys(await import(e.src));
      expect(
        runtime.filter((n) => !documented.has(n)),
        `runtime exports of '${e.name}' with no entry. ${REGENERATE}`,
      ).toEqual([]);
    });
  }

  it('documents, in prose, what users found documented only in the .d.ts files', () => {
    const main = 'docs/api/smcuda.md';
    const prose = (s: string) => s.split('\n').some((l) => /^[A-Z`(]/.test(l) && !/^(Defined in|Re-exports)/.test(l) && l.length > 20);
    const wanted: Array<[string, string]> = [
      [main, '### AddonLoadError'],
      [main, '### DriverUnavailableError'],
      [main, '### SmcudaError'],
      [main, '### TruncationError'],
      [main, '### FileTracer'],
      [main, '### Transport'],
      [main, '### Endpoint'],
    ];
    for (const [doc, heading] of wanted)
      expect(prose(section(doc, heading).split('\n#### ')[0]!), `${heading} in ${doc} has no description. ${REGENERATE}`).toBe(true);
    const members: Array<[string, string, string]> = [
      [main, '### Transport', '##### free()'],
      [main, '### Transport', '##### endpoint()'],
      [main, '### Transport', '##### endpoints()'],
      [main, '### Transport', '##### driverKind'],
      [main, '### Endpoint', '##### peerPid'],
      [main, '### Endpoint', '##### peerDeviceUuid'],
      [main, '### TransportCreateOptions', '##### lazyDevice?'],
      ['docs/api/smcuda/machines.md', '### NegotiationConfig', '##### maxTries'],
      ['docs/api/smcuda/machines.md', '### NegotiationConfig', '##### sameGpuIpc'],
    ];
    for (const [doc, owner, member] of members) {
      const body = section(doc, owner);
      const i = body.indexOf(`\n${member}\n`);
      expect(i, `${owner} ${member} is missing from ${doc}. ${REGENERATE}`).toBeGreaterThanOrEqual(0);
      const text = body.slice(i + member.length + 2).split(/\n#{4,5} /)[0]!;
      expect(prose(text), `${owner} ${member} in ${doc} has no description. ${REGENERATE}`).toBe(true);
    }
  });

  it("lists every collective's argument fields (named interfaces, not `object & CallOptions`), each described", () => {
    const main = 'docs/api/smcuda.md';
    const comm = section(main, '### Communicator');
    expect(comm, `the Communicator's calls take an inline object type. ${REGENERATE}`).not.toMatch(/`object` &/);
    const calls: Array<[string, string, string[]]> = [
      ['allreduce', 'AllreduceArgs', ['send', 'recv?', 'count', 'dtype', 'op', 'factor?', 'stream?']],
      ['broadcast', 'BroadcastArgs', ['send?', 'recv', 'count', 'dtype', 'root', 'stream?']],
      ['reduce', 'ReduceArgs', ['send', 'recv?', 'count', 'dtype', 'op', 'root']],
      ['allgather', 'AllgatherArgs', ['send', 'recv', 'count', 'dtype']],
      ['reduceScatter', 'ReduceScatterArgs', ['send', 'recv', 'count', 'dtype', 'op']],
      ['alltoall', 'AlltoallArgs', ['send', 'recv?', 'count', 'dtype']],
    ];
    for (const [call, args, fields] of calls) {
      const method = comm.split(`\n##### ${call}()\n`)[1]?.split(/\n##### /)[0] ?? '';
      expect(method, `Communicator.${call}() does not take ${args}. ${REGENERATE}`).toContain(`[\`${args}\`](#${args.toLowerCase()})`);
      const body = section(main, `### ${args}`);
      for (const f of fields) {
        const i = body.indexOf(`\n##### ${f}\n`);
        expect(i, `${args}.${f} is missing from ${main}. ${REGENERATE}`).toBeGreaterThanOrEqual(0);
        const text = body
          .slice(i)
          .split('\n')
          .slice(2)
          .join('\n')
          .split(/\n#{4,5} /)[0]!;
        expect(
          text.split('\n').some((l) => /^[\w`(]/.test(l) && l.length > 12),
          `${args}.${f} has no description. ${REGENERATE}`,
        ).toBe(true);
      }
    }
  });

  it("leaves inherited EventEmitter members out of the classes' entries", () => {
    const main = 'docs/api/smcuda.md';
    for (const owner of ['### Communicator', '### Transport', '### Endpoint']) {
      const body = section(main, owner);
      expect(body, `${owner} is missing from ${main}`).not.toBe('');
      for (const m of ['on', 'once', 'emit', 'addListener', 'removeAllListeners', 'setMaxListeners', 'listenerCount', 'eventNames'])
        expect(body, `${owner} in ${main} lists EventEmitter's ${m}(). ${REGENERATE}`).not.toContain(`\n##### ${m}()\n`);
    }
  });
});
