/**
 * The persistent-transfer machine (machines/persistent.ts): its states and
 * the only ways between them; a closed transfer stays closed.
 */
import { describe, expect, it } from 'vitest';
import { createActor } from 'xstate';
import { PERSISTENT_STATES, persistentMachine, type PersistentMachineEvent } from '../../../machines/persistent.js';

function run(events: PersistentMachineEvent[]) {
  const a = createActor(persistentMachine, { input: { id: 1, role: 'send', peerId: 'p' } }).start();
  const seen = [a.getSnapshot().value as string];
  for (const e of events) {
    a.send(e);
    seen.push(a.getSnapshot().value as string);
  }
  return { seen, snap: a.getSnapshot() };
}

describe('persistent transfer machine', () => {
  it('has the five states', () => {
    expect(Object.keys(persistentMachine.config.states!)).toEqual([...PERSISTENT_STATES]);
  });

  it('registered → armed → replaying (counting host starts) → armed', () => {
    const { seen, snap } = run([{ type: 'MATCHED' }, { type: 'START' }, { type: 'START' }, { type: 'IDLE' }, { type: 'BUSY' }, { type: 'IDLE' }]);
    expect(seen).toEqual(['registered', 'armed', 'replaying', 'replaying', 'armed', 'replaying', 'armed']);
    expect(snap.context.starts).toBe(2);
  });

  it('stuck, then failed: closed with the failure recorded; nothing leaves closed', () => {
    const { seen, snap } = run([
      { type: 'MATCHED' },
      { type: 'START' },
      { type: 'STUCK' },
      { type: 'START' },
      { type: 'FAIL', code: 'SMCUDA_PERSISTENT_STUCK' },
      { type: 'MATCHED' },
      { type: 'START' },
    ]);
    expect(seen).toEqual(['registered', 'armed', 'replaying', 'stuck', 'stuck', 'closed', 'closed', 'closed']);
    expect(snap.context.failure).toBe('SMCUDA_PERSISTENT_STUCK');
    expect(snap.status).toBe('done');
  });

  it('a mismatch fails it before it is armed; a user close ends it without a failure', () => {
    expect(run([{ type: 'FAIL', code: 'SMCUDA_PERSISTENT_MISMATCH' }]).snap.context.failure).toBe('SMCUDA_PERSISTENT_MISMATCH');
    const closed = run([{ type: 'MATCHED' }, { type: 'CLOSE' }]);
    expect(closed.seen.at(-1)).toBe('closed');
    expect(closed.snap.context.failure).toBeUndefined();
  });
});
