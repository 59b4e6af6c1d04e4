/**
 * A fast-check model of the handshake's nonce/HMAC exchange (src/auth),
 * run on the real Handshake class.
 *
 * Honest parties A (pid 100) and B (pid 200) share the job token. An attacker
 * (pid 666, which is what the kernel reports to every connection it opens)
 * does not know it. It opens any number of connections to A and B, sees
 * every frame of any number of honest A↔B connections besides, and sends
 * each victim connection any frame it has seen, from either side, in any
 * order: replays, reflections, relays between its own connections to A and
 * to B, and HELLOs and PROOFs of its own making (any claimed id, pid and
 * nonce it has seen or made up; proofs under guessed tokens). Whatever the
 * interleaving, no victim connection ends authenticated. And honest peers
 * with the same token always authenticate each other, in any interleaving of
 * their two directions.
 */
import { randomBytes } from 'node:crypto';
import { describe, expect } from 'vitest';
import { fc, test } from '@fast-check/vitest';
import { Handshake, type HandshakeStep } from '../../../src/auth/handshake.js';
import { computeProof } from '../../../src/auth/proof.js';
import { decodeFrame, encodeFrame } from '../../../src/wire/codec.js';
import { type Frame, FrameType, type HelloFrame, NONCE_BYTES, PROOF_BYTES, WIRE_VERSION } from '../../../src/wire/frames.js';

const TOKEN = 'the-job-token';
const PARTIES = { A: 100, B: 200 } as const;
type Party = keyof typeof PARTIES;
const ATTACKER_PID = 666;

interface Victim {
  party: Party;
  hs: Handshake;
  state: 'open' | 'closed' | 'authenticated';
}

/** What the attacker holds: every frame it has seen, as bytes off the wire. */
interface World {
  victims: Victim[];
  seen: Uint8Array[];
}

interface Model {
  victims: number;
}

function newHandshake(party: Party, peerPid: number, token = TOKEN): Handshake {
  return new Handshake({ id: party, token, pid: PARTIES[party], peerPid, deviceUuid: '', features: 0 });
}

/** Feeds one frame to a victim as its Transport would: a throw closes the connection. */
function deliver(w: World, v: Victim, bytes: Uint8Array): void {
  if (v.state !== 'open') return;
  let step: HandshakeStep;
  try {
    step = v.hs.receive(decodeFrame(bytes));
  } catch {
    v.state = 'closed';
    return;
  }
  if (step.kind === 'proof') w.seen.push(encodeFrame(step.proof).slice());
  else v.state = 'authenticated';
}

/** The `back`-th most recent of `list` (modulo its length): an attacker's moves mostly aim at what it has just seen. */
function recent<T>(list: T[], back: number): T {
  return list[list.length - 1 - (back % list.length)]!;
}

function hellos(w: World): HelloFrame[] {
  return w.seen.map((b) => decodeFrame(b)).filter((f): f is HelloFrame => f.type === FrameType.HELLO);
}

class OpenConnection implements fc.Command<Model, World> {
  constructor(readonly party: Party) {}
  check = () => true;
  run(m: Model, w: World): void {
    const hs = newHandshake(this.party, ATTACKER_PID);
    w.victims.push({ party: this.party, hs, state: 'open' });
    w.seen.push(encodeFrame(hs.hello).slice());
    m.victims++;
  }
  toString = () => `open(${this.party})`;
}

/** A whole honest A↔B connection, every frame of which the attacker records. */
class Eavesdrop implements fc.Command<Model, World> {
  check = () => true;
  run(_m: Model, w: World): void {
    const a = newHandshake('A', PARTIES.B);
    const b = newHandshake('B', PARTIES.A);
    const pa = a.receive(b.hello);
    const pb = b.receive(a.hello);
    if (pa.kind !== 'proof' || pb.kind !== 'proof') throw new Error('honest HELLO refused');
    expect(a.receive(pb.proof).kind).toBe('authenticated');
    expect(b.receive(pa.proof).kind).toBe('authenticated');
    for (const f of [a.hello, b.hello, pa.proof, pb.proof]) w.seen.push(encodeFrame(f).slice());
  }
  toString = () => 'eavesdrop(A<->B)';
}

