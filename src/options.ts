/**
 * Transport options, their defaults, and their validation. Every knob a user
 * can turn is here, with the reason for its default.
 */
import { DEFAULT_NEGOTIATION_CONFIG, type NegotiationConfig } from '../machines/negotiation.js';
import { ConfigError } from './errors.js';

/** The negotiation's knobs (ipc, sameGpuIpc, maxTries, timeouts): the machine's own config type. */
export type NegotiationOptions = NegotiationConfig;

export interface StagingOptions {
  /** Bytes per slot of the staging ring. 4 MiB: big enough to run copies near PCIe/host bandwidth, small enough to pipeline. */
  chunkSize: number;
  /** Slots in the ring; ≥2 so device→host on one side overlaps host→device on the other. */
  slots: number;
}

export interface CacheOptions {
  /** Opened remote allocations kept per endpoint (Infinity: unlimited). */
  maxEntries?: number;
  /** Mapped bytes kept per endpoint (Infinity: unlimited). */
  maxBytes?: number;
}

export interface TransportOptions {
  /** This transport's id, unique in the job; also the negotiation tie-break. Default: `<pid>-<random>`. */
  id?: string;
  /** Device ordinal to use (made current at creation). Default 0 where the driver has a device. */
  device?: number;
  /** While the endpoint is not using IPC, device messages up to this size travel inline through the host (eager). */
  deviceEagerLimit?: number;
  negotiation?: Partial<NegotiationOptions>;
  staging?: Partial<StagingOptions>;
  cache?: CacheOptions;
  /** Per-job secret carried by HELLO; a peer with another token is refused. */
  token?: string;
  /**
   * How long a lone copy's completion is polled on the JS thread before the
   * native poller takes over (µs; 0: never). Trades a little event-loop time
   * for latency. Default 20: on 2×H200 it brought an 8 B RGET ping-pong from
   * 51 to 35 µs (docs/benchmarks.md). Only copies ≤ 64 KiB that are alone in
   * flight spin.
   */
  completionSpinUs?: number;
  /**
   * Move control frames through shared-memory rings when the peer agrees
   * (shm-channel.ts); the channel then carries only wake-ups, large frames
   * and the peer's death. Default true; SMCUDA_CONTROL_RING=0 turns it off.
   */
  controlRing?: boolean;
  /**
   * How long after its last frame an endpoint's ring is polled on the JS
   * thread (µs; 0: never, wait for doorbells). Default 250: a peer's reply
   * (an 8 B GPU copy plus its JS) comes well within it, so the socket hop is
   * skipped both ways; 50 µs was too short on small virtual machines, whose
   * processes wake late (docs/benchmarks.md). Costs at most that much of one
   * core after the last frame.
   */
  controlSpinUs?: number;
  /**
   * Backpressure: the most an endpoint lets its peer hold unread — bytes of
   * messages sent that no receive of the peer has matched yet, counting each
   * message's inline data plus 64 bytes (so RGET and staged messages, whose
   * data stays in the sender's buffer, count 64). Past it, send() waits, in
   * order, until the peer receives (it rejects if the endpoint closes or the
   * peer is lost meanwhile, or its signal aborts); a peer that never receives
   * holds at most this much of this process's data, plus one message when a
   * message larger than the rest of the window is let through because less
   * than 64 KiB is unread. Default 64 MiB; at least 64 KiB.
   */
  maxUnreadBytes?: number;
}

export interface ResolvedOptions {
  id: string;
  device: number;
  deviceEagerLimit: number;
  negotiation: NegotiationOptions;
  staging: StagingOptions;
  cache: CacheOptions;
  token: string;
  completionSpinUs: number;
  controlRing: boolean;
  controlSpinUs: number;
  maxUnreadBytes: number;
}

/** 64 MiB: room for many large host messages in flight (a 1 MiB stream keeps 64 unread), while a peer that never receives cannot grow this process without bound. */
export const DEFAULT_MAX_UNREAD_BYTES = 64 << 20;

export const DEFAULT_NEGOTIATION: NegotiationOptions = DEFAULT_NEGOTIATION_CONFIG;

export const DEFAULT_STAGING: StagingOptions = { chunkSize: 4 << 20, slots: 4 };

/** 8 KiB: before IPC is OK, below this a host copy inline beats the staging rendezvous. SMCUDA_DEVICE_EAGER_LIMIT overrides the default. */
export const DEFAULT_DEVICE_EAGER_LIMIT = 8 << 10;

function positiveInt(name: string, v: number, min = 1): number {
  if (!Number.isInteger(v) || v < min) throw new ConfigError(`${name} must be an integer ≥ ${min}, got ${v}`);
  return v;
}

function positiveMs(name: string, v: number): number {
  if (typeof v !== 'number' || !(v > 0)) throw new ConfigError(`${name} must be a positive number of milliseconds, got ${v}`);
  return v;
}

/** Reads an integer default from the environment (for tuning without code changes), or undefined. */
function envInt(name: string): number | undefined {
  const v = process.env[name];
  if (v === undefined || v === '') return undefined;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0) throw new ConfigError(`${name} must be a non-negative integer, got ${JSON.stringify(v)}`);
  return n;
}

export function resolveOptions(o: TransportOptions = {}): ResolvedOptions {
  const negotiation = { ...DEFAULT_NEGOTIATION, ...o.negotiation };
  positiveInt('negotiation.maxTries', negotiation.maxTries);
  positiveMs('negotiation.requestTimeoutMs', negotiation.requestTimeoutMs);
  positiveMs('negotiation.confirmTimeoutMs', negotiation.confirmTimeoutMs);
  positiveMs('negotiation.checkTimeoutMs', negotiation.checkTimeoutMs);
  const staging = { ...DEFAULT_STAGING, ...o.staging };
  positiveInt('staging.chunkSize', staging.chunkSize, 4096);
  positiveInt('staging.slots', staging.slots, 2);
  const id = o.id ?? `${process.pid}-${Math.random().toString(36).slice(2, 10)}`;
  if (typeof id !== 'string' || id.length === 0 || id.length > 200) throw new ConfigError(`id must be a non-empty string of at most 200 characters`);
  const deviceEagerLimit = o.deviceEagerLimit ?? envInt('SMCUDA_DEVICE_EAGER_LIMIT') ?? DEFAULT_DEVICE_EAGER_LIMIT;
  const completionSpinUs = o.completionSpinUs ?? envInt('SMCUDA_COMPLETION_SPIN_US') ?? 20;
  positiveInt('completionSpinUs', completionSpinUs, 0);
  positiveInt('deviceEagerLimit', deviceEagerLimit, 0);
  const controlRing = o.controlRing ?? envInt('SMCUDA_CONTROL_RING') !== 0;
  if (typeof controlRing !== 'boolean') throw new ConfigError(`controlRing must be a boolean, got ${String(controlRing)}`);
  const controlSpinUs = o.controlSpinUs ?? envInt('SMCUDA_CONTROL_SPIN_US') ?? 250;
  positiveInt('controlSpinUs', controlSpinUs, 0);
  const device = o.device ?? 0;
  positiveInt('device', device, 0);
  const maxUnreadBytes = o.maxUnreadBytes ?? DEFAULT_MAX_UNREAD_BYTES;
  positiveInt('maxUnreadBytes', maxUnreadBytes, 64 << 10);
  return { id, device, deviceEagerLimit, negotiation, staging, cache: { ...o.cache }, token: o.token ?? '', completionSpinUs, controlRing, controlSpinUs, maxUnreadBytes };
}
