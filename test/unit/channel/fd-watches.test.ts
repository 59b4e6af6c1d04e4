/**
 * channel/fd-watches.ts: the descriptor sockets' watches are remembered from
 * start to stop, so that the process's 'exit' stops those left (what that
 * prevents, an abort in Node's teardown, is shown by
 * test/integration/idle-exit.test.ts "exits with code 0 every time").
 */
import { describe, expect, it } from 'vitest';
import { liveWatches, startWatch, stopWatch } from '../../../src/channel/fd-watches.js';

function fakeNative() {
  const started: number[] = [];
  const stopped: object[] = [];
  return {
    started,
    stopped,
    fdWatchStart: (fd: number) => {
      started.push(fd);
      return { fd };
    },
    fdWatchStop: (w: object) => void stopped.push(w),
  };
}

describe('fd watches', () => {
  it('a started watch is live until stopped, and stopped through the addon', () => {
    const native = fakeNative();
    const before = liveWatches();
    const w = startWatch(native, 7, () => {});
    expect(native.started).toEqual([7]);
    expect(liveWatches()).toBe(before + 1);
    stopWatch(native, w);
    expect(native.stopped).toEqual([w]);
    expect(liveWatches()).toBe(before);
  });

  it('a watch the addon refuses to start is not remembered', () => {
    const native = {
      fdWatchStart: (): object => {
        throw new Error('EBADF');
      },
      fdWatchStop: () => {},
    };
    const before = liveWatches();
    expect(() => startWatch(native, -1, () => {})).toThrow('EBADF');
    expect(liveWatches()).toBe(before);
  });
});
