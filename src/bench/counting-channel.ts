/**
 * A ControlChannel that counts the frames crossing it, by type and
 * direction, and otherwise passes everything through. The negotiation figure
 * ("first GPU send → endpoint OK in control round trips") counts IPC_*
 * frames on the initiator's channel, which sees both directions.
 *
 * It is only used on the negotiation's own sessions, never where speed is
 * measured.
 */
import { EventEmitter } from 'node:events';
import type { ControlChannel, ControlChannelEvents } from '../channel/channel.js';
import { decodeFrame } from '../wire/codec.js';
import { FrameType } from '../wire/frames.js';

const NEGOTIATION_TYPES: ReadonlySet<FrameType> = new Set([
  FrameType.IPC_REQ,
  FrameType.IPC_ACK,
  FrameType.IPC_NOTREADY,
  FrameType.IPC_CONFIRM,
  FrameType.IPC_ABORT,
]);

export class CountingChannel extends EventEmitter<ControlChannelEvents> implements ControlChannel {
  private readonly counts = new Map<string, number>();
  private negotiationFrames = 0;

  constructor(private readonly inner: ControlChannel) {
    super();
    inner.on('frame', (frame, transient) => {
      this.count(frame, 'received');
      this.emit('frame', frame, transient);
    });
    inner.on('drain', () => this.emit('drain'));
    inner.on('close', (error) => (error ? this.emit('close', error) : this.emit('close')));
  }

  get label(): string {
    return `counting(${this.inner.label})`;
  }

  get closed(): boolean {
    return this.inner.closed;
  }

  send(frame: Uint8Array): boolean {
    this.count(frame, 'sent');
    return this.inner.send(frame);
  }

  close(): void {
    this.inner.close();
  }

  /** Frames so far by '<TYPE> sent|received', and the negotiation frames among them. */
  snapshot(): { frames: Record<string, number>; negotiation: number } {
    return { frames: Object.fromEntries(this.counts), negotiation: this.negotiationFrames };
  }

  private count(frame: Uint8Array, direction: 'sent' | 'received'): void {
    let type: FrameType;
    try {
      type = decodeFrame(frame).type;
    } catch {
      return; // the endpoint reports the bad frame; counting is not the place
    }
    if (NEGOTIATION_TYPES.has(type)) this.negotiationFrames++;
    const key = `${FrameType[type]} ${direction}`;
    this.counts.set(key, (this.counts.get(key) ?? 0) + 1);
  }
}
