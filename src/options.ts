/**
 * Transport options, their defaults, and their validation. Every knob a user
 * can turn is here, with the reason for its default; this is the one
 * validator (the negotiation's knobs included: machines/ callers use
 * validateNegotiationOptions). Environment overrides come from src/env.ts.
 */
import { DEFAULT_NEGOTIATION_CONFIG, type NegotiationConfig } from '../machines/negotiation.js';
import { resolveBounds } from '../cache/options.js';
import { envTransportDefaults } from './env.js';
import { ConfigError } from './errors.js';
import { refuseUnknownKeys } from './option-keys.js';
import { MAX_PEER_ID_BYTES, MAX_TOKEN_BYTES } from './wire/codec.js';

/** The negotiation's knobs (ipc, sameGpuIpc, maxTries, timeouts): the machine's own config type. */
export type NegotiationOptions = NegotiationConfig;

export interface StagingOptions {
  /** Bytes per slot of the staging ring. 4 MiB: big enough to run copies near PCIe/host bandwidth, small enough to pipeline. */
  chunkSize: number;
  /** Slots in the ring; ≥2 so device→host on one side overlaps host→device on the other. */
  slots: number;
  /**
   * The largest staging ring (chunkSize × slots bytes) a peer may name in
   * STAGE_BEGIN: a larger one is refused before it is mapped (that message
   * fails, FIN REFUSED). Default: the larger of this side's own ring and
   * 256 MiB; at most MAX_STAGING_BYTES.
   */
  maxPeerBytes: number;
}

export interface CacheOptions {
  /** Opened remote allocations kept per endpoint (Infinity: unlimited). */
  maxEntries?: number;
  /** Mapped bytes kept per endpoint (Infinity: unlimited). */
  maxBytes?: number;
}

export interface PersistentOptions {
  /**
   * A persistent transfer whose start has not finished within this time
   * fails on both sides (ms): the watchdog releases the device-side wait and
   * the transfer reports SMCUDA_PERSISTENT_STUCK. Default 10 000: far above
   * any round that makes progress, well below a job's patience.
   */
  timeoutMs: number;
  /** Flag slots per endpoint: the most persistent transfers it holds at once. Default 64 (2 KiB of device memory). */
  flagSlots: number;
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
  /**
   * While the IPC negotiation has not settled (before OK or BAD), device
   * messages up to this size travel inline through the host instead of
   * waiting for it; larger ones wait. Default 1 MiB
   * (SMCUDA_NEGOTIATION_EAGER_LIMIT); 0 makes every message above
   * `deviceEagerLimit` wait.
   */
  negotiationEagerLimit?: number;
  negotiation?: Partial<NegotiationOptions>;
  staging?: Partial<StagingOptions>;
  cache?: CacheOptions;
  /** Persistent, GPU-driven transfers (endpoint.register / endpoint.persistent). */
  persistent?: Partial<PersistentOptions>;
  /**
   * Per-job secret, at most 256 UTF-8 bytes. It never leaves this process:
   * the handshake proves it by HMAC over fresh nonces, and a peer that
   * cannot is refused. Make it long and random (≥ 16 random bytes, e.g.
   * hex): a peer that connects can try guesses offline against its proof.
   * Default '': then any process of the same user that can reach the socket
   * authenticates, and Transport.create warns once per process
   * (`SMCUDA_NO_TOKEN`). The CLI makes a fresh one for every job it starts.
   */
  token?: string;
  /**
   * How long a lone copy's completion is polled inline, blocking, on the JS
   * thread before the progress engine takes it (µs; 0: never; step 1 of the
   * engine's policy, docs/architecture.md#progress). Trades a little event-loop time
   * for latency. Default 20: on 2×H200 it shortened an 8 B RGET ping-pong by about
   * a third (bench/diary.md). Only copies ≤ 64 KiB that are alone in
   * flight spin.
   */
  completionSpinUs?: number;
  /**
   * Move control frames through shared-memory rings when the peer agrees
   * and a descriptor channel carries the rings' sealed segments
   * (shm-channel.ts); the channel then carries only wake-ups, large frames
   * and the peer's death. Default true (SMCUDA_CONTROL_RING, src/env.ts).
   */
  controlRing?: boolean;
  /**
   * How long after its last activity a source (an endpoint's ring, its GPU
   * event queue) is polled by the transport's progress engine (µs; 0: never:
   * rings wait for doorbells, completions for the native thread). Default 250: a peer's reply
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
  /**
   * The most an endpoint buffers for its peer: the inline data of the peer's
   * messages no receive has matched yet (plus 64 bytes per message, as
   * `maxUnreadBytes` counts them), the frame arriving on the socket (its
   * length prefix is checked before any of it is buffered), and frames that
   * came out of order. A peer that goes past it is hostile or misconfigured:
   * that endpoint closes with `PeerLimitError` ('SMCUDA_PEER_BUFFER_LIMIT'),
   * as MPI implementations bound their unexpected queues. An honest peer
   * stays within its own `maxUnreadBytes`, or within 64 KiB plus one message,
   * so this must be at least the larger of the peer's `maxUnreadBytes` and
   * its largest message plus 64 KiB. Default 320 MiB (the 64 MiB default
   * window plus the 256 MiB largest frame); at least 64 KiB.
   */
  maxBufferedBytes?: number;
  /**
   * The most descriptors an endpoint holds that its peer sent (imported
   * VMM chunks and pools cached for later RGETs, and those of an offer
   * still arriving, or ahead of its offer). One past it is closed at once
   * and counts as lost (`PeerLimitError`, 'SMCUDA_PEER_FD_LIMIT'): the
   * message of its offer goes by staging, as when a descriptor is lost to
   * EMFILE, so a message spanning more chunks than this always goes by
   * staging. Default 64; at least 1.
   */
  maxPeerDescriptors?: number;
}

