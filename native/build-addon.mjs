#!/usr/bin/env node
// Builds the native addon, or decides that no build is needed.
//
//   node native/build-addon.mjs               the package's install step: nothing to do when a prebuilt
//                                             addon in prebuilds/ fits this machine (and this is not a
//                                             git checkout, nor SMCUDA_BUILD_FROM_SOURCE=1); otherwise
//                                             builds from source
//   node native/build-addon.mjs --from-source always builds build/Release/smcuda.node (cmake >= 3.15, g++)
//   node native/build-addon.mjs --prebuild [--arch x64|arm64]
//                                             builds prebuilds/linux-<arch>/smcuda.napi.glibc.node with
//                                             libstdc++ linked in (arm64: with Debian's aarch64-linux-gnu-g++)
//                                             and writes the glibc it needs (from objdump -T) beside it
//
// Plain JavaScript, no dependency at all, so that it runs at install time before anything is
// compiled. A source build needs cmake-js and node-addon-api: dev dependencies (a checkout has them),
// which an installed package lacks unless its user adds them (as sharp asks for node-gyp): the
// prebuilt addons serve everyone else, and their node_modules stay small.
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const args = process.argv.slice(2);

function cmakeJs() {
  const req = createRequire(join(root, 'package.json'));
  const missing = ['cmake-js', 'node-addon-api'].filter((m) => {
    try {
      req.resolve(m === 'cmake-js' ? 'cmake-js/bin/cmake-js' : m);
      return false;
    } catch {
      return true;
    }
  });
  if (missing.length > 0) {
    fail(
      `building the native addon from source needs ${missing.join(' and ')}, which smcuda does not install for everyone ` +
        `(the prebuilt addons in prebuilds/ need nothing). Add them to your project, then rebuild:\n` +
        `  npm install --save-dev cmake-js node-addon-api && npm rebuild smcuda`,
    );
  }
  return req.resolve('cmake-js/bin/cmake-js');
}

function fail(message) {
  console.error(`smcuda: ${message}`);
  process.exit(1);
}

function run(cmd, cmdArgs, cwd = root) {
  const r = spawnSync(cmd, cmdArgs, { cwd, stdio: 'inherit' });
  if (r.error) return { ok: false, why: r.error.message };
  return { ok: r.status === 0, why: `exited with ${r.signal ?? r.status}` };
}

function has(tool) {
  return spawnSync(tool, ['--version'], { stdio: 'ignore' }).status === 0;
}

function buildFromSource() {
  const missing = ['cmake', process.env.CXX || 'g++'].filter((t) => !has(t));
  if (missing.length > 0) {
    fail(
      `cannot build the native addon from source: ${missing.join(' and ')} not found on PATH.\n` +
        `  Install them (Debian/Ubuntu: apt-get install -y cmake g++; Fedora/RHEL: dnf install -y cmake gcc-c++), then run:\n` +
        `  node ${relative(process.cwd(), join(root, 'native', 'build-addon.mjs')) || 'native/build-addon.mjs'} --from-source`,
    );
  }
  const r = run(process.execPath, [cmakeJs(), 'compile', '--log-level', 'warn']);
  if (!r.ok) fail(`building the native addon failed (cmake-js ${r.why}); the compiler's messages are above.`);
}

/** Highest GLIBC_x.y version the binary references (objdump -T), or undefined without objdump. */
function glibcNeeded(file, objdump) {
  const r = spawnSync(objdump, ['-T', file], { encoding: 'utf8' });
  if (r.status !== 0) return undefined;
  const versions = [...r.stdout.matchAll(/\(GLIBC_(\d+)\.(\d+)(?:\.\d+)?\)/g)].map((m) => [Number(m[1]), Number(m[2])]);
  versions.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  const top = versions.at(-1);
  const cxx = /\(GLIBCXX_/.test(r.stdout);
  if (cxx) fail(`${file} still references libstdc++ symbols (GLIBCXX_*): the prebuild must link it statically.`);
  return top ? `${top[0]}.${top[1]}` : undefined;
}

function prebuild(arch) {
  const cross = arch === 'arm64' && process.arch !== 'arm64';
  const out = join(root, 'build', `prebuild-linux-${arch}`);
  const cmakeArgs = ['compile', '--log-level', 'warn', '--out', out, '--CDSMCUDA_STATIC_LIBSTDCXX=ON'];
  if (cross) {
    if (!has('aarch64-linux-gnu-g++')) fail('the arm64 prebuild needs a cross compiler: apt-get install -y g++-aarch64-linux-gnu');
    cmakeArgs.push('--arch', 'arm64', '--CDCMAKE_SYSTEM_NAME=Linux', '--CDCMAKE_SYSTEM_PROCESSOR=aarch64', '--CDCMAKE_CXX_COMPILER=aarch64-linux-gnu-g++');
  }
  const r = run(process.execPath, [cmakeJs(), ...cmakeArgs]);
  if (!r.ok) fail(`the ${arch} prebuild failed (cmake-js ${r.why})`);
  const dir = join(root, 'prebuilds', `linux-${arch}`);
  mkdirSync(dir, { recursive: true });
  const dest = join(dir, 'smcuda.napi.glibc.node');
  copyFileSync(join(out, 'Release', 'smcuda.node'), dest);
  run(cross ? 'aarch64-linux-gnu-strip' : 'strip', ['--strip-unneeded', dest]);
  const glibc = glibcNeeded(dest, cross ? 'aarch64-linux-gnu-objdump' : 'objdump');
  if (!glibc) fail(`could not read the glibc versions ${dest} needs (objdump -T)`);
  writeFileSync(
    join(dir, 'smcuda.json'),
    `${JSON.stringify({ file: 'smcuda.napi.glibc.node', platform: 'linux', arch, libc: 'glibc', glibc, napi: 8 }, null, 2)}\n`,
  );
  console.log(`${relative(root, dest)}: needs glibc >= ${glibc}`);
}

if (args[0] === '--prebuild') {
  const i = args.indexOf('--arch');
  const arch = i >= 0 ? args[i + 1] : process.arch;
  if (arch !== 'x64' && arch !== 'arm64') fail(`--arch must be x64 or arm64, got ${arch}`);
  prebuild(arch);
} else if (args[0] === '--from-source') {
  buildFromSource();
} else if (args.length > 0) {
  fail(`unknown arguments: ${args.join(' ')} (expected nothing, --from-source or --prebuild [--arch x64|arm64])`);
} else {
  // A contributor's checkout builds its own addon (the tests then run what the sources say), as does
  // SMCUDA_BUILD_FROM_SOURCE=1. Elsewhere the package's own matching rule decides (dist/ ships in the
  // package; a source tree without dist/ has not compiled it yet, and builds).
  const fromSource = existsSync(join(root, '.git')) || process.env.SMCUDA_BUILD_FROM_SOURCE === '1';
  const matcher = join(root, 'dist', 'src', 'cuda', 'prebuild.js');
  const fit = fromSource || !existsSync(matcher) ? undefined : (await import(pathToFileURL(matcher).href)).prebuildFor(root);
  if (fit?.file) {
    console.log(`smcuda: using the prebuilt addon ${relative(root, fit.file)}`);
  } else {
    if (fit?.why) console.log(`smcuda: no prebuilt addon fits (${fit.why}); building from source`);
    buildFromSource();
  }
}
