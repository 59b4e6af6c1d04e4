/**
 * A ControlChannel carries whole control frames, in order, between two
 * processes. smcuda ships an in-memory pair (tests) and a Unix domain socket
 * channel; a runtime may bring its own (its existing control plane) by
 * implementing this interface.
 *
 * Contract:
 *  - `send` hands over one whole frame; frames arrive whole and in order.
 *    The channel may keep a reference to `frame` until it is written, so the
 *    caller must not modify it after `send`.
 *  - `send` returns false when the channel's buffer is above its high-water
 *    mark; the caller should wait for 'drain' before sending much more.
 *    Frames sent anyway are still queued, never dropped.
 *  - 'close' is emitted exactly once, with an Error when the channel failed
 *    (peer reset, bad framing) and without one on an orderly close (either
 *    side called close(), or the peer ended the stream).
 *  - After 'close', `send` throws ClosedError.
 *  - A 'frame' whose `transient` is true is a view of memory the channel
 *    reuses once the listeners return (ShmChannel's ring): a listener
 *    copies what it keeps. Other frames are the listener's.
 */
import type { EventEmitter } from 'node:events';

export interface ControlChannelEvents {
  frame: [frame: Uint8Array, transient?: boolean];
  drain: [];
  close: [error?: Error];
}

export interface ControlChannel extends EventEmitter<ControlChannelEvents> {
  /** For logs and traces, e.g. 'unix:/run/smcuda/job.sock' or 'memory:a->b'. */
  readonly label: string;
  readonly closed: boolean;
  /** Optional: the peer's pid as the kernel reports it (SO_PEERCRED); the handshake binds its proofs to it. */
  readonly peerPid?: number | undefined;
  /**
   * Optional: the peer is authenticated, so lift the small frame bound the
   * channel applied before (UnixChannel's `handshakeFrameBytes`).
   */
  handshakeDone?(): void;
  /**
   * Optional: bounds what the channel buffers for the peer by `room()`
   * (bytes, asked as each frame starts): a frame larger than it is refused
   * from its length prefix, before any of it is buffered, and frames held out
   * of order count against it too. The channel then closes with
   * PeerLimitError. The endpoint passes what is left of its maxBufferedBytes.
   */
  limitBuffered?(room: () => number): void;
  send(frame: Uint8Array): boolean;
  /**
   * Optional: sends ONE frame made of `parts` (their concatenation) without
   * copying them into a single buffer first. ShmChannel spills frames too
   * large for its ring this way (a SPILL head, then the frame). Same rules
   * as `send`; where a channel lacks it, the parts are joined and sent.
   */
  sendParts?(parts: readonly Uint8Array[]): boolean;
  /**
   * Optional: whether the channel's handle (a socket) keeps the process
   * alive. The transport refs it while an operation is pending and unrefs it
   * when idle (progress/keep-alive.ts); an unref'd channel still delivers
   * while something else keeps the event loop running.
   */
  ref?(): void;
  unref?(): void;
  close(): void;
}