export interface ResolvedOptions {
  id: string;
  device: number;
  deviceEagerLimit: number;
  negotiationEagerLimit: number;
  negotiation: NegotiationOptions;
  staging: StagingOptions;
  cache: CacheOptions;
  token: string;
  completionSpinUs: number;
  controlRing: boolean;
  controlSpinUs: number;
  maxUnreadBytes: number;
  maxBufferedBytes: number;
  maxPeerDescriptors: number;
  persistent: PersistentOptions;
}

export const DEFAULT_PERSISTENT: PersistentOptions = { timeoutMs: 10_000, flagSlots: 64 };

/** 64 MiB: room for many large host messages in flight (a 1 MiB stream keeps 64 unread), while a peer that never receives cannot grow this process without bound. */
export const DEFAULT_MAX_UNREAD_BYTES = 64 << 20;
/** options.maxBufferedBytes: the default window plus the largest default frame. */
export const DEFAULT_MAX_BUFFERED_BYTES = 320 << 20;
/** options.maxPeerDescriptors. */
export const DEFAULT_MAX_PEER_DESCRIPTORS = 64;

export const DEFAULT_NEGOTIATION: NegotiationOptions = DEFAULT_NEGOTIATION_CONFIG;

export const DEFAULT_STAGING: Omit<StagingOptions, 'maxPeerBytes'> = { chunkSize: 4 << 20, slots: 4 };

/**
 * 2 GiB: the largest staging ring (chunkSize × slots), this side's or a
 * peer's. A ring is one mapping seen as one ArrayBuffer, and Node 20's
 * ArrayBuffers end at 4 GiB; bandwidth stopped growing long before (a few
 * MiB per chunk pipelines fully), and each ring is pinned host memory.
 */
export const MAX_STAGING_BYTES = 2 ** 31;
/** 256 MiB: a peer's ring this side maps without being told to (staging.maxPeerBytes). */
export const DEFAULT_MAX_PEER_STAGING_BYTES = 256 << 20;
/** Slots are a u16 on the wire (STAGE_BEGIN). */
const MAX_STAGING_SLOTS = 0xffff;

/** 8 KiB: before IPC is OK, below this a host copy inline beats the staging rendezvous. SMCUDA_DEVICE_EAGER_LIMIT overrides the default (src/env.ts). */
export const DEFAULT_DEVICE_EAGER_LIMIT = 8 << 10;
/**
 * 1 MiB: while the negotiation runs, below this a host copy inline beats
 * waiting for it. A fresh pair's first 64 KiB message waited milliseconds for
 * the negotiation (2 × H200: two first cuIpcOpenMemHandle, one after the
 * other, and the control hops); inline, two host copies of 1 MiB take far
 * less. SMCUDA_NEGOTIATION_EAGER_LIMIT overrides it.
 */
export const DEFAULT_NEGOTIATION_EAGER_LIMIT = 1 << 20;

function positiveInt(name: string, v: number, min = 1, max = Number.MAX_SAFE_INTEGER): number {
  if (!Number.isInteger(v) || v < min || v > max) {
    throw new ConfigError(`${name} must be an integer ≥ ${min}${max < Number.MAX_SAFE_INTEGER ? ` and ≤ ${max}` : ''}, got ${String(v)}`);
  }
  return v;
}

/** An options group must be a plain object when given (a number or string would be spread into nothing). */
function group(name: string, v: unknown): void {
  if (v !== undefined && (typeof v !== 'object' || v === null || Array.isArray(v))) throw new ConfigError(`${name} must be an object, got ${String(v)}`);
}

