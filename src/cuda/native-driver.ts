/**
 * `CudaDriver` over the native addon (native/cuda_*.cc, native/completion.cc,
 * native/shm.cc), i.e. over the real libcuda.so.1.
 *
 * Every argument is checked here (validate.ts) before native code sees it;
 * every native error becomes a typed error (errors.ts): a failing CUresult a
 * `CudaError` with the same code/call/result, an unusable driver a
 * `DriverUnavailableError` (code 'SMCUDA_DRIVER_UNAVAILABLE') with the reason.
 *
 * The addon can be injected (better-sqlite3 style), which is how the tests
 * run this class with fakes on machines without a GPU.
 */
import { ClosedError, ConfigError, CudaError, DriverUnavailableError, SmcudaError } from '../errors.js';
import { loadAddon } from './addon.js';
import type {
  AddressRange,
  CudaDriver,
  DeviceInfo,
  DevicePtr,
  DriverStatus,
  EventHandle,
  EventOptions,
  MemoryType,
  PinnedHostBuffer,
  PointerAttributes,
  SharedSegment,
  StreamHandle,
} from './driver.js';
import type { NativeAddon } from './native-addon.js';
import { createSharedSegment, sharedSegment } from './shared-segment.js';
import {
  assertByte,
  assertBytes,
  assertCopyBatch,
  assertHandle,
  assertIndex,
  assertIpcHandle,
  assertName,
  assertPtr,
  assertSize,
} from './validate.js';

/** CU_EVENT_* flags (cuda.h). */
const CU_EVENT_DISABLE_TIMING = 0x2;
const CU_EVENT_INTERPROCESS = 0x4;

/** CUmemorytype values (cuda.h); 0 means CUDA does not know the pointer. */
const MEMORY_TYPES: Record<number, MemoryType> = { 1: 'host', 2: 'device', 3: 'array', 4: 'unified' };

/** The native error shape (see native-addon.ts). */
interface NativeError {
  code?: unknown;
  call?: unknown;
  result?: unknown;
  detail?: unknown;
  message?: unknown;
}

/** Turns an error thrown by the addon into the typed error smcuda promises. */
export function fromNativeError(err: unknown): unknown {
  if (err instanceof SmcudaError || err instanceof TypeError || err instanceof RangeError) return err;
  if (typeof err !== 'object' || err === null) return err;
  const e = err as NativeError;
  const code = typeof e.code === 'string' ? e.code : undefined;
  const message = typeof e.message === 'string' ? e.message : String(err);
  if (code === undefined) return err;
  if (code.startsWith('CUDA_ERROR_') && typeof e.result === 'number' && typeof e.call === 'string') {
    const detail = typeof e.detail === 'string' && e.detail !== '' ? e.detail : detailOf(message);
    const converted = new CudaError(e.call, code, e.result, detail);
    (converted as { cause?: unknown }).cause = err;
    return converted;
  }
  if (code === 'SMCUDA_CLOSED') return new ClosedError(message);
  if (code === 'SMCUDA_DRIVER_UNAVAILABLE') return new DriverUnavailableError(message, { cause: err });
  // errno codes of the shared-memory calls ('ENOENT', ...).
  return new SmcudaError(code, message, { cause: err });
}

/** The text after "<call> failed: <code> (<n>): " in a native message, if any. */
function detailOf(message: string): string | undefined {
  const m = /^\S+ failed: \S+ \(-?\d+\): (.*)$/s.exec(message);
  return m?.[1];
}

/** Host bytes as the addon takes them: (ArrayBuffer, byteOffset, byteLength). */
function hostRange(name: string, bytes: Uint8Array): [ArrayBuffer, number, number] {
  assertBytes(name, bytes);
  if (!(bytes.buffer instanceof ArrayBuffer)) {
    throw new TypeError(`${name} must be backed by an ArrayBuffer (not a SharedArrayBuffer)`);
  }
  return [bytes.buffer, bytes.byteOffset, bytes.byteLength];
}

export class NativeCudaDriver implements CudaDriver {
  readonly kind = 'native' as const;

  #addon: NativeAddon | undefined;
  #initialised = false;
  #current = -1;
  /** Primary contexts this driver retained, by device ordinal. */
  readonly #contexts = new Map<number, bigint>();
  /** Rejecters of this driver's pending whenComplete promises, for close(). */
  readonly #pending = new Set<(err: Error) => void>();

  /** `addon`: inject a binding (tests); by default the built addon is loaded on first use. */
  constructor(addon?: NativeAddon) {
    this.#addon = addon;
  }

