// Self time by function in a .cpuprofile: node prof-top.mjs file [top]
import { readFileSync } from 'node:fs';
const p = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const top = Number(process.argv[3] ?? 30);
const byId = new Map(p.nodes.map((n) => [n.id, n]));
const self = new Map();
const dt = p.timeDeltas;
let total = 0;
p.samples.forEach((id, i) => {
  const n = byId.get(id);
  const f = n.callFrame;
  const key = `${f.functionName || '(anon)'} ${f.url.split('/').slice(-2).join('/')}:${f.lineNumber + 1}`;
  const d = dt[i] ?? 0;
  total += d;
  self.set(key, (self.get(key) ?? 0) + d);
});
const rows = [...self.entries()].sort((a, b) => b[1] - a[1]).slice(0, top);
console.log('total ms', (total / 1000).toFixed(1));
for (const [k, v] of rows) console.log((v / 1000).toFixed(1).padStart(8), ((100 * v) / total).toFixed(1).padStart(5) + '%', k);
