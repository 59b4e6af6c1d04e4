/**
 * The communicator's registered scratch: one device allocation per rank,
 * opened once by every peer through its IPC handle, in five regions of
 * `bytes` each:
 *
 *   A  inputs: each call copies the caller's input here first (so caller
 *      buffers need no registration, and in-place calls are safe), and peers
 *      read it through their mappings; or N - 1 landing slots for peers'
 *      parts (the two-shot kernel);
 *   B  partial results peers read (two-shot through the host), N - 1
 *      slots for peers' reduced parts (the two-shot kernel),
 *      or PIPELINE_SLOTS × N landing parts for peers' reduced parts (the
 *      copy-engine pipeline);
 *   C  landing: peers' data copied here: N slots (staging), or
 *      PIPELINE_SLOTS × N parts (the copy-engine pipeline);
 *   D  the one-shot kernel's landing slots: 2 × N (a parity of its launch
 *      count, a source rank), its own so that no other algorithm's stores
 *      meet a one-shot a peer is still reading (it ends with no step);
 *   E  point to point: P2P_SLOTS × N slots, slot [x][k] taking chunks of
 *      rank k's sends to this rank (p2p-slots.ts), its own so that a send
 *      never lands in memory a collective of the receiver is using;
 *
 * then the flag block of the device-side step signals, the kernels'
 * per-block signals, the pipeline's and point to point's (device-sync.ts),
 * zeroed (the pipeline's and point to point's "free" signals set) before
 * any peer can see it;
 * then F, the LL one-shot kernel's landing slots: 2 × N (a parity of its
 * launch count, a source rank) of `llSlotBytes`, lines of 8 data bytes and
 * their flags (reduce.cu's lloneshot), zeroed before any peer can see it (a
 * flag of 0 is no launch's) and its own: only that kernel ever stores there,
 * so no other store can carry a flag it would take for data;
 * and pointer tables for the reduction kernels: every rank's A (own and
 * mapped, in rank order), this rank's N landing slots in C, and, per
 * pipeline slot, its N landing parts.
 */
import type { CudaDriver, DevicePtr } from '../cuda/driver.js';
import { debug } from '../debug.js';
import type { ControlPlane } from './control.js';
import {
  PIPELINE_FREE_SIGNALS,
  PIPELINE_SLOTS,
  flagBlockBytes,
  kernelSlotsOffset,
  llAreaOffset,
  oneshotAreaOffset,
  p2pAreaOffset,
  pipelineSlotOffset,
} from './device-sync.js';
import { P2P_SLOTS, p2pFlagOffset, p2pSlotBytes, type P2PSignal } from './p2p-slots.js';

/**
 * The most data bytes an LL one-shot piece carries (region F: every byte
 * takes two in a line, and a slot per parity and rank, so F is 4N times
 * this, at most one region): the protocol is for small messages, where the
 * latency of a signal counts more than twice the bytes.
 */
export const LL_MAX_BYTES = 64 * 1024;

export class Scratch {
  /** Whether every rank opened every peer's scratch: false → the staged algorithms. */
  mapped = true;
  /** Why not, where `mapped` is false. */
  reason: string | undefined;
  private readonly own: DevicePtr;
  private readonly tables: DevicePtr;
  private readonly peerBase = new Map<number, DevicePtr>();
  private released = false;
  /** Where the one-shot kernel's flag area starts, from a rank's A (fields, not getters: read on every call). */
  readonly oneShotFlagOffset: number;
  /** Where the one-shot kernel's landing slots (D) start, from a rank's A. */
  readonly oneShotLandOffset: number;
  /** Bytes of one of the one-shot kernel's landing slots: D split in 2 × size, 16-byte aligned (the most a launch moves). */
  readonly oneShotSlotBytes: number;
  /** Where the LL one-shot kernel's area starts (its launch count and poison), from a rank's A. */
  readonly llFlagOffset: number;
  /** Where the LL one-shot kernel's landing slots (F) start, from a rank's A: after the flag block, 256-aligned. */
  readonly llLandOffset: number;
  /** Data bytes of an LL one-shot piece at most: LL_MAX_BYTES, or a quarter of a region over N where that is less (8-byte lines). */
  readonly llMaxBytes: number;
  /** Bytes of one of the LL one-shot kernel's landing slots: twice llMaxBytes (each 4 data bytes travel with a 4-byte flag). */
  readonly llSlotBytes: number;
  /** Where the flag block starts, from a rank's A: after the five regions. */
  private readonly flagsAt: number;
  /** Bytes of one point-to-point slot (region E split in P2P_SLOTS × size). */
  readonly p2pSlotBytes: number;

