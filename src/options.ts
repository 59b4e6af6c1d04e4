/**
 * Transport options, their defaults, and their validation. Every knob a user
 * can turn is here, with the reason for its default.
 */
import { DEFAULT_NEGOTIATION_CONFIG, type NegotiationConfig } from '../machines/negotiation.js';
import { ConfigError } from './errors.js';
import { MAX_PEER_ID_BYTES, MAX_TOKEN_BYTES } from './wire/codec.js';

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
  /**
   * This transport's id, unique in the job; also the negotiation tie-break.
   * 1..256 UTF-8 bytes (what HELLO carries), no control characters (it shows
   * in logs, traces and diagrams). Default: `<pid>-<random>`.
   */
  id?: string;
  /** Device ordinal to use (made current at creation). Default 0 where the driver has a device. */
  device?: number;
  /** While the endpoint is not using IPC, device messages up to this size travel inline through the host (eager). */
  deviceEagerLimit?: number;
  negotiation?: Partial<NegotiationOptions>;
  staging?: Partial<StagingOptions>;
  cache?: CacheOptions;
  /**
   * Per-job secret, at most 256 UTF-8 bytes. It never leaves this process:
   * the handshake proves it by HMAC over fresh nonces, and a peer that
   * cannot is refused. Make it long and random (≥ 16 random bytes, e.g.
   * hex): a peer that connects can try guesses offline against its proof.
   */
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
}

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

/** A string option that must be well-formed Unicode of `min..max` UTF-8 bytes (the limit the wire, or the handshake, has for it). */
function checkWireString(name: string, v: unknown, min: number, max: number): void {
  if (typeof v !== 'string') throw new ConfigError(`${name} must be a string, got ${typeof v}`);
  // A lone surrogate becomes U+FFFD in UTF-8: two different ids (or tokens) would be the same on the wire.
  if (!(v as string & { isWellFormed(): boolean }).isWellFormed()) throw new ConfigError(`${name} contains a lone UTF-16 surrogate (not valid Unicode)`);
  const n = Buffer.byteLength(v, 'utf8');
  if (n < min || n > max) throw new ConfigError(`${name} must be ${min}..${max} UTF-8 bytes, got ${n}${name === 'id' && n > max ? ': use a shorter id' : ''}`);
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
  checkWireString('id', id, 1, MAX_PEER_ID_BYTES);
  // Control characters would garble logs, traces and diagrams (and let an id fake a log line).
  if (/[\u0000-\u001f\u007f]/.test(id)) throw new ConfigError(`id must not contain control characters, got ${JSON.stringify(id)}`);
  const token = o.token ?? '';
  checkWireString('token', token, 0, MAX_TOKEN_BYTES);
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
  return { id, device, deviceEagerLimit, negotiation, staging, cache: { ...o.cache }, token, completionSpinUs, controlRing, controlSpinUs };
}