  /** The addon; throws AddonLoadError (with every cause and fix) where it cannot load. */
  #binding(): NativeAddon {
    this.#addon ??= loadAddon();
    return this.#addon;
  }

  /**
   * Calls into the addon, converting its errors. The per-message calls
   * (copies, events, buffer ids) do the same inline instead: V8 did not
   * elide this closure around a native call, ~100 bytes of garbage a call,
   * and a spinner polling an event makes about a million calls a second.
   */
  #call<T>(fn: (addon: NativeAddon) => T): T {
    const addon = this.#binding();
    try {
      return fn(addon);
    } catch (err) {
      throw fromNativeError(err);
    }
  }

  // -- driver and devices ---------------------------------------------------

  status(): DriverStatus {
    try {
      const s = this.#binding().cudaStatus();
      return s.available
        ? { available: true, driverVersion: s.driverVersion, ...(s.memcpyBatch !== undefined ? { memcpyBatch: s.memcpyBatch } : {}) }
        : { available: false, reason: s.reason ?? 'CUDA is unavailable (no reason given)', driverVersion: s.driverVersion };
    } catch (err) {
      return { available: false, reason: err instanceof Error ? err.message : String(err), driverVersion: 0 };
    }
  }

  init(): void {
    if (this.#initialised) return;
    const s = this.status();
    if (!s.available) throw new DriverUnavailableError(`CUDA is unavailable: ${s.reason}`);
    this.#call((a) => a.cuInit());
    this.#initialised = true;
  }

  isReady(): boolean {
    return this.#initialised && this.#current >= 0;
  }

  deviceCount(): number {
    return this.#call((a) => a.cuDeviceGetCount());
  }

  deviceInfo(index: number): DeviceInfo {
    assertIndex('index', index);
    const i = this.#call((a) => a.cuDeviceGetInfo(index));
    return {
      index,
      name: i.name,
      uuid: i.uuid,
      pciBusId: i.pciBusId,
      computeCapability: [i.major, i.minor],
      totalMemory: i.totalMemory,
    };
  }

  canAccessPeer(dev: number, peer: number): boolean {
    assertIndex('dev', dev);
    assertIndex('peer', peer);
    if (dev === peer) return true; // cuDeviceCanAccessPeer(d, d) says 0; a device reaches itself
    return this.#call((a) => a.cuDeviceCanAccessPeer(dev, peer));
  }

  // -- contexts ---------------------------------------------------------------

  setDevice(index: number): void {
    assertIndex('index', index);
    const ctx = this.#contexts.get(index);
    if (ctx !== undefined) {
      this.#call((a) => a.cuCtxSetCurrent(ctx));
    } else {
      this.#contexts.set(index, this.#call((a) => a.cuDevicePrimaryCtxRetain(index)));
    }
    this.#current = index;
  }

  currentDevice(): number {
    return this.#current;
  }

  releaseDevices(): void {
    if (this.#contexts.size === 0) return;
    let first: unknown;
    try {
      this.#call((a) => a.cuCtxSetCurrent(0n)); // nothing current may outlive its context
    } catch (err) {
      first = err;
    }
    for (const index of [...this.#contexts.keys()].reverse()) {
      try {
        this.#call((a) => a.cuDevicePrimaryCtxRelease(index));
      } catch (err) {
        first ??= err;
      }
      this.#contexts.delete(index);
    }
    this.#current = -1;
    if (first !== undefined) throw first;
  }

  // -- memory -----------------------------------------------------------------

  memAlloc(bytes: number): DevicePtr {
    assertSize('bytes', bytes);
    return this.#call((a) => a.cuMemAlloc(bytes));
  }

  memFree(ptr: DevicePtr): void {
    assertPtr('ptr', ptr);
    this.#call((a) => a.cuMemFree(ptr));
  }

  memsetD8(ptr: DevicePtr, value: number, bytes: number): void {
    assertPtr('ptr', ptr);
    assertByte('value', value);
    assertSize('bytes', bytes);
    this.#call((a) => a.cuMemsetD8(ptr, value, bytes));
  }

  memsetD8Async(ptr: DevicePtr, value: number, bytes: number, stream: StreamHandle): void {
    assertPtr('ptr', ptr);
    assertByte('value', value);
    assertSize('bytes', bytes);
    assertHandle('stream', stream);
    this.#call((a) => a.cuMemsetD8Async(ptr, value, bytes, stream));
  }

  memcpyHtoD(dst: DevicePtr, src: Uint8Array): void {
    assertPtr('dst', dst);
    const [buf, off, len] = hostRange('src', src);
    this.#call((a) => a.cuMemcpyHtoD(dst, buf, off, len));
  }

  memcpyDtoH(dst: Uint8Array, src: DevicePtr): void {
    const [buf, off, len] = hostRange('dst', dst);
    assertPtr('src', src);
    this.#call((a) => a.cuMemcpyDtoH(buf, off, len, src));
  }

  memcpyDtoD(dst: DevicePtr, src: DevicePtr, bytes: number): void {
    assertPtr('dst', dst);
    assertPtr('src', src);
    assertSize('bytes', bytes);
    this.#call((a) => a.cuMemcpyDtoD(dst, src, bytes));
  }

  memcpyHtoDAsync(dst: DevicePtr, src: Uint8Array, stream: StreamHandle): void {
    assertPtr('dst', dst);
    const [buf, off, len] = hostRange('src', src);
    assertHandle('stream', stream);
    this.#call((a) => a.cuMemcpyHtoDAsync(dst, buf, off, len, stream));
  }

  memcpyDtoHAsync(dst: Uint8Array, src: DevicePtr, stream: StreamHandle): void {
    const [buf, off, len] = hostRange('dst', dst);
    assertPtr('src', src);
    assertHandle('stream', stream);
    this.#call((a) => a.cuMemcpyDtoHAsync(buf, off, len, src, stream));
  }

  memcpyAsync(dst: DevicePtr, src: DevicePtr, bytes: number, stream: StreamHandle): void {
    assertPtr('dst', dst);
    assertPtr('src', src);
    assertSize('bytes', bytes);
    assertHandle('stream', stream);
    const a = this.#addon ?? this.#binding();
    try {
      a.cuMemcpyAsync(dst, src, bytes, stream);
    } catch (err) {
      throw fromNativeError(err);
    }
  }

  memcpyBatchAsync(dsts: BigUint64Array, srcs: BigUint64Array, sizes: Float64Array, count: number, stream: StreamHandle): void {
    assertCopyBatch(dsts, srcs, sizes, count);
    assertHandle('stream', stream);
    const device = Math.max(0, this.#current);
    const a = this.#addon ?? this.#binding();
    try {
      a.cuMemcpyBatchAsync(dsts, srcs, sizes, count, stream, device);
    } catch (err) {
      throw fromNativeError(err);
    }
  }

  memGetAddressRange(ptr: DevicePtr): AddressRange {
    assertPtr('ptr', ptr);
    return this.#call((a) => a.cuMemGetAddressRange(ptr));
  }

  pointerAttributes(ptr: DevicePtr): PointerAttributes {
    assertPtr('ptr', ptr);
    const r = this.#call((a) => a.cuPointerGetAttributes(ptr));
    const memoryType = MEMORY_TYPES[r.memoryType];
    if (memoryType === undefined) {
      // cuPointerGetAttributes succeeds on unknown pointers with memory type 0;
      // report what cuPointerGetAttribute would (CUDA_ERROR_INVALID_VALUE).
      throw new CudaError('cuPointerGetAttributes', 'CUDA_ERROR_INVALID_VALUE', 1, `0x${ptr.toString(16)} is not memory CUDA knows`);
    }
    return { bufferId: r.bufferId, device: r.device, memoryType };
  }

  bufferId(ptr: DevicePtr): bigint {
    assertPtr('ptr', ptr);
    const a = this.#addon ?? this.#binding();
    try {
      return a.cuPointerGetBufferId(ptr);
    } catch (err) {
      throw fromNativeError(err);
    }
  }

  hostAlloc(bytes: number): PinnedHostBuffer {
    assertSize('bytes', bytes);
    const buffer = this.#call((a) => a.cuMemHostAlloc(bytes));
    const view = new Uint8Array(buffer);
    let freed = false;
    return {
      bytes: view,
      free: () => {
        if (freed) return;
        freed = true;
        this.#call((a) => a.cuMemFreeHost(buffer));
      },
    };
  }

  hostRegister(bytes: Uint8Array): () => void {
    const [buf, off, len] = hostRange('bytes', bytes);
    this.#call((a) => a.cuMemHostRegister(buf, off, len));
    let registered = true;
    return () => {
      if (!registered) return;
      registered = false;
      this.#call((a) => a.cuMemHostUnregister(buf, off));
    };
  }

  // -- IPC --------------------------------------------------------------------

  ipcGetMemHandle(ptr: DevicePtr): Uint8Array {
    assertPtr('ptr', ptr);
    return new Uint8Array(this.#call((a) => a.cuIpcGetMemHandle(ptr)));
  }

  ipcOpenMemHandle(handle: Uint8Array): DevicePtr {
    assertIpcHandle('handle', handle);
    const [buf, off] = hostRange('handle', handle);
    return this.#call((a) => a.cuIpcOpenMemHandle(buf, off));
  }

  ipcCloseMemHandle(ptr: DevicePtr): void {
    assertPtr('ptr', ptr);
    this.#call((a) => a.cuIpcCloseMemHandle(ptr));
  }

  ipcGetEventHandle(event: EventHandle): Uint8Array {
    assertHandle('event', event);
    return new Uint8Array(this.#call((a) => a.cuIpcGetEventHandle(event)));
  }

  ipcOpenEventHandle(handle: Uint8Array): EventHandle {
    assertIpcHandle('handle', handle);
    const [buf, off] = hostRange('handle', handle);
    return this.#call((a) => a.cuIpcOpenEventHandle(buf, off));
  }

  // -- streams and events -----------------------------------------------------

  streamCreate(): StreamHandle {
    return this.#call((a) => a.cuStreamCreate());
  }

  streamDestroy(stream: StreamHandle): void {
    assertHandle('stream', stream);
    this.#call((a) => a.cuStreamDestroy(stream));
  }

  streamSynchronize(stream: StreamHandle): void {
    assertHandle('stream', stream);
    this.#call((a) => a.cuStreamSynchronize(stream));
  }

  streamWaitEvent(stream: StreamHandle, event: EventHandle): void {
    assertHandle('stream', stream);
    assertHandle('event', event);
    this.#call((a) => a.cuStreamWaitEvent(stream, event));
  }

  eventCreate(options: EventOptions = {}): EventHandle {
    if (typeof options !== 'object' || options === null) throw new TypeError('options must be an object');
    let flags = 0;
    if (options.disableTiming) flags |= CU_EVENT_DISABLE_TIMING;
    // CUDA requires interprocess events to have timing disabled.
    if (options.interprocess) flags |= CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING;
    return this.#call((a) => a.cuEventCreate(flags));
  }

  eventDestroy(event: EventHandle): void {
    assertHandle('event', event);
    this.#call((a) => a.cuEventDestroy(event));
  }

  eventRecord(event: EventHandle, stream: StreamHandle): void {
    assertHandle('event', event);
    assertHandle('stream', stream);
    const a = this.#addon ?? this.#binding();
    try {
      a.cuEventRecord(event, stream);
    } catch (err) {
      throw fromNativeError(err);
    }
  }

  eventQuery(event: EventHandle): boolean {
    assertHandle('event', event);
    const a = this.#addon ?? this.#binding();
    try {
      return a.cuEventQuery(event);
    } catch (err) {
      throw fromNativeError(err);
    }
  }

  eventSynchronize(event: EventHandle): void {
    assertHandle('event', event);
    this.#call((a) => a.cuEventSynchronize(event));
  }

  eventElapsedTime(start: EventHandle, end: EventHandle): number {
    assertHandle('start', start);
    assertHandle('end', end);
    return this.#call((a) => a.cuEventElapsedTime(start, end));
  }

  whenComplete(event: EventHandle): Promise<void> {
    try {
      assertHandle('event', event);
    } catch (err) {
      return Promise.reject(err);
    }
    const ctx = this.#contexts.get(this.#current);
    if (ctx === undefined) {
      return Promise.reject(new ConfigError('whenComplete needs a current device: call setDevice(index) first'));
    }
    let native: Promise<void>;
    try {
      native = this.#binding().whenEventComplete(event, ctx);
    } catch (err) {
      return Promise.reject(fromNativeError(err));
    }
    return new Promise<void>((resolve, reject) => {
      this.#pending.add(reject);
      native.then(
        () => {
          this.#pending.delete(reject);
          resolve();
        },
        (err: unknown) => {
          this.#pending.delete(reject);
          reject(fromNativeError(err));
        },
      );
    });
  }

  // -- shared host memory -------------------------------------------------------

  shmCreate(name: string, bytes: number): SharedSegment {
    assertName('name', name);
    assertSize('bytes', bytes);
    const addon = this.#binding();
    return createSharedSegment(addon, name, bytes, (fn) => this.#call(fn));
  }

  shmOpen(name: string): SharedSegment {
    assertName('name', name);
    const addon = this.#binding();
    return sharedSegment(name, this.#call((a) => a.shmOpen(name)), (b) => this.#call(() => addon.shmClose(b)));
  }

  shmUnlink(name: string): void {
    assertName('name', name);
    this.#call((a) => a.shmUnlink(name));
  }

  /**
   * Rejects this driver's pending whenComplete promises (ClosedError), stops
   * the poller thread and releases the retained primary contexts. The poller
   * belongs to the addon instance (one per Node environment) and restarts on
   * the next whenComplete of any driver.
   */
  close(): void {
    const closed = new ClosedError('the CUDA driver was closed while waiting for an event');
    for (const reject of this.#pending) reject(closed);
    this.#pending.clear();
    if (this.#addon === undefined) return; // never loaded: nothing to release
    try {
      this.#addon.completionShutdown();
    } finally {
      this.releaseDevices();
      this.#initialised = false;
    }
  }
}
