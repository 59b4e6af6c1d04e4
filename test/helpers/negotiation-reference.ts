/**
 * A reference model of the negotiation, written from the rules in SPEC.md and
 * the brief as a plain transition function (no XState), for model-based tests.
 * It assumes driver checks settle before the next command (the test flushes),
 * so a check is just its current answer: 'yes', 'no', 'throw' (a failed check),
 * or 'hang' (the check stays pending until a timeout). Opening the peer's
 * probe (env.probe) is such a check too: 'no' and 'throw' both mean it failed.
 *
 * States are the machine's top-level states plus the two INIT sub-states a
 * pending check can leave observable: 'INIT.checkingSend', 'INIT.checkingRequest'.
 */
import { DEFAULT_NEGOTIATION_CONFIG, type NegotiationConfig } from '../../machines/index.js';
import { FrameType, type NegotiationFrame } from '../../src/wire/frames.js';
import { probeOf, type SideEnv } from './negotiation-harness.js';

export type RefState = 'INIT' | 'INIT.checkingSend' | 'INIT.checkingRequest' | 'SENT' | 'ACKING' | 'ACKED' | 'OK' | 'BAD';

export class RefSide {
  state: RefState = 'INIT';
  tries = 0;
  answering = 0;
  localUuid = '';
  peerUuid = '';
  ignored = 0;
  /** The peer's request or ACK(ok) carried a probe. */
  peerProbe = false;
  /** SENT, opening the probe of the peer's ACK(ok) (hung): answers are ignored until the timeout. */
  openingProbe = false;
  readonly options: NegotiationConfig;
  /** Frames sent and not yet delivered, oldest first. */
  readonly outbox: NegotiationFrame[] = [];

  constructor(
    readonly id: string,
    readonly peerId: string,
    options: Partial<NegotiationConfig>,
    readonly env: SideEnv,
  ) {
    this.options = { ...DEFAULT_NEGOTIATION_CONFIG, ...options };
  }

  private emit(frame: NegotiationFrame): void {
    this.outbox.push(frame);
  }

  private abort(): void {
    this.state = 'BAD';
    this.openingProbe = false;
    this.emit({ type: FrameType.IPC_ABORT, reason: '' });
  }

  private ack(ok: boolean, attempt = this.answering): void {
    this.state = ok ? 'ACKED' : 'BAD';
    this.emit(
      ok
        ? { type: FrameType.IPC_ACK, attempt, ok, deviceUuid: this.localUuid, probe: probeOf(this.localUuid) }
        : { type: FrameType.IPC_ACK, attempt, ok, deviceUuid: this.localUuid },
    );
  }

  private notReady(): void {
    this.state = 'INIT';
    this.emit({ type: FrameType.IPC_NOTREADY, attempt: this.answering });
  }

  gpuSend(): void {
    if (this.state !== 'INIT') return;
    if (!this.options.ipc || this.tries >= this.options.maxTries) return this.abort();
    switch (this.env.ready) {
      case 'yes':
        this.localUuid = this.env.uuid;
        this.tries++;
        this.state = 'SENT';
        return this.emit({ type: FrameType.IPC_REQ, attempt: this.tries, deviceUuid: this.localUuid, probe: probeOf(this.localUuid) });
      case 'hang':
        this.state = 'INIT.checkingSend';
        return;
      default:
        return; // not ready: nothing happens
    }
  }

  /** Ready check on a peer's request (already accepted into answering/peerUuid). */
  private checkForRequest(): void {
    switch (this.env.ready) {
      case 'yes':
        this.localUuid = this.env.uuid;
        return this.decide();
      case 'hang':
        this.state = 'INIT.checkingRequest';
        return;
      default:
        return this.notReady();
    }
  }

  /** ACKING: what to answer. */
  private decide(): void {
    this.state = 'ACKING';
    if (!this.options.ipc || this.peerUuid === '') return this.ack(false);
    if (this.peerUuid === this.localUuid) return this.options.sameGpuIpc ? this.openPeerProbe() : this.ack(false);
    switch (this.env.access) {
      case 'yes':
        return this.openPeerProbe();
      case 'hang':
        return; // stays ACKING until the check timeout
      default:
        return this.ack(false);
    }
  }

