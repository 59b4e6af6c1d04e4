/**
 * The addon's own argument checks (issue 24, item 7): sizes and masks a
 * caller passes are refused with a JS exception before any cast or system
 * call (NaN, negatives, fractions, doubles past 2^53), never undefined
 * behaviour or a silent truncation. No GPU needed: these calls are POSIX only.
 */
import { describe, expect, it } from 'vitest';
import { loadAddon } from '../../../src/cuda/addon.js';
import type { NativeAddon } from '../../../src/cuda/native-addon.js';

let addon: NativeAddon | undefined;
try {
  addon = loadAddon();
} catch {
  addon = undefined;
}

describe.skipIf(addon === undefined)('native argument checks', () => {
  const a = addon!;

  it('fdResize refuses NaN, negative, fractional and huge sizes, and a size that is not a number', () => {
    const fd = a.memfdCreate('smcuda-test-resize', 4096);
    try {
      for (const bad of [Number.NaN, -1, -4096, 1.5, 1e300, Number.POSITIVE_INFINITY]) {
        expect(() => a.fdResize(fd, bad), String(bad)).toThrow(RangeError);
      }
      expect(() => a.fdResize(fd, '4096' as unknown as number)).toThrow(TypeError);
      expect(a.fdSize(fd)).toBe(4096); // untouched by the refused calls
      a.fdResize(fd, 8192);
      expect(a.fdSize(fd)).toBe(8192);
    } finally {
      a.fdClose(fd);
    }
  });

  it('memfdCreate refuses fractional and huge sizes', () => {
    for (const bad of [Number.NaN, -1, 0.5, 2 ** 60]) expect(() => a.memfdCreate('smcuda-test-bad', bad), String(bad)).toThrow(RangeError);
  });

  it('shmCreate refuses a double past 2^53 before its cast (it was undefined behaviour), and NaN and negatives', () => {
    const name = `/smcuda-test-args-${process.pid}`;
    for (const bad of [1e300, 2 ** 63, 2 ** 64, Number.POSITIVE_INFINITY, Number.NaN, -1, 1.5]) {
      expect(() => a.shmCreate(name, bad), String(bad)).toThrow(RangeError);
    }
    // Nothing was created by the refused calls.
    expect(() => a.shmOpen(name)).toThrow();
  });

  it('fdWatchArm checks its events mask and ref flag', () => {
    const [x, y] = a.fdSocketPair();
    const watch = a.fdWatchStart(x, () => {});
    try {
      expect(() => a.fdWatchArm(watch, 'readable' as unknown as number, false)).toThrow(TypeError);
      expect(() => a.fdWatchArm(watch, 1, 'yes' as unknown as boolean)).toThrow(TypeError);
      expect(() => a.fdWatchArm(watch, 1, undefined as unknown as boolean)).toThrow(TypeError);
      for (const bad of [2, 8, -1, 1.5, Number.NaN, 2 ** 40]) expect(() => a.fdWatchArm(watch, bad, false), String(bad)).toThrow(RangeError);
      expect(() => a.fdWatchArm({}, 1, false)).toThrow();
      a.fdWatchArm(watch, 1, false); // a good call still works
      a.fdWatchArm(watch, 0, false);
    } finally {
      a.fdWatchStop(watch);
      a.fdClose(x);
      a.fdClose(y);
    }
  });
});
