/**
 * RecencyMap: the handle pool's order of last use. Checked against a plain
 * model (an array in order of use) over random sequences of get, set and
 * delete, including touches of the newest key, which move nothing.
 */
import { fc, test } from '@fast-check/vitest';
import { expect } from 'vitest';
import { RecencyMap } from '../../../cache/recency.js';

const op = fc.oneof(
  fc.record({ t: fc.constant('get' as const), k: fc.integer({ min: 0, max: 5 }) }),
  fc.record({ t: fc.constant('set' as const), k: fc.integer({ min: 0, max: 5 }), v: fc.integer({ min: 0, max: 3 }) }),
  fc.record({ t: fc.constant('delete' as const), k: fc.integer({ min: 0, max: 5 }) }),
);

test.prop([fc.array(op, { maxLength: 60 })])('order of use, values and disposals match a model', (ops) => {
  const disposed: string[] = [];
  const m = new RecencyMap<number, string>((v) => disposed.push(v));
  let model: Array<[number, string]> = []; // least recently used first
  const modelDisposed: string[] = [];
  ops.forEach((o, i) => {
    const at = model.findIndex(([k]) => k === o.k);
    if (o.t === 'get') {
      const got = m.get(o.k);
      if (at < 0) expect(got).toBeUndefined();
      else {
        const [e] = model.splice(at, 1);
        model.push(e!);
        expect(got).toBe(e![1]);
      }
    } else if (o.t === 'set') {
      const value = `${o.v}@${i}`;
      m.set(o.k, value);
      if (at >= 0) modelDisposed.push(model.splice(at, 1)[0]![1]);
      model.push([o.k, value]);
    } else {
      expect(m.delete(o.k)).toBe(at >= 0);
      if (at >= 0) modelDisposed.push(model.splice(at, 1)[0]![1]);
    }
    expect([...m.rvalues()]).toEqual(model.map(([, v]) => v));
    expect([...m.values()]).toEqual(model.map(([, v]) => v).reverse());
    expect(m.size).toBe(model.length);
  });
  expect(disposed).toEqual(modelDisposed);
});
