// Counts and times every NativeCudaDriver call of a process, and writes the tally at exit: how the 8 B
// ping-pong's regression was found (one cuMemGetAddressRange per receive, 1.1-1.4 µs, that the tree before
// did not make). Preload it into every process of a run, workers included (they inherit NODE_OPTIONS):
//   OUT=/tmp/tally TAG=after NODE_OPTIONS=--import=$PWD/test/gpu/driver-tally.mjs node dist/src/cli/main.js bench ...
// Each process writes $OUT/calls-<TAG>-<pid>.json: { argv, cwd, calls: { method: [count, mean µs] } }, the
// dist/ of its working directory patched (run it from the tree being measured). Not a test.
import { writeFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

const mod = await import(pathToFileURL(`${process.cwd()}/dist/src/cuda/native-driver.js`).href);
const proto = mod.NativeCudaDriver.prototype;
const stats = new Map();
for (const name of Object.getOwnPropertyNames(proto)) {
  const d = Object.getOwnPropertyDescriptor(proto, name);
  if (name === 'constructor' || typeof d.value !== 'function') continue;
  const f = d.value;
  proto[name] = function (...args) {
    const t0 = process.hrtime.bigint();
    try {
      return f.apply(this, args);
    } finally {
      const e = stats.get(name) ?? [0, 0n];
      e[0]++;
      e[1] += process.hrtime.bigint() - t0;
      stats.set(name, e);
    }
  };
}
process.on('exit', () => {
  if (stats.size === 0) return;
  const calls = Object.fromEntries([...stats].sort((a, b) => b[1][0] - a[1][0]).map(([k, [n, t]]) => [k, [n, +(Number(t) / 1000 / n).toFixed(2)]]));
  writeFileSync(
    `${process.env.OUT ?? '.'}/calls-${process.env.TAG ?? 'run'}-${process.pid}.json`,
    JSON.stringify({ argv: process.argv.slice(1), cwd: process.cwd(), calls }),
  );
});
