/**
 * ptxWithEntries (src/kernels/ptx-entries.ts): reduce.ptx.ts cut per dtype
 * keeps the header, of its .funcs those the entries call, and exactly that
 * dtype's entries, whole; the simulated
 * driver loads each cut and finds its entries; a module whose entries do
 * not stand alone is refused.
 */
import { describe, expect, it } from 'vitest';
import { dtypePtx } from '../../../src/collectives/reduce-kernels.js';
import { SimulatedCudaDriver } from '../../../src/cuda/sim-driver.js';
import { DTYPES } from '../../../src/kernels/dtypes.js';
import { ptxWithEntries } from '../../../src/kernels/ptx-entries.js';
import { REDUCE_ENTRIES, reducePtx } from '../../../src/kernels/reduce.ptx.js';

const REDUCE_PTX = reducePtx();
import { FILL_PTX } from '../../../src/kernels/fill.ptx.js';
import { readFileSync } from 'node:fs';

const entriesOf = (ptx: string) => [...ptx.matchAll(/^\.visible \.entry (\S+)\(/gm)].map((m) => m[1]);

describe('the shipped PTX', () => {
  it('reduce.ptx.ts inflates to the text of reduce.ptx beside it, byte for byte (the build writes both)', () => {
    expect(REDUCE_PTX === readFileSync(new URL('../../../src/kernels/reduce.ptx', import.meta.url), 'utf8')).toBe(true);
    expect(reducePtx()).toBe(REDUCE_PTX); // inflated once
    for (const text of [REDUCE_PTX, FILL_PTX]) expect(text).toMatch(/^\.version 8\.0$/m);
  });
});

describe('ptxWithEntries', () => {
  it("cuts reduce.ptx.ts into one module per dtype: the header, the .funcs its entries call, that dtype's entries whole, nothing else", () => {
    const first = REDUCE_PTX.indexOf('\t// .globl');
    const header = REDUCE_PTX.slice(0, first);
    const prefix = header.slice(0, header.search(/^\.func/m));
    const funcs = header.slice(prefix.length).split(/(?=^\.func)/m);
    const nameOf = (f: string) => /(\w+)\(/.exec(f.slice(f.indexOf(')') + 1))?.[1] ?? /^\.func\s+(\w+)\(/.exec(f)?.[1];
    let entries = '';
    for (const dtype of DTYPES) {
      const ptx = dtypePtx(dtype);
      expect(ptx.startsWith(prefix)).toBe(true);
      expect(entriesOf(ptx)).toEqual(REDUCE_ENTRIES.filter((e) => e.endsWith(`_${dtype}`)));
      expect(entriesOf(ptx)).toHaveLength(6);
      const body = ptx.slice(ptx.indexOf('\t// .globl'));
      expect(REDUCE_PTX.includes(body)).toBe(true);
      entries += body;
      // The .funcs kept are the header's, whole and in order: exactly those called in the cut.
      const kept = ptx.slice(prefix.length, ptx.length - body.length);
      const keptFuncs = funcs.filter((f) => kept.includes(f));
      expect(keptFuncs.join('')).toBe(kept);
      const called = new Set([...ptx.matchAll(/call\.uni[^;]*?\s(_Z\w+),/g)].map((m) => m[1]));
      expect(new Set(keptFuncs.map(nameOf))).toEqual(called);
    }
    expect(entries.length).toBe(REDUCE_PTX.length - first); // every entry in exactly one cut
    // Only the fp8 cuts carry the fp8 conversions.
    expect(dtypePtx('f32')).not.toMatch(/f8_store|f8x4_/);
    expect(dtypePtx('f8e4m3')).toMatch(/f8x4_load/);
  });

  it('each cut loads on the simulated driver, which finds its entries', () => {
    const d = new SimulatedCudaDriver();
    d.init();
    d.setDevice(0);
    for (const dtype of DTYPES) {
      const { module } = d.moduleLoadData(dtypePtx(dtype));
      expect(() => d.moduleGetFunction(module, `smcuda_oneshot_${dtype}`)).not.toThrow();
      expect(() => d.moduleGetFunction(module, `smcuda_oneshot_${dtype === 'f32' ? 'f64' : 'f32'}`)).toThrow();
      d.moduleUnload(module);
    }
  });

  it('keeps a .func the kept entries call (before the first entry), directly or through another, and no other; refuses module-scope variables and a .func between entries', () => {
    const head = '.version 8.0\n.target sm_75\n.address_size 64\n';
    const entry = (n: string, call = '') => `\t// .globl\t${n}\n\n.visible .entry ${n}(\n)\n{\n${call}\tret;\n}\n`;
    expect(entriesOf(ptxWithEntries(head + entry('a_f32') + entry('a_f64'), (e) => e.endsWith('f64')))).toEqual(['a_f64']);
    const shared = '.func helper()\n{\n\tret;\n}\n';
    const ptx = head + shared + entry('a_f32', '\tcall.uni helper, ();\n') + entry('a_f64', '\tcall.uni helper, ();\n');
    for (const keep of ['a_f32', 'a_f64']) expect(ptxWithEntries(ptx, (e) => e === keep)).toBe(head + shared + entry(keep, '\tcall.uni helper, ();\n'));
    // inner is called through outer only; unused is called by nobody kept
    const inner = '.func  (.param .b32 func_retval0) inner(\n\t.param .b32 inner_param_0\n)\n{\n\tret;\n}\n';
    const outer = '.func outer()\n{\n\tcall.uni (retval0), inner, (x);\n\tret;\n}\n';
    const unused = '.func unused()\n{\n\tret;\n}\n';
    const three = head + inner + unused + outer + entry('b_f32', '\tcall.uni outer, ();\n') + entry('b_u8', '\tcall.uni unused, ();\n');
    expect(ptxWithEntries(three, (e) => e === 'b_f32')).toBe(head + inner + outer + entry('b_f32', '\tcall.uni outer, ();\n'));
    expect(ptxWithEntries(three, (e) => e === 'b_u8')).toBe(head + unused + entry('b_u8', '\tcall.uni unused, ();\n'));
    expect(ptxWithEntries(head + shared + entry('c'), () => true)).toBe(head + entry('c'));
    expect(() => ptxWithEntries(`${head}.global .align 4 .u32 g;\n${entry('a')}`, () => true)).toThrow(/module-scope/);
    expect(() => ptxWithEntries(`${head}${entry('a')}.func helper()\n{\n\tret;\n}\n`, () => true)).toThrow(/\.func/);
    expect(() => ptxWithEntries(head, () => true)).toThrow(/markers/);
  });
});
