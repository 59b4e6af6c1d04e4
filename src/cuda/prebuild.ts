/**
 * Which prebuilt addon in prebuilds/ fits this machine, laid out as prebuildify
 * does: prebuilds/<platform>-<arch>/smcuda.napi.glibc.node (Node-API, so one
 * binary serves every Node.js, Bun and Deno version), with smcuda.json beside
 * it naming the oldest glibc it loads on (found by objdump -T when it was
 * built; native/build-addon.mjs --prebuild). The addon needs no CUDA toolkit,
 * so one binary serves every CUDA machine.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

export interface PrebuildManifest {
  file: string;
  platform: string;
  arch: string;
  libc: 'glibc';
  /** Oldest glibc the binary loads on, e.g. "2.34". */
  glibc: string;
  napi: number;
}

export interface PrebuildMatch {
  /** The binary to load, when one fits. */
  file?: string;
  /** Why none fits (absent when one does). */
  why?: string;
}

/** The C library this process runs on: glibc with its version, or musl (Alpine), or unknown. */
export function runtimeLibc(): { libc: 'glibc'; version: string } | { libc: 'musl' | 'unknown' } {
  const header = (process.report?.getReport() as { header?: { glibcVersionRuntime?: string } } | undefined)?.header;
  if (header?.glibcVersionRuntime) return { libc: 'glibc', version: header.glibcVersionRuntime };
  if (process.platform === 'linux' && ['/lib/ld-musl-x86_64.so.1', '/lib/ld-musl-aarch64.so.1'].some(existsSync)) return { libc: 'musl' };
  return { libc: 'unknown' };
}

function olderThan(a: string, b: string): boolean {
  const [a1 = 0, a2 = 0] = a.split('.').map(Number);
  const [b1 = 0, b2 = 0] = b.split('.').map(Number);
  return a1 < b1 || (a1 === b1 && a2 < b2);
}

export function prebuildFor(root: string, platform: string = process.platform, arch: string = process.arch, libc = runtimeLibc()): PrebuildMatch {
  const dir = join(root, 'prebuilds', `${platform}-${arch}`);
  const manifestPath = join(dir, 'smcuda.json');
  if (!existsSync(manifestPath)) {
    const shipped = existsSync(join(root, 'prebuilds')) ? 'prebuilds/ has linux-x64 and linux-arm64 only' : 'this copy has no prebuilds/ folder';
    return { why: `no prebuilt addon for ${platform}-${arch} (${shipped})` };
  }
  const m = JSON.parse(readFileSync(manifestPath, 'utf8')) as PrebuildManifest;
  if (libc.libc === 'musl') return { why: `the prebuilt addon for ${platform}-${arch} is for glibc, and this system uses musl` };
  if (libc.libc === 'glibc' && olderThan(libc.version, m.glibc)) {
    return { why: `the prebuilt addon for ${platform}-${arch} needs glibc >= ${m.glibc}, and this system has ${libc.version}` };
  }
  const file = join(dir, m.file);
  if (!existsSync(file)) return { why: `${file} is missing` };
  return { file };
}
