// Summarises a V8 CPU profile (.cpuprofile, as written by stream.mjs or pingpong.mjs with PROF,
// or by node --cpu-prof): total sampled ms, then a self-time table and an inclusive-time table
// (a function's own samples plus those of everything it called; a recursive function counts once
// per sample), each as % of the total, by "function file:line" (the last two path parts of the
// file; the line, 1-based, is where the function starts; native frames show :0).
//
//   node profile-summary.mjs FILE.cpuprofile [--self N] [--inclusive N] [--filter REGEX]
//
//   --self N       rows of the self-time table (default 40)
//   --inclusive N  rows of the inclusive-time table (default 60)
//   --filter REGEX keep only rows whose "function file:line" matches (both tables)
//
// Reading it: V8 names all time spent in a native addon after one function of that addon (in
// docs/bench/profile-*.txt "cuMemcpyHtoDAsync" or "peerCredentials", whichever the addon's
// functions it happened to pick): read that row as "inside the CUDA driver", whatever its name.
// "(idle)", "(program)" and "(garbage collector)" are V8's own; "dispatch" and "post" under
// "prof" are the inspector's cost of profiling. (The tables in docs/bench/profile-*.txt came from
// the two scripts merged here; their self tables printed 0-based lines, one less than here.)
import { readFileSync } from 'node:fs';

const usage = 'usage: node profile-summary.mjs FILE.cpuprofile [--self N] [--inclusive N] [--filter REGEX]';
const args = process.argv.slice(2);
let file, selfRows = 40, inclRows = 60, filt = null;
for (let i = 0; i < args.length; i++) {
  const a = args[i];
  if (a === '--self') selfRows = Number(args[++i]);
  else if (a === '--inclusive') inclRows = Number(args[++i]);
  else if (a === '--filter') filt = new RegExp(args[++i]);
  else if (a === '-h' || a === '--help') { console.log(usage); process.exit(0); }
  else if (!file && !a.startsWith('--')) file = a;
  else { console.error(usage); process.exit(2); }
}
if (!file || !(selfRows >= 0) || !(inclRows >= 0)) { console.error(usage); process.exit(2); }

const p = JSON.parse(readFileSync(file, 'utf8'));
const byId = new Map(p.nodes.map((n) => [n.id, n]));
const parent = new Map();
for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
// sampled time (µs) by node: a sample's delta is charged to the node it hit
const dt = new Map();
for (let i = 0; i < p.samples.length; i++) dt.set(p.samples[i], (dt.get(p.samples[i]) ?? 0) + (p.timeDeltas[i] ?? 0));
const key = (n) => `${n.callFrame.functionName || '(anon)'} ${n.callFrame.url.split('/').slice(-2).join('/')}:${n.callFrame.lineNumber + 1}`;

const self = new Map(), incl = new Map();
let total = 0;
for (const [id, t] of dt) {
  total += t;
  const k = key(byId.get(id));
  self.set(k, (self.get(k) ?? 0) + t);
  const seen = new Set();
  for (let cur = id; cur !== undefined; cur = parent.get(cur)) {
    const ck = key(byId.get(cur));
    if (!seen.has(ck)) { seen.add(ck); incl.set(ck, (incl.get(ck) ?? 0) + t); }
  }
}
const table = (m, rows) => {
  for (const [k, v] of [...m].sort((a, b) => b[1] - a[1]).filter(([k]) => !filt || filt.test(k)).slice(0, rows)) {
    console.log((v / total * 100).toFixed(1).padStart(5), '%', k);
  }
};
console.log('total ms', (total / 1000).toFixed(0));
table(self, selfRows);
console.log('--- inclusive');
table(incl, inclRows);
