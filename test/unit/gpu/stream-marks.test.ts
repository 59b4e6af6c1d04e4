/**
 * StreamMarks: the marks of one stream queued in one turn share an event
 * (recorded again after each call), each is reached once its stream ran it,
 * and a call on another stream is ordered after the newest mark.
 */
import { describe, expect, it, vi } from 'vitest';
import { simDevice } from '../../helpers/sim-device.js';
import { StreamMarks } from '../../../src/gpu/stream-marks.js';

describe('stream marks', () => {
  it('100 marks queued in one turn on one stream: one event, 100 records, every mark reached', async () => {
    const drv = simDevice();
    const marks = new StreamMarks(drv);
    const s = drv.streamCreate();
    const create = vi.spyOn(drv, 'eventCreate');
    const record = vi.spyOn(drv, 'eventRecord');
    const reached: Promise<void>[] = [];
    for (let i = 0; i < 100; i++) reached.push(marks.mark(s));
    expect(create).toHaveBeenCalledTimes(1);
    expect(record).toHaveBeenCalledTimes(100);
    await Promise.all(reached);
    expect(marks.inFlight).toBe(0);
    // The next turn reuses the event of the reached marks.
    await marks.mark(s);
    expect(create).toHaveBeenCalledTimes(1);
    marks.destroy();
    drv.streamDestroy(s);
  });

  it('a mark is not reached before its stream ran the work queued before it', async () => {
    const drv = simDevice();
    const marks = new StreamMarks(drv);
    const s = drv.streamCreate();
    const flag = drv.memAlloc(8);
    drv.memsetD8(flag, 0, 8);
    // The stream waits on a flag nobody has written yet: the mark behind it must wait too.
    drv.streamWaitValue64(s, flag, 1n, 'geq');
    let done = false;
    const m = marks.mark(s).then(() => (done = true));
    await new Promise((r) => setTimeout(r, 50));
    expect(done).toBe(false);
    drv.memcpyHtoD(flag, new Uint8Array([1, 0, 0, 0, 0, 0, 0, 0]));
    await m;
    expect(done).toBe(true);
    marks.destroy();
    drv.streamDestroy(s);
  });

  it('a call on another stream waits for the newest mark, recorded after the last call', () => {
    const drv = simDevice();
    const marks = new StreamMarks(drv);
    const a = drv.streamCreate();
    const b = drv.streamCreate();
    const wait = vi.spyOn(drv, 'streamWaitEvent');
    void marks.mark(a);
    void marks.mark(a);
    marks.orderAfterLast(b);
    expect(wait).toHaveBeenCalledTimes(1);
    expect(wait.mock.calls[0]![0]).toBe(b);
    marks.orderAfterLast(a); // same stream: nothing to wait for
    expect(wait).toHaveBeenCalledTimes(1);
  });
});