  private constructor(
    private readonly driver: CudaDriver,
    readonly rank: number,
    readonly size: number,
    /** Bytes per region. */
    readonly bytes: number,
  ) {
    this.flagsAt = 5 * bytes;
    this.p2pSlotBytes = p2pSlotBytes(bytes, size);
    this.oneShotFlagOffset = this.flagsAt + oneshotAreaOffset(size);
    this.oneShotLandOffset = 3 * bytes;
    this.oneShotSlotBytes = Math.floor(bytes / (2 * size) / 16) * 16;
    this.llFlagOffset = this.flagsAt + llAreaOffset(size);
    this.llLandOffset = Math.ceil((this.flagsAt + flagBlockBytes(size)) / 256) * 256;
    this.llMaxBytes = Math.min(LL_MAX_BYTES, Math.floor(bytes / (4 * size) / 8) * 8);
    this.llSlotBytes = 2 * this.llMaxBytes;
    const llBytes = 2 * size * this.llSlotBytes;
    this.own = driver.memAlloc(this.llLandOffset + llBytes);
    try {
      const flags = new Uint8Array(flagBlockBytes(size));
      const words = new DataView(flags.buffer);
      for (const sig of PIPELINE_FREE_SIGNALS)
        for (let x = 0; x < PIPELINE_SLOTS; x++) for (let k = 0; k < size; k++) words.setBigUint64(pipelineSlotOffset(size, sig, x, k), 1n, true);
      for (let x = 0; x < P2P_SLOTS; x++) for (let k = 0; k < size; k++) words.setBigUint64(p2pAreaOffset(size) + p2pFlagOffset(size, 'free', x, k), 1n, true);
      driver.memcpyHtoD(this.own + BigInt(this.flagsAt), flags);
      if (llBytes > 0) driver.memsetD8(this.own + BigInt(this.llLandOffset), 0, llBytes);
      this.tables = driver.memAlloc(8 * size * (2 + PIPELINE_SLOTS));
    } catch (err) {
      driver.memFree(this.own);
      throw err;
    }
  }

  /** Allocates this rank's scratch and opens every peer's (a collective call: every rank makes it). */
  static async open(driver: CudaDriver, control: ControlPlane, rank: number, size: number, bytes: number): Promise<Scratch> {
    const s = new Scratch(driver, rank, size, bytes);
    try {
      const handle = size > 1 ? Buffer.from(driver.ipcGetMemHandle(s.own)).toString('base64') : '';
      const handles = await control.exchange('scratch', handle);
      let failure: string | undefined;
      for (const [peer, h] of handles) {
        try {
          s.peerBase.set(peer, driver.ipcOpenMemHandle(new Uint8Array(Buffer.from(h, 'base64'))));
        } catch (err) {
          failure ??= `rank ${rank} cannot open rank ${peer}'s scratch: ${(err as Error).message}`;
        }
      }
      const oks = await control.exchange('mapped', failure ?? '');
      const reason = failure ?? [...oks.values()].find((r) => r !== '');
      if (reason) {
        s.mapped = false;
        s.reason = reason;
        debug('communicator rank %d: staging through the endpoints, %s', rank, reason);
      }
      const table = new BigUint64Array(size * (2 + PIPELINE_SLOTS));
      for (let k = 0; k < size; k++) {
        table[k] = s.inputOf(k) ?? 0n;
        table[size + k] = s.landing(k);
        for (let x = 0; x < PIPELINE_SLOTS; x++) table[(2 + x) * size + k] = s.partLanding(rank, x, k)!;
      }
      driver.memcpyHtoD(s.tables, new Uint8Array(table.buffer));
      return s;
    } catch (err) {
      s.release();
      throw err;
    }
  }

  /** Rank k's region A (own or mapped); undefined where it is not mapped here. */
  inputOf(k: number): DevicePtr | undefined {
    return k === this.rank ? this.own : this.peerBase.get(k);
  }

  /** Rank k's region B (own or mapped). */
  partialOf(k: number): DevicePtr | undefined {
    const a = this.inputOf(k);
    return a === undefined ? undefined : a + BigInt(this.bytes);
  }