/** staging: chunkSize, slots, and their product, within what one mapping and the wire can hold. */
function validateStaging(o: Partial<StagingOptions> | undefined): StagingOptions {
  group('staging', o);
  const s = { ...DEFAULT_STAGING, ...o };
  positiveInt('staging.chunkSize', s.chunkSize, 4096, MAX_STAGING_BYTES / 2);
  positiveInt('staging.slots', s.slots, 2, MAX_STAGING_SLOTS);
  const ring = s.chunkSize * s.slots;
  if (ring > MAX_STAGING_BYTES) {
    throw new ConfigError(
      `staging.chunkSize × staging.slots (${s.chunkSize} × ${s.slots} = ${ring} bytes) must be at most ${MAX_STAGING_BYTES} (2 GiB): use smaller chunks or fewer slots`,
    );
  }
  const maxPeerBytes = o?.maxPeerBytes ?? Math.max(ring, DEFAULT_MAX_PEER_STAGING_BYTES);
  positiveInt('staging.maxPeerBytes', maxPeerBytes, 8192, MAX_STAGING_BYTES);
  return { chunkSize: s.chunkSize, slots: s.slots, maxPeerBytes };
}

/** Longest timer Node keeps: a longer delay fires after 1 ms instead (with a warning). */
const MAX_TIMER_MS = 0x7fff_ffff;

function positiveMs(name: string, v: number): number {
  if (typeof v !== 'number' || !(v > 0) || v > MAX_TIMER_MS) {
    throw new ConfigError(`${name} must be a positive number of milliseconds up to ${MAX_TIMER_MS}, got ${v}`);
  }
  return v;
}

function bool(name: string, v: unknown): boolean {
  if (typeof v !== 'boolean') throw new ConfigError(`${name} must be true or false, got ${String(v)}`);
  return v;
}

/**
 * The negotiation's knobs over their defaults, validated: the one set of
 * rules, for Transport options and for a Negotiator built directly.
 * maxTries ≥ 0 (0: the first GPU send gives up at once, telling the peer
 * with IPC_ABORT; `ipc: false` never negotiates at all); timeouts positive
 * and within what a Node timer keeps.
 */
export function validateNegotiationOptions(o: Partial<NegotiationOptions> | undefined): NegotiationOptions {
  group('negotiation', o);
  refuseUnknownKeys('negotiation options', o, NEGOTIATION_KEYS);
  const n = { ...DEFAULT_NEGOTIATION, ...o };
  bool('negotiation.ipc', n.ipc);
  bool('negotiation.sameGpuIpc', n.sameGpuIpc);
  positiveInt('negotiation.maxTries', n.maxTries, 0);
  positiveMs('negotiation.requestTimeoutMs', n.requestTimeoutMs);
  positiveMs('negotiation.confirmTimeoutMs', n.confirmTimeoutMs);
  positiveMs('negotiation.checkTimeoutMs', n.checkTimeoutMs);
  return n;
}

/** A string option that must be well-formed Unicode of `min..max` UTF-8 bytes (the limit the wire, or the handshake, has for it). */
function checkWireString(name: string, v: unknown, min: number, max: number): void {
  if (typeof v !== 'string') throw new ConfigError(`${name} must be a string, got ${typeof v}`);
  // A lone surrogate becomes U+FFFD in UTF-8: two different ids (or tokens) would be the same on the wire.
  if (!(v as string & { isWellFormed(): boolean }).isWellFormed()) throw new ConfigError(`${name} contains a lone UTF-16 surrogate (not valid Unicode)`);
  const n = Buffer.byteLength(v, 'utf8');
  if (n < min || n > max) throw new ConfigError(`${name} must be ${min}..${max} UTF-8 bytes, got ${n}${name === 'id' && n > max ? ': use a shorter id' : ''}`);
}

/** Every key of TransportOptions (unknown keys are refused: a misspelt `token` must not make a transport without one). */
export const TRANSPORT_OPTION_KEYS = [
  'id',
  'device',
  'deviceEagerLimit',
  'negotiationEagerLimit',
  'negotiation',
  'staging',
  'cache',
  'token',
  'completionSpinUs',
  'controlRing',
  'controlSpinUs',
  'maxUnreadBytes',
  'maxBufferedBytes',
  'maxPeerDescriptors',
  'persistent',
] as const satisfies readonly (keyof TransportOptions)[];
// Every key listed: a new option must be added above, or compiling fails here.
const allTransportKeys: [Exclude<keyof TransportOptions, (typeof TRANSPORT_OPTION_KEYS)[number]>] extends [never] ? true : false = true;
void allTransportKeys;
const NEGOTIATION_KEYS = Object.keys(DEFAULT_NEGOTIATION_CONFIG) as (keyof NegotiationOptions)[];
const STAGING_KEYS = ['chunkSize', 'slots', 'maxPeerBytes'] as const satisfies readonly (keyof StagingOptions)[];
const CACHE_KEYS = ['maxEntries', 'maxBytes'] as const satisfies readonly (keyof CacheOptions)[];
const PERSISTENT_KEYS = ['timeoutMs', 'flagSlots'] as const satisfies readonly (keyof PersistentOptions)[];

