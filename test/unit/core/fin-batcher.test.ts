/** FinBatcher (src/fin-batcher.ts): FIN OKs of one synchronous run leave as one FINS frame. */
import { describe, expect, it } from 'vitest';
import { FinBatcher } from '../../../src/fin-batcher.js';
import { FinStatus, type Frame, FrameType, MAX_FINS } from '../../../src/wire/frames.js';

function batcher(enabled: boolean, open = () => true) {
  const sent: Frame[] = [];
  return { sent, fins: new FinBatcher(enabled, (f) => void sent.push(f), open) };
}

describe('FinBatcher', () => {
  it('without FINS, each FIN OK leaves at once', () => {
    const { sent, fins } = batcher(false);
    fins.ok(1);
    fins.ok(2);
    expect(sent).toEqual([1, 2].map((seq) => ({ type: FrameType.FIN, seq, status: FinStatus.OK, message: '' })));
  });

  it('with FINS, one run leaves as one frame in a microtask (a lone FIN as a FIN), cut at MAX_FINS', async () => {
    const { sent, fins } = batcher(true);
    fins.ok(1);
    fins.ok(2);
    expect(sent).toEqual([]);
    await Promise.resolve();
    expect(sent).toEqual([{ type: FrameType.FINS, seqs: [1, 2] }]);
    fins.ok(3);
    await Promise.resolve();
    expect(sent[1]).toEqual({ type: FrameType.FIN, seq: 3, status: FinStatus.OK, message: '' });
    for (let i = 0; i < MAX_FINS + 1; i++) fins.ok(100 + i);
    await Promise.resolve();
    expect(sent.slice(2).map((f) => (f.type === FrameType.FINS ? f.seqs.length : 1))).toEqual([MAX_FINS, 1]);
  });

  it('flush sends at once, and nothing goes once the endpoint is closed', async () => {
    let open = true;
    const { sent, fins } = batcher(true, () => open);
    fins.ok(1);
    fins.flush();
    expect(sent).toHaveLength(1);
    fins.ok(2);
    open = false;
    await Promise.resolve();
    expect(sent).toHaveLength(1);
  });
});