  /** Bytes per landing slot: C split in `size` slots, 256-byte aligned. */
  get slotBytes(): number {
    return Math.floor(this.bytes / this.size / 256) * 256;
  }

  /** This rank's landing slot for rank k's data, in C. */
  landing(k: number): DevicePtr {
    return this.own + BigInt(2 * this.bytes + k * this.slotBytes);
  }

  /** Rank `owner`'s landing slot for rank `from`'s data (own or mapped; alltoallv pushes into it): undefined where not mapped here. */
  landingOf(owner: number, from: number): DevicePtr | undefined {
    const a = this.inputOf(owner);
    return a === undefined ? undefined : a + BigInt(2 * this.bytes + from * this.slotBytes);
  }

  /** Bytes of one part of a pipeline chunk: B or C split in PIPELINE_SLOTS × size parts, 16-byte aligned (whole elements of every dtype). */
  get partBytes(): number {
    return Math.floor(this.bytes / (PIPELINE_SLOTS * this.size) / 16) * 16;
  }

  /** Rank `owner`'s landing part (own or mapped) of pipeline slot x for rank `from`'s input, in C. */
  partLanding(owner: number, x: number, from: number): DevicePtr | undefined {
    const a = this.inputOf(owner);
    return a === undefined ? undefined : a + BigInt(2 * this.bytes + (x * this.size + from) * this.partBytes);
  }

  /** Rank `owner`'s landing part (own or mapped) of pipeline slot x for rank `from`'s reduced part, in B. */
  reducedLanding(owner: number, x: number, from: number): DevicePtr | undefined {
    const a = this.inputOf(owner);
    return a === undefined ? undefined : a + BigInt(this.bytes + (x * this.size + from) * this.partBytes);
  }

  /** Device table of this rank's landing parts of pipeline slot x (entry k: rank k's part). */
  partTable(x: number): DevicePtr {
    return this.tables + BigInt(8 * this.size * (2 + x));
  }

  /** Bytes of one part of a two-shot kernel's piece at most: A's landing slots and B's hold N - 1 of them, 16-byte aligned. */
  get twoShotPartBytes(): number {
    return this.size < 2 ? 0 : Math.floor(this.bytes / (this.size - 1) / 16) * 16;
  }

  /** Rank k's flag block (own or mapped); undefined where it is not mapped here. */
  flagsOf(k: number): DevicePtr | undefined {
    const a = this.inputOf(k);
    return a === undefined ? undefined : a + BigInt(this.flagsAt);
  }

  /** Rank `owner`'s point-to-point slot x for rank `from`'s sends (own or mapped), in E. */
  p2pSlot(owner: number, from: number, x: number): DevicePtr | undefined {
    const a = this.inputOf(owner);
    return a === undefined ? undefined : a + BigInt(4 * this.bytes + (x * this.size + from) * this.p2pSlotBytes);
  }

  /** Rank `owner`'s point-to-point flag `signal` for slot x and peer k (own or mapped). */
  p2pFlag(owner: number, signal: P2PSignal, x: number, k: number): DevicePtr | undefined {
    const f = this.flagsOf(owner);
    return f === undefined ? undefined : f + BigInt(p2pAreaOffset(this.size) + p2pFlagOffset(this.size, signal, x, k));
  }

  /** Where the two-shot kernel's step slots start, from a rank's A (the same in every rank's scratch). */
  get kernelFlagOffset(): number {
    return this.flagsAt + kernelSlotsOffset(this.size);
  }

  /** Device table of every rank's A. */
  get inputTable(): DevicePtr {
    return this.tables;
  }

  /** Device table of this rank's landing slots. */
  get landingTable(): DevicePtr {
    return this.tables + BigInt(8 * this.size);
  }

  /** Closes the peers' mappings and frees this rank's scratch (after the work using them is done). */
  /** Closes this rank's mappings of the peers' scratch (release() does too). */
  unmapPeers(): void {
    for (const p of this.peerBase.values()) {
      try {
        this.driver.ipcCloseMemHandle(p);
      } catch (err) {
        debug('communicator: closing a peer scratch mapping failed: %s', (err as Error).message);
      }
    }
    this.peerBase.clear();
  }

  release(): void {
    if (this.released) return;
    this.released = true;
    this.unmapPeers();
    for (const p of [this.own, this.tables]) {
      try {
        this.driver.memFree(p);
      } catch (err) {
        debug('communicator: freeing scratch failed: %s', (err as Error).message);
      }
    }
  }
}