/**
 * `o` over the defaults (and the environment's), validated. `moreKeys`: keys
 * of a wider options type the caller reads itself (Transport.create's
 * `driver`, `trace`, …); any other unknown key is a ConfigError.
 */
export function resolveOptions(o: TransportOptions = {}, moreKeys: readonly string[] = [], where = 'transport options'): ResolvedOptions {
  if (typeof o !== 'object' || o === null) throw new ConfigError(`${where} must be an object, got ${String(o)}`);
  refuseUnknownKeys(where, o, [...TRANSPORT_OPTION_KEYS, ...moreKeys]);
  refuseUnknownKeys('staging options', o.staging, STAGING_KEYS);
  refuseUnknownKeys('cache options', o.cache, CACHE_KEYS);
  refuseUnknownKeys('persistent options', o.persistent, PERSISTENT_KEYS);
  const negotiation = validateNegotiationOptions(o.negotiation);
  const env = envTransportDefaults();
  const staging = validateStaging(o.staging);
  // The cache's own rules, now: an invalid bound would otherwise throw at the first connect, from a socket handler.
  group('cache', o.cache);
  resolveBounds({ ...o.cache });
  const id = o.id ?? `${process.pid}-${Math.random().toString(36).slice(2, 10)}`;
  checkWireString('id', id, 1, MAX_PEER_ID_BYTES);
  // Control characters would garble logs, traces and diagrams (and let an id fake a log line).
  // biome-ignore lint/suspicious/noControlCharactersInRegex: matching control characters is the point
  if (/[\u0000-\u001f\u007f]/.test(id)) throw new ConfigError(`id must not contain control characters, got ${JSON.stringify(id)}`);
  const token = o.token ?? '';
  checkWireString('token', token, 0, MAX_TOKEN_BYTES);
  const deviceEagerLimit = o.deviceEagerLimit ?? env.deviceEagerLimit ?? DEFAULT_DEVICE_EAGER_LIMIT;
  const completionSpinUs = o.completionSpinUs ?? env.completionSpinUs ?? 20;
  positiveInt('completionSpinUs', completionSpinUs, 0);
  positiveInt('deviceEagerLimit', deviceEagerLimit, 0);
  const negotiationEagerLimit = o.negotiationEagerLimit ?? env.negotiationEagerLimit ?? DEFAULT_NEGOTIATION_EAGER_LIMIT;
  positiveInt('negotiationEagerLimit', negotiationEagerLimit, 0);
  const controlRing = o.controlRing ?? env.controlRing ?? true;
  if (typeof controlRing !== 'boolean') throw new ConfigError(`controlRing must be a boolean, got ${String(controlRing)}`);
  const controlSpinUs = o.controlSpinUs ?? env.controlSpinUs ?? 250;
  positiveInt('controlSpinUs', controlSpinUs, 0);
  const device = o.device ?? 0;
  positiveInt('device', device, 0);
  const maxUnreadBytes = o.maxUnreadBytes ?? DEFAULT_MAX_UNREAD_BYTES;
  positiveInt('maxUnreadBytes', maxUnreadBytes, 64 << 10);
  const maxBufferedBytes = o.maxBufferedBytes ?? DEFAULT_MAX_BUFFERED_BYTES;
  positiveInt('maxBufferedBytes', maxBufferedBytes, 64 << 10);
  const maxPeerDescriptors = o.maxPeerDescriptors ?? DEFAULT_MAX_PEER_DESCRIPTORS;
  positiveInt('maxPeerDescriptors', maxPeerDescriptors, 1);
  const persistent = { ...DEFAULT_PERSISTENT, ...o.persistent };
  positiveInt('persistent.timeoutMs', persistent.timeoutMs, 1);
  positiveInt('persistent.flagSlots', persistent.flagSlots, 1);
  return {
    id,
    device,
    deviceEagerLimit,
    negotiationEagerLimit,
    negotiation,
    staging,
    cache: { ...o.cache },
    token,
    completionSpinUs,
    controlRing,
    controlSpinUs,
    maxUnreadBytes,
    maxBufferedBytes,
    maxPeerDescriptors,
    persistent,
  };
}