  /** ACKING: open the requester's probe before answering yes. */
  private openPeerProbe(): void {
    if (!this.peerProbe) return this.ack(false);
    switch (this.env.probe ?? 'yes') {
      case 'yes':
        return this.ack(true);
      case 'hang':
        return; // stays ACKING until the check timeout
      default:
        return this.ack(false);
    }
  }

  receive(frame: NegotiationFrame): void {
    const s = this.state;
    switch (frame.type) {
      case FrameType.IPC_ABORT:
        if (s === 'BAD') this.ignored++;
        else this.state = 'BAD';
        return;
      case FrameType.IPC_REQ: {
        const accept = () => {
          this.answering = frame.attempt;
          this.peerUuid = frame.deviceUuid;
          this.peerProbe = frame.probe !== undefined;
        };
        if (s === 'INIT') {
          accept();
          return this.options.ipc ? this.checkForRequest() : this.decide();
        }
        if (s === 'INIT.checkingSend') {
          accept();
          return this.checkForRequest();
        }
        if (s === 'SENT') {
          if (this.openingProbe || this.id < this.peerId) {
            this.ignored++;
            return;
          }
          accept();
          return this.decide();
        }
        if (s === 'OK' || s === 'BAD') return this.ack(false, frame.attempt);
        this.ignored++; // checkingRequest, ACKING, ACKED: the peer cannot be asking again
        return;
      }
      case FrameType.IPC_ACK:
        if (s === 'SENT' && !this.openingProbe && frame.attempt === this.tries) {
          this.peerUuid = frame.deviceUuid;
          this.peerProbe = frame.probe !== undefined;
          if (!frame.ok) {
            this.state = 'BAD';
            return;
          }
          // Open the answer's probe before confirming.
          if (!this.peerProbe) return this.abort();
          switch (this.env.probe ?? 'yes') {
            case 'yes':
              this.state = 'OK';
              return this.emit({ type: FrameType.IPC_CONFIRM, attempt: this.tries });
            case 'hang':
              this.openingProbe = true;
              return;
            default:
              return this.abort();
          }
        }
        this.ignored++;
        return;
      case FrameType.IPC_NOTREADY:
        if (s === 'SENT' && !this.openingProbe && frame.attempt === this.tries) {
          if (this.tries >= this.options.maxTries) return this.abort();
          this.state = 'INIT';
          return;
        }
        this.ignored++;
        return;
      case FrameType.IPC_CONFIRM:
        if (s === 'ACKED' && frame.attempt === this.answering) this.state = 'OK';
        else this.ignored++;
        return;
    }
  }

  /** Time passes beyond every timeout: each pending wait expires. */
  timeout(): void {
    switch (this.state) {
      case 'INIT.checkingSend':
        this.state = 'INIT';
        return;
      case 'INIT.checkingRequest':
        return this.notReady();
      case 'SENT':
      case 'ACKED':
        return this.abort();
      case 'ACKING':
        return this.ack(false);
      default:
        return;
    }
  }

  peerLost(): void {
    this.state = 'BAD';
    this.openingProbe = false;
  }
}

/** The two-sided model: A's outbox is the A→B channel. */
export class RefPair {
  constructor(
    readonly a: RefSide,
    readonly b: RefSide,
  ) {}

  side(which: 'a' | 'b'): RefSide {
    return which === 'a' ? this.a : this.b;
  }

  deliver(from: 'a' | 'b'): void {
    const frame = this.side(from).outbox.shift();
    if (frame) this.side(from === 'a' ? 'b' : 'a').receive(frame);
  }

  loseChannel(): void {
    this.a.outbox.length = 0;
    this.b.outbox.length = 0;
    this.a.peerLost();
    this.b.peerLost();
  }
}
