/**
 * Issue 23 finding 3: sizes a peer names (STAGE_BEGIN's chunkSize × slots,
 * RING_OFFER's capacity, the size its segment is announced with) are checked
 * against this side's limits before anything is mapped. A segment of 8 GiB
 * (sparse: it costs no memory) used to abort the victim ("FATAL ERROR
 * napi_throw": the ArrayBuffer could not be made, then a second exception
 * was thrown). The simulated driver's own named segments (shmOpen) keep the
 * same guard.
 * Now the one message, or the one endpoint, fails with a typed error and the
 * process goes on.
 */
import { closeSync, openSync, ftruncateSync, unlinkSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMemoryChannelPair } from '../../../src/channel/memory-channel.js';
import { ShmChannel } from '../../../src/channel/shm-channel.js';
import { FdChannel } from '../../../src/channel/fd-channel.js';
import { portOver } from '../../helpers/ring-ports.js';
import { loadAddon } from '../../../src/cuda/addon.js';
import { SimulatedCudaDriver } from '../../../src/cuda/sim-driver.js';
import { ProtocolError } from '../../../src/errors.js';
import { ProgressEngine } from '../../../src/progress/engine.js';
import { Transport } from '../../../src/transport.js';
import { encodeFrame } from '../../../src/wire/codec.js';
import { type FinFrame, FinStatus, FrameType, SegmentKind } from '../../../src/wire/frames.js';
import { rawPeer } from '../../helpers/raw-peer.js';

const HUGE = 8 * 1024 ** 3;
let victim: SimulatedCudaDriver;
let t: Transport;
const made: string[] = [];

/** A sparse segment of `bytes` in /dev/shm (a hostile peer's), by name. */
function sparseSegment(tag: string, bytes: number): string {
  const name = `/smcuda-test-${process.pid}-${tag}`;
  const fd = openSync(`/dev/shm${name}`, 'w', 0o600);
  ftruncateSync(fd, bytes);
  closeSync(fd);
  made.push(name);
  return name;
}

beforeAll(async () => {
  victim = new SimulatedCudaDriver();
  t = await Transport.create({ driver: victim, id: 'victim', device: 0 });
});
afterAll(async () => {
  await t.close();
  victim.close();
  for (const n of made) {
    try {
      unlinkSync(`/dev/shm${n}`);
    } catch {
      // gone
    }
  }
});

const settle = async () => {
  for (let i = 0; i < 10; i++) await new Promise((r) => setImmediate(r));
};

describe('a peer-named segment larger than this side allows', () => {
  it('the addon refuses to map a segment larger than an ArrayBuffer may be, with an error, not an abort', () => {
    const name = sparseSegment('huge-open', HUGE);
    const addon = loadAddon();
    expect(() => addon.shmOpen(name)).toThrow(/larger than an ArrayBuffer/);
    // and with the announced size, refused before mmap
    expect(() => addon.shmOpen(name, 4096)).toThrow(expect.objectContaining({ code: 'ESIZE' }));
  });

  it('STAGE_BEGIN naming an 8 GiB ring: that message is refused before anything is mapped (FIN REFUSED, typed error), the endpoint and process go on', async () => {
    const p = await rawPeer(t, 'attacker-stage', '', '', { descriptors: true });
    const recv = p.ep.recv({ tag: 1, into: new Uint8Array(1 << 20) }).then(
      () => undefined,
      (e: Error) => e,
    );
    p.send({ type: FrameType.STAGE_BEGIN, tag: 1, seq: 1, length: 1 << 20, chunkSize: 1 << 30, slots: 8 });
    await settle();
    const err = await recv;
    expect(err).toBeInstanceOf(ProtocolError);
    expect((err as ProtocolError).code).toBe('SMCUDA_BAD_SEGMENT');
    const fin = p.received.find((f): f is FinFrame => f.type === FrameType.FIN);
    expect(fin).toMatchObject({ seq: 1, status: FinStatus.REFUSED });
    expect(p.closeError()).toBeUndefined();
    // The endpoint still works: a host message after it arrives.
    const next = p.ep.recv({ tag: 2 });
    p.send({ type: FrameType.EAGER, tag: 2, seq: 2, fromDevice: false, data: Uint8Array.of(7) });
    expect([...((await next).data as Uint8Array)]).toEqual([7]);
  });

  for (const [what, capacity, bytes] of [
    ['a ring larger than maxPeerCapacity', 1 << 30, 256 + (1 << 30)],
    ['a small ring whose segment announces 8 GiB', 4096, HUGE],
  ] as const) {
    it(`RING_OFFER of ${what}: the channel fails with SMCUDA_BAD_SEGMENT, nothing mapped, the process goes on`, async () => {
      const [mine, theirs] = createMemoryChannelPair({ names: ['attacker', 'victim'] });
      const [fx, fy] = FdChannel.pair();
      fx.start({ message: () => {} });
      const progress = new ProgressEngine(0);
      const ch = new ShmChannel(theirs, { progress });
      ch.useSegments(portOver(fy));
      const closed = new Promise<Error | undefined>((r) => ch.once('close', r));
      const seg = loadAddon().sealedCreate('smcuda-test-ring', 8192);
      await fx.send(seg.fd, encodeFrame({ type: FrameType.SEGMENT, kind: SegmentKind.CONTROL_RING, bytes }));
      mine.send(encodeFrame({ type: FrameType.RING_OFFER, capacity }));
      const err = await closed;
      expect(err).toBeInstanceOf(ProtocolError);
      expect((err as ProtocolError).code).toBe('SMCUDA_BAD_SEGMENT');
      expect(ch.ringOut).toBe(false);
      progress.stop();
      fx.close();
      fy.close();
      loadAddon().fdClose(seg.fd);
    });
  }
});