/** Any frame seen so far, to any victim: replay, reflection, relay, reordering. */
class Replay implements fc.Command<Model, World> {
  constructor(
    readonly victim: number,
    readonly frame: number,
  ) {}
  check = (m: Readonly<Model>) => m.victims > 0;
  run(_m: Model, w: World): void {
    if (w.seen.length === 0) return;
    deliver(w, w.victims[this.victim % w.victims.length]!, recent(w.seen, this.frame));
  }
  toString = () => `replay(frame -${this.frame + 1} → victim ${this.victim})`;
}

/**
 * A HELLO seen from one side, passed on to a victim with its pid claim set
 * to the attacker's (the kernel tells the victim that pid): a man in the
 * middle relaying one honest side's HELLO to the other.
 */
class RelayHello implements fc.Command<Model, World> {
  constructor(
    readonly victim: number,
    readonly hello: number,
  ) {}
  check = (m: Readonly<Model>) => m.victims > 0;
  run(_m: Model, w: World): void {
    const known = hellos(w);
    if (known.length === 0) return;
    const bytes = encodeFrame({ ...recent(known, this.hello), pid: ATTACKER_PID }).slice();
    w.seen.push(bytes);
    deliver(w, w.victims[this.victim % w.victims.length]!, bytes);
  }
  toString = () => `relayHello(hello -${this.hello + 1} → victim ${this.victim})`;
}

/**
 * The man in the middle as one move: victim j's HELLO to victim i and i's to
 * j (pid claims set to the attacker's), then each one's PROOF to the other.
 * With i = j, a reflection.
 */
class ManInTheMiddle implements fc.Command<Model, World> {
  constructor(
    readonly i: number,
    readonly j: number,
  ) {}
  check = (m: Readonly<Model>) => m.victims > 0;
  run(_m: Model, w: World): void {
    const vi = w.victims[this.i % w.victims.length]!;
    const vj = w.victims[this.j % w.victims.length]!;
    const relay = (from: Victim, to: Victim) => {
      const bytes = encodeFrame({ ...from.hs.hello, pid: ATTACKER_PID }).slice();
      w.seen.push(bytes);
      const before = w.seen.length;
      deliver(w, to, bytes);
      return w.seen.length > before ? w.seen[w.seen.length - 1]! : undefined; // the PROOF it answered with
    };
    const proofOfI = relay(vj, vi);
    const proofOfJ = relay(vi, vj);
    if (proofOfI) deliver(w, vj, proofOfI);
    if (proofOfJ) deliver(w, vi, proofOfJ);
  }
  toString = () => `manInTheMiddle(victim ${this.i} <-> victim ${this.j})`;
}

/** A HELLO of the attacker's making: any id, any pid, a nonce it has seen or a new one. */
class ForgeHello implements fc.Command<Model, World> {
  constructor(
    readonly victim: number,
    readonly id: string,
    readonly pid: number,
    readonly nonceFrom: number | null,
  ) {}
  check = (m: Readonly<Model>) => m.victims > 0;
  run(_m: Model, w: World): void {
    const known = hellos(w);
    const nonce = this.nonceFrom !== null && known.length > 0 ? recent(known, this.nonceFrom).nonce : new Uint8Array(randomBytes(NONCE_BYTES));
    const hello: HelloFrame = { type: FrameType.HELLO, version: WIRE_VERSION, pid: this.pid, peerId: this.id, deviceUuid: '', nonce, features: 0 };
    const bytes = encodeFrame(hello).slice();
    w.seen.push(bytes);
    deliver(w, w.victims[this.victim % w.victims.length]!, bytes);
  }
  toString = () => `forgeHello(${this.id}, pid ${this.pid}, nonce ${this.nonceFrom ?? 'new'} → victim ${this.victim})`;
}

/** A PROOF of the attacker's making: an HMAC under a guessed token over fields it has seen, or random bytes. */
class ForgeProof implements fc.Command<Model, World> {
  constructor(
    readonly victim: number,
    readonly guess: string | null,
    readonly ids: [string, string],
    readonly pids: [number, number],
    readonly nonces: [number, number],
  ) {}
  check = (m: Readonly<Model>) => m.victims > 0;
  run(_m: Model, w: World): void {
    const known = hellos(w);
    const nonce = (i: number) => (known.length ? recent(known, i).nonce : new Uint8Array(NONCE_BYTES));
    const proof =
      this.guess === null
        ? new Uint8Array(randomBytes(PROOF_BYTES))
        : computeProof(this.guess, {
            version: WIRE_VERSION,
            senderId: this.ids[0],
            receiverId: this.ids[1],
            senderPid: this.pids[0],
            receiverPid: this.pids[1],
            senderNonce: nonce(this.nonces[0]),
            receiverNonce: nonce(this.nonces[1]),
          });
    const bytes = encodeFrame({ type: FrameType.PROOF, proof }).slice();
    w.seen.push(bytes);
    deliver(w, w.victims[this.victim % w.victims.length]!, bytes);
  }
  toString = () =>
    `forgeProof(${this.guess ?? 'random'}, ${this.ids.join('→')}, pids ${this.pids.join('→')}, nonces ${this.nonces.join(',')} → victim ${this.victim})`;
}

