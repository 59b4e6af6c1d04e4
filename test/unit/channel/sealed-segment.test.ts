/**
 * Issue 23 finding 2: a peer that shrinks a segment the victim has mapped
 * kills it with SIGBUS. Ring segments are now sealed memfds: a shrink or a
 * grow fails with EPERM, and a receiver maps a peer's segment only if the
 * seals are on and the size is the one announced (real memfds, real seals).
 */
import { closeSync, ftruncateSync, openSync, readdirSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { createSealedSegment, mapPeerSegment } from '../../../src/channel/sealed-segment.js';
import { loadAddon } from '../../../src/cuda/addon.js';
import { ProtocolError } from '../../../src/errors.js';

const addon = loadAddon();
const openFds = () => readdirSync('/proc/self/fd').length;

describe('sealed segments', () => {
  it('cannot be shrunk or grown by anyone holding the descriptor: EPERM, and the mapping stays whole', () => {
    const seg = createSealedSegment(8192, 'smcuda-test');
    try {
      seg.bytes.fill(0x11);
      expect(() => ftruncateSync(seg.fd!, 0)).toThrow(expect.objectContaining({ code: 'EPERM' }));
      expect(() => ftruncateSync(seg.fd!, 1 << 20)).toThrow(expect.objectContaining({ code: 'EPERM' }));
      // The peer's view: a mapping of the same pages, checked and whole.
      const peerFd = openSync(`/proc/self/fd/${seg.fd}`, 'r+');
      const peer = mapPeerSegment(peerFd, 8192, 'test segment');
      expect(peer.bytes.every((b) => b === 0x11)).toBe(true);
      peer.bytes[0] = 0x22;
      expect(seg.bytes[0]).toBe(0x22);
      peer.close();
    } finally {
      seg.close();
    }
  });

  it('has no name in /dev/shm', () => {
    const before = new Set(readdirSync('/dev/shm'));
    const seg = createSealedSegment(4096, 'smcuda-test-noname');
    try {
      expect(readdirSync('/dev/shm').filter((n) => !before.has(n) && n.includes('smcuda-test-noname'))).toEqual([]);
    } finally {
      seg.close();
    }
  });

  const refused: Array<[string, () => { fd: number; bytes: number; cleanup?: () => void }]> = [
    ['an unsealed memfd (it could be shrunk under the mapping)', () => ({ fd: addon.memfdCreate('smcuda-test-unsealed', 8192), bytes: 8192 })],
    [
      'a sealable memfd without the seals (shrinkable)',
      () => {
        const s = addon.sealedCreate('smcuda-test-shrinkable', 8192, false);
        return { fd: s.fd, bytes: 8192, cleanup: () => addon.shmClose(s.buffer) };
      },
    ],
    [
      'a sealed segment of another size than announced',
      () => {
        const s = addon.sealedCreate('smcuda-test-size', 8192);
        return { fd: s.fd, bytes: 65536, cleanup: () => addon.shmClose(s.buffer) };
      },
    ],
    [
      'a regular file',
      () => {
        const p = join(tmpdir(), `smcuda-test-file-${process.pid}`);
        writeFileSync(p, new Uint8Array(8192));
        const fd = openSync(p, 'r+');
        unlinkSync(p);
        return { fd, bytes: 8192 };
      },
    ],
  ];
  for (const [what, make] of refused) {
    it(`refuses ${what}: ProtocolError SMCUDA_BAD_SEGMENT before mapping, the descriptor closed`, () => {
      const { fd, bytes, cleanup } = make();
      const fds = openFds();
      let err: unknown;
      try {
        mapPeerSegment(fd, bytes, 'staging ring').close();
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(ProtocolError);
      expect((err as ProtocolError).code).toBe('SMCUDA_BAD_SEGMENT');
      expect(openFds()).toBe(fds - 1); // mapPeerSegment took the descriptor
      expect(() => closeSync(fd)).toThrow(); // already closed
      cleanup?.();
    });
  }
});
