/**
 * FlowControl as a model (src/flow-control.ts): a sender and a receiver
 * joined by CREDIT, under any interleaving of sends and receives. What the
 * receiver holds unread never exceeds maxUnreadBytes plus one message;
 * messages go in send order; and once the receiver reads everything, no send
 * is left waiting (no deadlock, whatever the sizes, even larger than the window).
 */
import { fc, test } from '@fast-check/vitest';
import { expect } from 'vitest';
import { FlowControl } from '../../../src/flow-control.js';
import { MESSAGE_COST } from '../../../src/wire/frames.js';

const flush = async () => {
  for (let i = 0; i < 5; i++) await Promise.resolve();
};

test.prop(
  [
    fc.integer({ min: 64 << 10, max: 1 << 20 }),
    fc.array(fc.oneof(fc.record({ send: fc.oneof(fc.integer({ min: 0, max: 300_000 }), fc.integer({ min: 0, max: 3 << 20 })) }), fc.constant({ recv: true })), {
      maxLength: 200,
    }),
  ],
  { numRuns: 200 },
)('bounded, in order, and never stuck', async (max, ops) => {
  let sender!: FlowControl;
  const receiver = new FlowControl(max, (consumed) => queueMicrotask(() => sender.credit(consumed)));
  sender = new FlowControl(max, () => {});
  const inbox: { id: number; n: number }[] = [];
  const got: number[] = [];
  let held = 0;
  let largest = 0;
  let next = 0;
  const deliver = (id: number, n: number) => {
    sender.charge(n);
    inbox.push({ id, n });
    held += n + MESSAGE_COST;
    expect(held).toBeLessThanOrEqual(max + largest + MESSAGE_COST);
  };
  const settled: Promise<void>[] = [];
  const recvOne = () => {
    const m = inbox.shift();
    if (!m) return;
    held -= m.n + MESSAGE_COST;
    got.push(m.id);
    receiver.received(m.n);
  };
  for (const op of ops) {
    if ('send' in op) {
      const id = next++;
      const n = op.send;
      largest = Math.max(largest, n);
      if (sender.mayGo(n)) deliver(id, n);
      else settled.push(sender.wait({ inline: () => n, go: async () => deliver(id, n) }, undefined, () => new Error('aborted')));
    } else {
      recvOne();
    }
    await flush();
  }
  // the receiver reads everything: every send goes
  for (let i = 0; i < 10_000 && (inbox.length > 0 || sender.waiting > 0); i++) {
    recvOne();
    await flush();
  }
  expect(sender.waiting).toBe(0);
  await Promise.all(settled);
  expect(got).toEqual(Array.from({ length: next }, (_, i) => i));
});

test('hold(): every send queues, in order, until release()', async () => {
  const sender = new FlowControl(1 << 20, () => {});
  const sent: number[] = [];
  expect(sender.mayGo(0)).toBe(true);
  sender.hold();
  expect(sender.mayGo(0)).toBe(false);
  const waits = [0, 1, 2].map((id) => sender.wait({ inline: () => 0, go: async () => void sent.push(id) }, undefined, () => new Error('aborted')));
  await flush();
  expect(sent).toEqual([]);
  expect(sender.waiting).toBe(3);
  sender.release();
  await Promise.all(waits);
  expect(sent).toEqual([0, 1, 2]);
  expect(sender.mayGo(0)).toBe(true);
});
