/**
 * The endpoint's side of the IPC negotiation (machines/): the effects the
 * actor asks for (is CUDA ready, can the devices reach each other, open the
 * peer's probe), the probe this side exports (ipc-probe.ts), and the record
 * stats() reports. The hot path never touches the actor: it reads the link's
 * `ipcOk`, which the endpoint sets on each transition (onState).
 */
import type { GpuWork } from './gpu/gpu-work.js';
import type { HandlePool } from '../cache/index.js';
import { createNegotiator, type Negotiator, type NegotiationState } from '../machines/index.js';
import type { CudaDriver } from './cuda/driver.js';
import { debug } from './debug.js';
import type { NegotiationRecord } from './endpoint-stats.js';
import { ExportedProbe, verifyPeerProbe } from './ipc-probe.js';
import type { NegotiationOptions } from './options.js';
import type { Tracer } from './trace.js';
import type { Frame, NegotiationFrame } from './wire/frames.js';

export interface NegotiationLinkOptions {
  driver: CudaDriver;
  localId: string;
  peerId: string;
  options: NegotiationOptions;
  /** Where the peer's probe is opened: the first real message then finds the peer's context mapped. */
  pool: HandlePool;
  tracer: Tracer | undefined;
  sendFrame: (frame: Frame) => void;
  /** Device UUID by ordinal (the link's table). */
  uuidOf: (ordinal: number) => string;
  /** After every transition (the endpoint emits 'state'). */
  onState: (state: NegotiationState, previous: NegotiationState) => void;
  /** The endpoint's GPU work: once this side's device is ready, before it can be OK, it sets up what the first message would (GpuWork.prepare); it waits for the probe's value to land. */
  gpu: () => GpuWork;
}

export class NegotiationLink {
  readonly record: NegotiationRecord = { state: 'INIT', path: ['INIT'], tries: 0 };
  private readonly negotiator: Negotiator;
  private readonly driver: CudaDriver;
  private startedAt = 0;
  /** My allocation the peer opens during the negotiation, to prove IPC works. */
  private probe: ExportedProbe | undefined;

  constructor(private readonly o: NegotiationLinkOptions) {
    const d = (this.driver = o.driver);
    this.negotiator = createNegotiator({
      localId: o.localId,
      peerId: o.peerId,
      options: o.options,
      send: o.sendFrame,
      checkReady: async () => {
        const ready = d.isReady();
        const probe = ready ? this.ownProbe() : undefined;
        if (probe !== undefined) o.gpu().prepare();
        return { ready, deviceUuid: this.localUuid(), probe };
      },
      checkPeerAccess: async (peerUuid) => this.canAccessPeer(peerUuid),
      openProbe: (peerUuid, probe) => verifyPeerProbe(d, o.pool, probe, peerUuid),
      onStateChange: (state, previous, info) => this.onState(state, previous, info),
    });
  }

  get state(): NegotiationState {
    return this.negotiator.state;
  }

  /** Before a device send: the first one starts the negotiation (only acts in INIT). */
  gpuSend(): void {
    if (this.negotiator.state !== 'INIT') return;
    if (this.startedAt === 0) this.startedAt = performance.now();
    this.negotiator.gpuSend();
  }

  /** True while a negotiation runs (started, not yet OK, BAD or back to INIT's idle). */
  get inFlight(): boolean {
    return this.negotiator.inFlight;
  }

  /** Runs `cb` once no negotiation is in flight (at once if none is). */
  whenIdle(cb: () => void): void {
    this.negotiator.whenIdle(cb);
  }

  receive(frame: NegotiationFrame): void {
    if (this.startedAt === 0) this.startedAt = performance.now();
    this.negotiator.receive(frame);
  }

  /** The endpoint closes; `orderly` (either side's close) leaves the outcome as it was, else it ends BAD. */
  stop(orderly: boolean): void {
    if (!orderly) this.negotiator.peerLost();
    this.negotiator.stop();
    this.probe?.free();
  }

  private onState(state: NegotiationState, previous: NegotiationState, info: { tries: number; reason?: string }): void {
    const rec = this.record;
    rec.state = state;
    rec.path.push(state);
    rec.tries = info.tries;
    if (info.reason !== undefined) rec.reason = info.reason;
    if ((state === 'OK' || state === 'BAD') && rec.settleMs === undefined && this.startedAt > 0) {
      rec.settleMs = performance.now() - this.startedAt;
    }
    this.o.tracer?.state(this.o.peerId, previous, state, info);
    debug('endpoint %s: %s → %s (tries %d)%s', this.o.peerId, previous, state, info.tries, info.reason ? `: ${info.reason}` : '');
    this.o.onState(state, previous);
  }

  /** My probe for the negotiation (ipc-probe.ts), made once; undefined if it cannot be (the peer then refuses IPC). */
  private ownProbe(): Uint8Array | undefined {
    try {
      this.probe ??= ExportedProbe.create(this.driver, this.o.gpu());
      return this.probe.bytes;
    } catch (err) {
      debug('endpoint %s: no IPC probe (%s): IPC will be refused', this.o.peerId, (err as Error).message);
      return undefined;
    }
  }

  private localUuid(): string {
    const dev = this.driver.currentDevice();
    return dev < 0 ? '' : this.o.uuidOf(dev);
  }

  /** Both directions: each side will open the other's handles. Devices by UUID, never by ordinal. */
  private canAccessPeer(peerUuid: string): boolean {
    const local = this.driver.currentDevice();
    if (local < 0) return false;
    const n = this.driver.deviceCount();
    for (let i = 0; i < n; i++) {
      if (this.o.uuidOf(i) === peerUuid) return this.driver.canAccessPeer(local, i) && this.driver.canAccessPeer(i, local);
    }
    return false; // the peer's device is not visible here: its handles cannot be opened
  }
}