const party = fc.constantFrom<Party>('A', 'B');
const id = fc.constantFrom('A', 'B', 'M', '');
const pid = fc.constantFrom(PARTIES.A, PARTIES.B, ATTACKER_PID, 0);
// Small indices, taken modulo what exists (victims from the first, frames from the most recent).
const small = fc.nat({ max: 6 });
const commands = fc.commands(
  [
    party.map((p) => new OpenConnection(p)),
    fc.constant(new Eavesdrop()),
    fc.tuple(small, small).map(([v, f]) => new Replay(v, f)),
    fc.tuple(small, small).map(([v, h]) => new RelayHello(v, h)),
    fc.tuple(small, small).map(([i, j]) => new ManInTheMiddle(i, j)),
    fc
      .tuple(
        small,
        id.filter((s) => s !== ''),
        pid,
        fc.option(small, { nil: null }),
      )
      .map(([v, i, p, n]) => new ForgeHello(v, i, p, n)),
    fc
      .tuple(
        small,
        fc.option(fc.constantFrom('', 'guess', 'the-job-toke', 'THE-JOB-TOKEN'), { nil: null }),
        fc.tuple(id, id),
        fc.tuple(pid, pid),
        fc.tuple(small, small),
      )
      .map(([v, g, ids, pids, n]) => new ForgeProof(v, g, ids, pids, n)),
  ],
  { size: 'medium' },
);

describe('handshake model', () => {
  test.prop([commands], { numRuns: 1000 })(
    'no interleaving of replayed, reflected, relayed or forged frames authenticates an attacker without the token',
    (cmds) => {
      const world: World = { victims: [], seen: [] };
      fc.modelRun(() => ({ model: { victims: 0 }, real: world }), cmds);
      for (const v of world.victims) expect(v.state, `victim ${v.party}`).not.toBe('authenticated');
    },
  );

  test.prop([
    fc.string({ maxLength: 40 }),
    fc.array(fc.boolean(), { minLength: 4, maxLength: 4 }),
    fc.constantFrom<[string, string]>(['a', 'b'], ['rank0', 'rank1'], ['x', 'xx']),
    fc.boolean(),
  ])(
    'honest peers with the same token always authenticate, in any order of their two directions; with another token never',
    (token, order, [idX, idY], sameToken) => {
      const x = new Handshake({ id: idX, token, pid: 10, peerPid: 20, deviceUuid: '', features: 0 });
      const y = new Handshake({ id: idY, token: sameToken ? token : `${token}!`, pid: 20, peerPid: 10, deviceUuid: '', features: 0 });
      // Each direction is a FIFO queue; `order` picks which side's next frame is delivered next.
      const toX: Frame[] = [y.hello];
      const toY: Frame[] = [x.hello];
      const outcome = { x: 'open', y: 'open' } as Record<'x' | 'y', string>;
      const feed = (who: 'x' | 'y') => {
        const [hs, inbox, outbox] = who === 'x' ? [x, toX, toY] : [y, toY, toX];
        const f = inbox.shift();
        if (!f || outcome[who] !== 'open') return;
        try {
          const step = hs.receive(decodeFrame(encodeFrame(f)));
          if (step.kind === 'proof') outbox.push(step.proof);
          else outcome[who] = 'authenticated';
        } catch {
          outcome[who] = 'refused';
        }
      };
      for (const b of order) feed(b ? 'x' : 'y');
      while (toX.length || toY.length) {
        feed('x');
        feed('y');
      }
      expect(outcome).toEqual(sameToken ? { x: 'authenticated', y: 'authenticated' } : { x: 'refused', y: 'refused' });
    },
  );
});
