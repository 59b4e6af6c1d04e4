/**
 * A module's PTX cut down to some of its entries: the header (.version,
 * .target, .address_size, and of the .funcs nvcc places before the first
 * entry those the kept entries call, directly or through another) and
 * those `.entry` functions, for a module
 * whose entries stand alone otherwise (no module-scope .global, .shared or
 * .const, no .func between entries: what build-ptx.mjs makes from
 * reduce.cu). Why: the driver
 * JIT-compiles a whole module at load, and the 49 entries of reduce.ptx.ts
 * took 1.3–1.4 s to compile into an empty cache on an H200
 * (test/gpu/measure-jit.mjs); a communicator loads the entries of the
 * dtypes it is called with only. A .func no kept entry calls is left out:
 * reduce.cu's fp8 conversions would otherwise be compiled with every dtype.
 */

/** The PTX text of `ptx` with only the entries `keep` accepts (by name), in their order. */
export function ptxWithEntries(ptx: string, keep: (entry: string) => boolean): string {
  const marks = [...ptx.matchAll(/^\t\/\/ \.globl\t(\S+)$/gm)];
  if (marks.length === 0) throw new Error('PTX without `// .globl` markers: cannot cut it into entries');
  const header = ptx.slice(0, marks[0]!.index);
  // A .func before the first entry is kept in every cut; module-scope state would be one per cut.
  if (/^\.(global|shared|const)\b|^\.visible \.(global|shared|const)\b|^\.extern/m.test(header))
    throw new Error('PTX with module-scope variables: its entries do not stand alone');
  let entries = '';
  marks.forEach((m, i) => {
    const body = ptx.slice(m.index, i + 1 < marks.length ? marks[i + 1]!.index : ptx.length);
    if (/^\.(visible \.)?func\b/m.test(body)) throw new Error(`PTX entry ${m[1]} is followed by a .func: its entries do not stand alone`);
    if (keep(m[1]!)) entries += body;
  });
  return calledFuncs(header, entries) + entries;
}

/** `header` with only the .func definitions that `code` calls, directly or through a kept .func. */
function calledFuncs(header: string, code: string): string {
  const starts = [...header.matchAll(/^\.(?:visible \.)?func\b[^\n]*?(\w+)\(/gm)];
  if (starts.length === 0) return header;
  const funcs = starts.map((m, i) => ({ name: m[1]!, text: header.slice(m.index, i + 1 < starts.length ? starts[i + 1]!.index : header.length) }));
  const calls = (text: string, name: string) => new RegExp(`\\b${name}\\b`).test(text);
  const kept = new Set<string>();
  let reach = code;
  for (let grew = true; grew; ) {
    grew = false;
    for (const f of funcs) {
      if (kept.has(f.name) || !calls(reach, f.name)) continue;
      kept.add(f.name);
      reach += f.text;
      grew = true;
    }
  }
  return (
    header.slice(0, starts[0]!.index) +
    funcs
      .filter((f) => kept.has(f.name))
      .map((f) => f.text)
      .join('')
  );
}
