/**
 * ptxWithEntries (src/kernels/ptx-entries.ts): reduce.ptx.ts cut per dtype
 * keeps the header and exactly that dtype's entries, whole; the simulated
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
  it("cuts reduce.ptx.ts into one module per dtype: the header, that dtype's entries whole, nothing else", () => {
    const header = REDUCE_PTX.slice(0, REDUCE_PTX.indexOf('\t// .globl'));
    let total = header.length;
    for (const dtype of DTYPES) {
      const ptx = dtypePtx(dtype);
      expect(ptx.startsWith(header)).toBe(true);
      expect(entriesOf(ptx)).toEqual(REDUCE_ENTRIES.filter((e) => e.endsWith(`_${dtype}`)));
      expect(entriesOf(ptx)).toHaveLength(5);
      total += ptx.length - header.length;
    }
    expect(total).toBe(REDUCE_PTX.length); // every entry in exactly one cut
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

  it('keeps a .func the entries share (before the first entry) in every cut; refuses module-scope variables and a .func between entries', () => {
    const head = '.version 8.0\n.target sm_75\n.address_size 64\n';
    const entry = (n: string) => `\t// .globl\t${n}\n\n.visible .entry ${n}(\n)\n{\n\tret;\n}\n`;
    expect(entriesOf(ptxWithEntries(head + entry('a_f32') + entry('a_f64'), (e) => e.endsWith('f64')))).toEqual(['a_f64']);
    const shared = '.func helper()\n{\n\tret;\n}\n';
    for (const keep of ['a_f32', 'a_f64']) expect(ptxWithEntries(head + shared + entry('a_f32') + entry('a_f64'), (e) => e === keep)).toBe(head + shared + entry(keep));
    expect(() => ptxWithEntries(head + '.global .align 4 .u32 g;\n' + entry('a'), () => true)).toThrow(/module-scope/);
    expect(() => ptxWithEntries(head + entry('a') + '.func helper()\n{\n\tret;\n}\n', () => true)).toThrow(/\.func/);
    expect(() => ptxWithEntries(head, () => true)).toThrow(/markers/);
  });
});
