#!/usr/bin/env bash
# Dev only: with SEGV_TRACE=1 every addon call of the native driver writes "TRACE <pid> <name>" to stderr first.
f=dist/src/cuda/native-driver.js
grep -q traceAddon $f && exit 0
sed -i 's/this.#addon ??= loadAddon();/this.#addon ??= (process.env.SEGV_TRACE ? traceAddon(loadAddon()) : loadAddon());/' $f
echo >> $f
cat >> $f <<'JS'
function traceAddon(a) {
    const fs = process.getBuiltinModule('fs');
    const wrapped = new Map();
    return new Proxy(a, { get(t, k) {
        const v = t[k];
        if (typeof v !== 'function') return v;
        let w = wrapped.get(k);
        if (w === undefined) wrapped.set(k, (w = function (...args) { fs.writeSync(2, `TRACE ${process.pid} ${String(k)} ${args.map((x) => typeof x === 'bigint' || typeof x === 'number' ? String(x) : typeof x).join(' ')}\n`); return v.apply(t, args); }));
        return w;
    } });
}
JS
