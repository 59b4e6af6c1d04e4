/**
 * One file over 500 lines, as one concept: the CudaDriver contract over
 * simulated memory, one method per call; memory, streams, events, IPC
 * handles, fd memory and faults already live in sim/, this file only wires
 * them to the contract.
 *
 * SimulatedCudaDriver: the CudaDriver contract without a GPU.
 *
 * "Device memory" is POSIX shared memory (sim/memory.ts), so two real
 * processes — or two driver instances in one process, which the simulator
 * treats as two processes — can exchange IPC handles and copy each other's
 * memory. Async work runs in stream order on later macrotasks
 * (sim/streams.ts). The world (devices, peer access, visibility) and the
 * injected faults come from options or the environment (sim/config.ts), so
 * child processes inherit them.
 *
 * VMM and pool memory (vmmAlloc, memPoolCreate) is made of real memfds
 * mapped into host address ranges (sim/fd-memory.ts), so their descriptors
 * can be passed to and imported by another process for real.
 *
 * Pinned host buffers (hostAlloc) have simulated device addresses of their
 * own (sim/pinned-host.ts), which every call taking a device pointer accepts.
 *
 * Where the real driver's behaviour matters to smcuda, the simulator copies
 * it: memAlloc before setDevice → CUDA_ERROR_INVALID_CONTEXT; double free and
 * garbage or stale IPC handles → CUDA_ERROR_INVALID_VALUE; opening one's own
 * handle → CUDA_ERROR_INVALID_CONTEXT; opening an open handle → the same
 * pointer; free + realloc → same address, new handle bytes, new buffer id.
 * Simplifications: the default stream does not synchronize with other
 * streams; releaseDevices keeps allocations; pointerAttributes of an unknown
 * pointer throws CUDA_ERROR_INVALID_VALUE.
 */
import { debug } from '../debug.js';
import { envSim, envSimFdFaults } from '../env.js';
import { AddonLoadError, ArgumentRangeError, ArgumentTypeError } from '../errors.js';
import { offExit, onExit } from '../exit-hooks.js';
import { loadAddon } from './addon.js';
import { DeviceAllocation } from './device-allocation.js';
import type {
  CaptureMode,
  GraphExecHandle,
  GraphHandle,
  FunctionHandle,
  KernelArg,
  LaunchConfig,
  ModuleHandle,
  ModuleLoadInfo,
  StreamMemOp,
  AddressRange,
  CudaDriver,
  DeviceInfo,
  DevicePtr,
  DriverStatus,
  EventHandle,
  EventOptions,
  FdChunk,
  FdMemoryResources,
  MemoryKindInfo,
  MemPoolOptions,
  PinnedHostBuffer,
  PoolHandle,
  PoolImportOptions,
  VmmAllocation,
  VmmAllocOptions,
  VmmExport,
  VmmImport,
  VmmImportOptions,
  PointerAttributes,
  SharedSegment,
  StreamHandle,
  WaitCondition,
} from './driver.js';
import type { NativeFdPassing, NativeHostMapping, NativeShm } from './native-addon.js';
import { resolveSimWorld, SIM_MULTIPROCESSORS, type SimDevice, type SimFaults, type SimOptions, type SimWorld } from './sim/config.js';
import { EVENT_STATE_BYTES, SimEvent } from './sim/events.js';
import { FaultState } from './sim/faults.js';
import { FdFaultState, type SimFdFaults } from './sim/fd-faults.js';
import { SIM_GRANULARITY, SimFdMemory } from './sim/fd-memory.js';
import { decodeHandle, encodeHandle, segmentName, type SimHandle } from './sim/ipc-handle.js';
import { localOwner } from '../segment-owner.js';
import { createSharedSegment, sharedSegment } from './shared-segment.js';
import { hex, SimMemory } from './sim/memory.js';
import { mulberry32, shuffle } from './sim/prng.js';
import { bindLaunch, memOpTwinOf, parsePtx, type SimEntry } from './sim/kernels.js';
import { assertEntryName, assertKernelArgs, assertLaunchConfig, assertPtx, MAX_BATCH_MEM_OPS } from './validate-gpu-driven.js';
import { cudaError } from './sim/result-codes.js';
import { Scheduler, sleepSync, type SimStream, type WaitItem } from './sim/streams.js';
import { Capture, freshItem, GraphTable, SimGraph } from './sim/capture.js';
import { memOpBatch, type ResolvedMemOp } from './sim/mem-ops.js';
import { SimPinnedHost } from './sim/pinned-host.js';
import { assertCaptureMode, assertWaitCondition, assertMemOps, assertU32, assertU64, assertWordAddress } from './validate-gpu-driven.js';
import {
  assertByte,
  assertBytes,
  assertHostView,
  viewBytes,
  assertChunkCount,
  assertCopyBatch,
  assertFd,
  assertFdChunks,
  assertOptions,
  assertPoolExportData,
  assertHandle,
  assertIndex,
  assertIpcHandle,
  assertName,
  assertPtr,
  assertSize,
} from './validate.js';

export interface SimDriverOptions extends SimOptions {
  /** The shared-memory calls; default: the native addon's. Injectable for tests. */
  shm?: NativeShm;
  /** The descriptor and host-mapping calls behind VMM/pool memory; default: the native addon's. */
  fdNative?: NativeFdPassing & NativeHostMapping;
  /** Where SMCUDA_SIM / SMCUDA_SIM_VISIBLE are read; default process.env. */
  env?: Record<string, string | undefined>;
}

/** cuDriverGetVersion of the simulator: "CUDA 13.0". */
export const SIM_DRIVER_VERSION = 13000;

/** How long eventSynchronize waits on another process's event before giving up. */
const REMOTE_SYNC_LIMIT_MS = 60_000;

export class SimulatedCudaDriver implements CudaDriver {
  /**
   * Where every driver made from now on is noted, while set (the test suite
   * sets it, to check each driver's lifetimeViolations after each test); off
   * by default, so a process that makes drivers does not keep them.
   * @internal
   */
  static registry: Set<SimulatedCudaDriver> | undefined;

  readonly kind = 'sim' as const;
  /** The simulated world this process lives in. */
  readonly world: SimWorld;
  /** This instance's tag in IPC handles (instances are separate "processes"). */
  readonly instance = (Math.random() * 0x1_0000_0000) >>> 0;

  private readonly shm: NativeShm | undefined;
  private readonly fdNative: (NativeFdPassing & NativeHostMapping) | undefined;
  private readonly fdFaults: FdFaultState;
  private fdMemory: SimFdMemory | undefined;
  private readonly loadError: Error | undefined;
  private readonly faults: FaultState;
  /** Draws the order of a batch's copies (seeded by world.batchOrderSeed). */
  private readonly batchOrder: () => number;
  private readonly visibleDevices: SimDevice[];
  private memory: SimMemory | undefined;
  /** Pinned host buffers (hostAlloc) by their simulated device address. */
  private readonly pinned = new SimPinnedHost();
  private readonly scheduler = new Scheduler();
  private readonly graphs = new GraphTable();
  /** Captures in progress (sync calls are refused while one in 'global' or 'thread-local' mode is). */
  private readonly captures = new Set<Capture>();
  private readonly events = new Map<EventHandle, SimEvent>();
  private nextEvent = 0xe000n;
  private readonly modules = new Map<ModuleHandle, Map<string, SimEntry>>();
  private readonly functions = new Map<FunctionHandle, { module: ModuleHandle; entry: SimEntry }>();
  private nextModule = 0xd000n;
  private nextFunction = 0xf000n;
  private readonly hostRegistrations = new WeakMap<ArrayBufferLike, Array<[number, number]>>();
  private initialized = false;
  private current = -1;
  private closed = false;
  private exitHook: (() => void) | undefined;

  constructor(options: SimDriverOptions = {}) {
    SimulatedCudaDriver.registry?.add(this);
    const { shm, fdNative, env, ...world } = options;
    this.world = resolveSimWorld(world, env ?? envSim());
    this.visibleDevices = this.world.visible.map((i) => this.world.devices[i]!);
    this.faults = new FaultState(this.world.faults, this.world.devices);
    this.batchOrder = mulberry32(this.world.batchOrderSeed);
    debug(
      'sim driver %d: a batch runs its copies in a seeded order, seed %d (replay: SMCUDA_SIM={"batchOrderSeed":%d})',
      this.instance,
      this.world.batchOrderSeed,
      this.world.batchOrderSeed,
    );
    this.fdFaults = new FdFaultState(FdFaultState.fromEnv(env ?? envSimFdFaults()));
    if (shm) {
      this.shm = shm;
    } else {
      try {
        this.shm = loadAddon();
      } catch (err) {
        this.loadError = err as Error;
      }
    }
    if (fdNative) {
      this.fdNative = fdNative;
    } else if (!this.loadError) {
      try {
        this.fdNative = loadAddon();
      } catch {
        // Only fd-shared memory needs it: status() says fdMemory: false.
      }
    }
  }

  /** Changes the injected faults of the fd-shared memory kinds (see sim/fd-faults.ts). */
  injectFdFaults(faults: SimFdFaults): void {
    this.fdFaults.inject(faults);
  }

  /** Events of this instance not destroyed yet (tests count them to find leaks). */
  get liveEvents(): number {
    return this.events.size;
  }

  /** Bytes of device memory allocated (cuMemAlloc) and not freed yet (tests count them to find leaks). */
  get allocatedBytes(): number {
    return this.memory?.allocatedBytes ?? 0;
  }

  /** Host ranges registered (cuMemHostRegister) and not unregistered yet (tests count them to find leaks). */
  liveRegistrations = 0;

  /**
   * Releases that came while the GPU still used what they release, each
   * described: an event destroyed while a whenComplete still waits on it
   * (the native completion thread would query freed memory), a host range
   * unregistered or a peer mapping closed with copies into or out of it still
   * queued. A real driver makes these use-after-frees; the simulator notes
   * them (and then completes the work, as before) so tests can assert none.
   * Also a device allocation freed with copies still queued (cuMemFree waits
   * for them: a stall, not a use-after-free, but a release before the GPU is
   * done all the same).
   */
  readonly lifetimeViolations: string[] = [];

  /** Changes the injected faults of this instance (the named ones; others stay). */
  inject(faults: SimFaults): void {
    this.faults.inject(faults);
  }

  // -- driver and devices -----------------------------------------------------

  status(): DriverStatus {
    if (this.loadError) {
      const reason = this.loadError instanceof AddonLoadError ? this.loadError.causes.join('; ') : this.loadError.message;
      return { available: false, reason: `the simulator needs the addon's shared memory: ${reason}`, driverVersion: 0 };
    }
    return this.fdNative
      ? { available: true, driverVersion: SIM_DRIVER_VERSION, fdMemory: true }
      : { available: true, driverVersion: SIM_DRIVER_VERSION, fdMemory: false, fdMemoryReason: 'the addon has no descriptor calls' };
  }

  init(): void {
    if (this.closed) throw cudaError('cuInit', 'CUDA_ERROR_DEINITIALIZED', 'this driver instance was closed; create a new one');
    if (this.loadError) throw this.loadError;
    if (this.initialized) return;
    this.memory = new SimMemory({
      shm: this.shm!,
      pid: process.pid,
      start: localOwner().start,
      instance: this.instance,
      devices: this.visibleDevices,
    });
    const memory = this.memory;
    if (this.fdNative) {
      this.fdMemory = new SimFdMemory({
        native: this.fdNative,
        seals: typeof this.shm?.sealedMap === 'function' ? this.shm : undefined, // VMM chunks sealed, imports checked
        devices: this.visibleDevices,
        newBufferId: () => memory.newBufferId(),
        importFailure: () => this.fdFaults.importFailure(),
      });
    }
    this.initialized = true;
  }

  isReady(): boolean {
    const notReady = this.faults.notReadyNow();
    return this.initialized && this.current >= 0 && !notReady;
  }

  deviceCount(): number {
    this.requireInit('cuDeviceGetCount');
    return this.visibleDevices.length;
  }

  deviceInfo(index: number): DeviceInfo {
    assertIndex('index', index);
    const d = this.device(index, 'cuDeviceGet');
    return {
      index,
      name: d.name,
      uuid: d.uuid,
      pciBusId: d.pciBusId,
      computeCapability: [d.computeCapability[0], d.computeCapability[1]],
      multiprocessors: d.multiprocessors ?? SIM_MULTIPROCESSORS,
      totalMemory: d.totalMemory,
    };
  }

  canAccessPeer(dev: number, peer: number): boolean {
    assertIndex('dev', dev);
    assertIndex('peer', peer);
    const a = this.device(dev, 'cuDeviceCanAccessPeer').uuid;
    const b = this.device(peer, 'cuDeviceCanAccessPeer').uuid;
    if (a === b) return true;
    if (this.faults.peerDenied(a, b)) return false;
    const pairs = this.world.peerPairs;
    if (pairs === 'all') return true;
    if (pairs === 'none') return false;
    return pairs.some(([x, y]) => (x === a && y === b) || (x === b && y === a));
  }

  // -- contexts -----------------------------------------------------------------

  setDevice(index: number): void {
    assertIndex('index', index);
    this.device(index, 'cuDevicePrimaryCtxRetain');
    this.current = index;
  }

  currentDevice(): number {
    return this.current;
  }

  releaseDevices(): void {
    this.current = -1;
  }

  // -- memory ---------------------------------------------------------------------

  memAlloc(bytes: number): DevicePtr {
    assertSize('bytes', bytes);
    const mem = this.requireContext('cuMemAlloc');
    this.refuseDuringCapture('cuMemAlloc');
    if (bytes === 0) throw cudaError('cuMemAlloc', 'CUDA_ERROR_INVALID_VALUE', 'cannot allocate 0 bytes');
    const a = mem.alloc(this.current, bytes);
    this.ensureExitHook();
    return a.ptr;
  }

  memFree(ptr: DevicePtr): void {
    assertPtr('ptr', ptr);
    const mem = this.requireContext('cuMemFree');
    this.refuseDuringCapture('cuMemFree');
    const a = mem.find(ptr);
    if (a && !a.opened && a.ptr === ptr && this.scheduler.anyTouching(a)) {
      // cuMemFree waits for work using the memory: not a use-after-free, but a
      // release before the GPU is done (smcuda's own buffers never are: a
      // receive's new buffer is freed after its copies complete).
      this.lifetimeViolations.push(`cuMemFree of ${hex(ptr)} with copies into or out of it still queued`);
      this.scheduler.drainTouching(a);
    }
    mem.free(ptr);
    DeviceAllocation.noteFreed(this, ptr);
  }

  memAllocBuffer(bytes: number): DeviceAllocation {
    return DeviceAllocation.track(this, this.memAlloc(bytes), bytes, this.current);
  }

  memsetD8(ptr: DevicePtr, value: number, bytes: number): void {
    assertPtr('ptr', ptr);
    assertByte('value', value);
    assertSize('bytes', bytes);
    const v = this.viewOf(this.requireContext('cuMemsetD8'), 'cuMemsetD8', ptr, bytes);
    if (this.faults.pageableLagMs > 0) return this.lagging('cuMemsetD8', v.alloc, () => v.bytes.fill(value));
    this.syncWork(bytes, () => v.bytes.fill(value));
  }

  memsetD8Async(ptr: DevicePtr, value: number, bytes: number, stream: StreamHandle): void {
    assertPtr('ptr', ptr);
    assertByte('value', value);
    assertSize('bytes', bytes);
    assertHandle('stream', stream);
    const v = this.viewOf(this.requireContext('cuMemsetD8Async'), 'cuMemsetD8Async', ptr, bytes);
    this.asyncWork(stream, 'cuMemsetD8Async', bytes, [v.alloc], () => v.bytes.fill(value));
  }

  memcpyHtoD(dst: DevicePtr, view: ArrayBufferView): void {
    assertPtr('dst', dst);
    assertHostView('src', view);
    const src = viewBytes(view);
    const d = this.viewOf(this.requireContext('cuMemcpyHtoD'), 'cuMemcpyHtoD', dst, src.byteLength);
    if (this.faults.pageableLagMs > 0) {
      const staged = src.slice(); // the driver copies pageable bytes out before returning
      return this.lagging('cuMemcpyHtoD', d.alloc, () => d.bytes.set(staged));
    }
    this.syncWork(src.byteLength, () => d.bytes.set(src));
  }

  memcpyDtoH(view: ArrayBufferView, src: DevicePtr): void {
    assertHostView('dst', view);
    const dst = viewBytes(view);
    assertPtr('src', src);
    const s = this.viewOf(this.requireContext('cuMemcpyDtoH'), 'cuMemcpyDtoH', src, dst.byteLength);
    this.syncWork(dst.byteLength, () => dst.set(s.bytes));
  }

  memcpyDtoD(dst: DevicePtr, src: DevicePtr, bytes: number): void {
    assertPtr('dst', dst);
    assertPtr('src', src);
    assertSize('bytes', bytes);
    const mem = this.requireContext('cuMemcpyDtoD');
    const d = this.viewOf(mem, 'cuMemcpyDtoD', dst, bytes);
    const s = this.viewOf(mem, 'cuMemcpyDtoD', src, bytes);
    this.syncWork(bytes, () => d.bytes.set(s.bytes));
  }

  memcpyHtoDAsync(dst: DevicePtr, view: ArrayBufferView, stream: StreamHandle): void {
    assertPtr('dst', dst);
    assertHostView('src', view);
    const src = viewBytes(view);
    assertHandle('stream', stream);
    const d = this.viewOf(this.requireContext('cuMemcpyHtoDAsync'), 'cuMemcpyHtoDAsync', dst, src.byteLength);
    this.asyncWork(stream, 'cuMemcpyHtoDAsync', src.byteLength, [d.alloc, src.buffer], () => d.bytes.set(src));
  }

  memcpyDtoHAsync(view: ArrayBufferView, src: DevicePtr, stream: StreamHandle): void {
    assertHostView('dst', view);
    const dst = viewBytes(view);
    assertPtr('src', src);
    assertHandle('stream', stream);
    const s = this.viewOf(this.requireContext('cuMemcpyDtoHAsync'), 'cuMemcpyDtoHAsync', src, dst.byteLength);
    this.asyncWork(stream, 'cuMemcpyDtoHAsync', dst.byteLength, [s.alloc, dst.buffer], () => dst.set(s.bytes));
  }

  memcpyAsync(dst: DevicePtr, src: DevicePtr, bytes: number, stream: StreamHandle): void {
    assertPtr('dst', dst);
    assertPtr('src', src);
    assertSize('bytes', bytes);
    assertHandle('stream', stream);
    const mem = this.requireContext('cuMemcpyAsync');
    const d = this.viewOf(mem, 'cuMemcpyAsync', dst, bytes);
    const s = this.viewOf(mem, 'cuMemcpyAsync', src, bytes);
    this.asyncWork(stream, 'cuMemcpyAsync', bytes, [d.alloc, s.alloc], () => d.bytes.set(s.bytes));
  }

  memcpyBatchAsync(dsts: BigUint64Array, srcs: BigUint64Array, sizes: Float64Array, count: number, stream: StreamHandle): void {
    assertCopyBatch(dsts, srcs, sizes, count);
    assertHandle('stream', stream);
    const mem = this.requireContext('cuMemcpyBatchAsync');
    const bs = this.scheduler.get(stream, 'cuMemcpyBatchAsync');
    // CUDA cannot capture a batch copy and drops it silently (rmm#2518): refuse it loudly.
    if (bs.capture)
      throw bs.capture.refuse(
        'cuMemcpyBatchAsync',
        'a batch copy cannot be captured into a graph (CUDA would drop it silently); use memcpyAsync under capture',
      );
    // Every copy is checked before any is queued, as the driver refuses a bad batch whole.
    const copies = [];
    for (let k = 0; k < count; k++) {
      assertSize(`sizes[${k}]`, sizes[k]);
      const n = sizes[k]!;
      const d = this.viewOf(mem, 'cuMemcpyBatchAsync', dsts[k]!, n);
      const s = this.viewOf(mem, 'cuMemcpyBatchAsync', srcs[k]!, n);
      copies.push({ n, d, s });
    }
    // A GPU runs a batch's copies concurrently, in no promised order; so does
    // the simulator (seeded), or code that relies on their order passes here
    // and fails on a GPU.
    shuffle(copies, this.batchOrder);
    for (const { n, d, s } of copies) this.asyncWork(stream, 'cuMemcpyBatchAsync', n, [d.alloc, s.alloc], () => d.bytes.set(s.bytes));
  }

  memGetAddressRange(ptr: DevicePtr): AddressRange {
    assertPtr('ptr', ptr);
    const fr = this.fdMemory?.rangeOf(ptr);
    if (fr) return fr;
    const a = this.requireContext('cuMemGetAddressRange').find(ptr);
    if (!a) throw cudaError('cuMemGetAddressRange', 'CUDA_ERROR_NOT_FOUND', `${hex(ptr)} is not in any allocation of this process`);
    return { base: a.ptr, size: a.size };
  }

  pointerAttributes(ptr: DevicePtr): PointerAttributes {
    const a = this.attributesOf(ptr, 'cuPointerGetAttributes');
    return { bufferId: a.bufferId, device: a.device, memoryType: 'device' };
  }

  bufferId(ptr: DevicePtr): bigint {
    return this.attributesOf(ptr, 'cuPointerGetAttribute').bufferId;
  }

  /** The allocation holding `ptr`, for the pointer-attribute calls (CUDA_ERROR_INVALID_VALUE when none). */
  private attributesOf(ptr: DevicePtr, call: string): { bufferId: bigint; device: number } {
    assertPtr('ptr', ptr);
    const a = this.requireInit(call).find(ptr) ?? this.fdMemory?.find(ptr);
    if (!a) throw cudaError(call, 'CUDA_ERROR_INVALID_VALUE', `${hex(ptr)} is not device memory known to this process`);
    return a;
  }

  hostAlloc(bytes: number): PinnedHostBuffer {
    assertSize('bytes', bytes);
    this.requireContext('cuMemHostAlloc');
    const p = this.pinned.alloc(bytes);
    let freed = false;
    return {
      bytes: p.bytes,
      devicePtr: p.ptr,
      free: () => {
        if (freed) throw cudaError('cuMemFreeHost', 'CUDA_ERROR_INVALID_VALUE', 'this pinned buffer was already freed');
        freed = true;
        this.pinned.free(p.ptr);
      },
    };
  }

  hostRegister(bytes: Uint8Array): () => void {
    assertBytes('bytes', bytes);
    this.requireContext('cuMemHostRegister');
    if (bytes.byteLength === 0) throw cudaError('cuMemHostRegister', 'CUDA_ERROR_INVALID_VALUE', 'cannot register 0 bytes');
    const start = bytes.byteOffset;
    const end = start + bytes.byteLength;
    const list = this.hostRegistrations.get(bytes.buffer) ?? [];
    if (list.some(([s, e]) => s < end && start < e)) {
      throw cudaError('cuMemHostRegister', 'CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED', 'these bytes overlap a range already registered');
    }
    const entry: [number, number] = [start, end];
    list.push(entry);
    this.hostRegistrations.set(bytes.buffer, list);
    this.liveRegistrations++;
    const buffer = bytes.buffer;
    return () => {
      const i = list.indexOf(entry);
      if (i < 0) throw cudaError('cuMemHostUnregister', 'CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED', 'already unregistered');
      if (this.scheduler.anyTouching(buffer))
        this.lifetimeViolations.push(`cuMemHostUnregister of ${end - start} bytes with copies into or out of them still queued`);
      list.splice(i, 1);
      this.liveRegistrations--;
    };
  }

  // -- IPC --------------------------------------------------------------------------

  ipcGetMemHandle(ptr: DevicePtr): Uint8Array {
    assertPtr('ptr', ptr);
    const a = this.requireContext('cuIpcGetMemHandle').find(ptr);
    if (!a || a.opened || !a.handle) {
      throw cudaError('cuIpcGetMemHandle', 'CUDA_ERROR_INVALID_VALUE', `${hex(ptr)} is not in an allocation made by this process`);
    }
    return a.handle.slice();
  }

  ipcOpenMemHandle(handle: Uint8Array): DevicePtr {
    assertIpcHandle('handle', handle);
    const call = 'cuIpcOpenMemHandle';
    const mem = this.requireContext(call);
    const h = decodeHandle(handle, 'memory');
    if (!h) throw cudaError(call, 'CUDA_ERROR_INVALID_VALUE', 'not a memory handle from ipcGetMemHandle');
    this.refuseOwnHandle(h, call);
    const owner = this.visibleDevices.findIndex((d) => d.uuid === h.uuid);
    if (owner < 0) throw cudaError(call, 'CUDA_ERROR_INVALID_DEVICE', `the owner's device ${h.uuid} is not visible in this process`);
    if (owner !== this.current && !this.canAccessPeer(this.current, owner)) {
      throw cudaError(call, 'CUDA_ERROR_PEER_ACCESS_UNSUPPORTED', `device ${this.current} cannot access peer device ${owner} (${h.uuid})`);
    }
    const again = mem.reopen(h);
    if (again) return again.ptr;
    const fault = this.faults.openFailure(mem.openCount);
    if (fault) throw cudaError(call, fault, 'injected by the simulator');
    // The mapping belongs to the opener's context: its pointer attributes name
    // this process's current device, as the real driver reports (seen on 2×H200).
    return mem.open(h, this.current).ptr;
  }

  ipcCloseMemHandle(ptr: DevicePtr): void {
    assertPtr('ptr', ptr);
    const mem = this.requireContext('cuIpcCloseMemHandle');
    const a = mem.find(ptr);
    if (a?.opened && a.ptr === ptr && a.opens === 1) {
      if (this.scheduler.anyTouching(a)) this.lifetimeViolations.push(`cuIpcCloseMemHandle of ${hex(ptr)} with copies out of it still queued`);
      this.scheduler.drainTouching(a);
    }
    mem.close(ptr);
  }

  ipcGetEventHandle(event: EventHandle): Uint8Array {
    assertHandle('event', event);
    this.requireContext('cuIpcGetEventHandle');
    const ev = this.event(event, 'cuIpcGetEventHandle');
    if (!ev.interprocess || !ev.ipcHandle) {
      throw cudaError('cuIpcGetEventHandle', 'CUDA_ERROR_INVALID_HANDLE', 'the event was not created with { interprocess: true }');
    }
    return ev.ipcHandle.slice();
  }

  ipcOpenEventHandle(handle: Uint8Array): EventHandle {
    assertIpcHandle('handle', handle);
    const call = 'cuIpcOpenEventHandle';
    this.requireContext(call);
    const h = decodeHandle(handle, 'event');
    if (!h) throw cudaError(call, 'CUDA_ERROR_INVALID_VALUE', 'not an event handle from ipcGetEventHandle');
    this.refuseOwnHandle(h, call);
    const name = segmentName(h);
    let buffer: ArrayBuffer;
    try {
      buffer = this.shm!.shmOpen(name);
    } catch (err) {
      throw cudaError(call, 'CUDA_ERROR_INVALID_VALUE', `the event behind this handle is gone: ${(err as Error).message}`);
    }
    const ev = new SimEvent(
      this.nextEvent++,
      false,
      true,
      sharedSegment(name, buffer, (b) => this.shm!.shmClose(b)),
      true,
    );
    ev.ipcHandle = handle.slice();
    this.events.set(ev.handle, ev);
    return ev.handle;
  }

  // -- memory shared by file descriptor ------------------------------------------------

  private requireFd(call: string): SimFdMemory {
    this.requireContext(call);
    if (!this.fdMemory) throw cudaError(call, 'CUDA_ERROR_NOT_SUPPORTED', 'the addon has no descriptor calls: rebuild it (npm run build:native)');
    return this.fdMemory;
  }

  vmmAlloc(bytes: number, options: VmmAllocOptions = {}): VmmAllocation {
    assertSize('bytes', bytes);
    assertOptions('options', options);
    const count = options.chunks ?? 1;
    assertChunkCount('options.chunks', count);
    if (bytes === 0) throw new ArgumentRangeError('bytes must be at least 1');
    const fd = this.requireFd('cuMemCreate');
    const chunkSize = Math.ceil(Math.ceil(bytes / count) / SIM_GRANULARITY) * SIM_GRANULARITY;
    const r = fd.vmmAlloc(this.current, chunkSize, count);
    return { ptr: r.base, size: r.size, chunkSize, chunks: count };
  }

  vmmFree(ptr: DevicePtr): void {
    assertPtr('ptr', ptr);
    const fd = this.requireFd('cuMemUnmap');
    const r = fd.find(ptr);
    if (r?.kind !== 'vmm' || r.base !== ptr) {
      throw cudaError('cuMemUnmap', 'CUDA_ERROR_INVALID_VALUE', `${hex(ptr)} is not the base of a vmmAlloc allocation of this driver (freed already?)`);
    }
    this.scheduler.drainTouching(r);
    fd.unmap(r);
  }

  memPoolCreate(options: MemPoolOptions = {}): PoolHandle {
    assertOptions('options', options);
    const maxSize = options.maxSize ?? 0;
    assertSize('options.maxSize', maxSize);
    return this.requireFd('cuMemPoolCreate').poolCreate(this.current, maxSize).handle;
  }

  memPoolDestroy(pool: PoolHandle): void {
    assertHandle('pool', pool);
    const fd = this.requireFd('cuMemPoolDestroy');
    fd.poolDestroy(fd.pool(pool, 'cuMemPoolDestroy', false));
  }

  memAllocFromPoolAsync(bytes: number, pool: PoolHandle, stream: StreamHandle): DevicePtr {
    assertSize('bytes', bytes);
    assertHandle('pool', pool);
    assertHandle('stream', stream);
    const fd = this.requireFd('cuMemAllocFromPoolAsync');
    const ps = this.scheduler.get(stream, 'cuMemAllocFromPoolAsync');
    if (ps.capture)
      throw ps.capture.refuse('cuMemAllocFromPoolAsync', 'the simulator does not capture stream-ordered allocation (allocate before the capture)');
    if (bytes === 0) throw cudaError('cuMemAllocFromPoolAsync', 'CUDA_ERROR_INVALID_VALUE', 'cannot allocate 0 bytes');
    const p = fd.pool(pool, 'cuMemAllocFromPoolAsync', false);
    if (p.device !== this.current)
      throw cudaError('cuMemAllocFromPoolAsync', 'CUDA_ERROR_INVALID_VALUE', `the pool is on device ${p.device}, the current device is ${this.current}`);
    return fd.poolAlloc(p, bytes).base;
  }

  memFreeAsync(ptr: DevicePtr, stream: StreamHandle): void {
    assertPtr('ptr', ptr);
    assertHandle('stream', stream);
    const fd = this.requireFd('cuMemFreeAsync');
    const fs = this.scheduler.get(stream, 'cuMemFreeAsync');
    if (fs.capture) throw fs.capture.refuse('cuMemFreeAsync', 'the simulator does not capture stream-ordered frees (free after the capture)');
    const r = fd.find(ptr);
    if (r?.kind !== 'pool' || r.base !== ptr) {
      throw cudaError('cuMemFreeAsync', 'CUDA_ERROR_INVALID_VALUE', `${hex(ptr)} is not an allocation from memAllocFromPoolAsync (freed already?)`);
    }
    // Unusable at once (as after the real call); returned to the pool in stream order.
    this.asyncWork(stream, 'cuMemFreeAsync', 0, [r], () => fd.poolFree(r));
  }

  memoryKind(ptr: DevicePtr): MemoryKindInfo {
    assertPtr('ptr', ptr);
    const call = 'cuPointerGetAttributes';
    const mem = this.requireInit(call);
    const r = this.fdMemory?.find(ptr);
    if (r) {
      const base = { bufferId: r.bufferId, device: r.device };
      if (r.kind === 'vmm') return { ...base, kind: 'vmm', chunk: this.fdMemory!.rangeOf(ptr)! };
      if (r.kind === 'pool') return { ...base, kind: 'pool', pool: r.pool!.handle };
      return { ...base, kind: 'other', reason: 'memory imported from another process' };
    }
    const a = mem.find(ptr);
    if (!a) throw cudaError(call, 'CUDA_ERROR_INVALID_VALUE', `${hex(ptr)} is not device memory known to this process`);
    if (a.opened) return { kind: 'other', reason: "an IPC mapping of another process's memory", bufferId: a.bufferId, device: a.device };
    return { kind: 'legacy-ipc', bufferId: a.bufferId, device: a.device };
  }

  vmmExport(ptr: DevicePtr, bytes: number): VmmExport {
    assertPtr('ptr', ptr);
    assertSize('bytes', bytes);
    return this.requireFd('cuMemExportToShareableHandle').vmmExport(ptr, bytes);
  }

  vmmImport(chunks: readonly FdChunk[], options: VmmImportOptions = {}): VmmImport {
    assertFdChunks('chunks', chunks);
    assertOptions('options', options);
    if (options.device !== undefined) assertIndex('options.device', options.device);
    const r = this.requireFd('cuMemImportFromShareableHandle').vmmImport(this.current, chunks, options.device);
    return { ptr: r.base, size: r.size };
  }

  vmmRelease(ptr: DevicePtr): void {
    assertPtr('ptr', ptr);
    const fd = this.requireFd('cuMemUnmap');
    const r = fd.find(ptr);
    if (r?.kind !== 'vmm-import' || r.base !== ptr) {
      throw cudaError('cuMemUnmap', 'CUDA_ERROR_INVALID_VALUE', `${hex(ptr)} is not a vmmImport of this driver (released already?)`);
    }
    if (this.scheduler.anyTouching(r)) this.lifetimeViolations.push(`cuMemUnmap of the VMM import ${hex(ptr)} with copies out of it still queued`);
    this.scheduler.drainTouching(r);
    fd.unmap(r);
  }

  memPoolExport(pool: PoolHandle): number {
    assertHandle('pool', pool);
    const fd = this.requireFd('cuMemPoolExportToShareableHandle');
    return fd.poolExport(fd.pool(pool, 'cuMemPoolExportToShareableHandle', false));
  }

  memPoolExportPointer(ptr: DevicePtr): Uint8Array {
    assertPtr('ptr', ptr);
    const fd = this.requireFd('cuMemPoolExportPointer');
    const r = fd.find(ptr);
    if (r?.kind !== 'pool' || r.base !== ptr) {
      throw cudaError('cuMemPoolExportPointer', 'CUDA_ERROR_INVALID_VALUE', `${hex(ptr)} is not the start of an allocation from an own pool`);
    }
    return fd.exportPointer(r);
  }

  memPoolImport(fd: number, options: PoolImportOptions = {}): PoolHandle {
    assertFd('fd', fd);
    assertOptions('options', options);
    if (options.device !== undefined) assertIndex('options.device', options.device);
    return this.requireFd('cuMemPoolImportFromShareableHandle').poolImport(fd, options.device).handle;
  }

  memPoolImportPointer(pool: PoolHandle, data: Uint8Array): DevicePtr {
    assertHandle('pool', pool);
    assertPoolExportData('data', data);
    const fd = this.requireFd('cuMemPoolImportPointer');
    return fd.importPointer(fd.pool(pool, 'cuMemPoolImportPointer', true), this.current, data).base;
  }

  memPoolReleasePointer(ptr: DevicePtr): void {
    assertPtr('ptr', ptr);
    const fd = this.requireFd('cuMemFree');
    const r = fd.find(ptr);
    if (r?.kind !== 'pool-import' || r.base !== ptr) {
      throw cudaError('cuMemFree', 'CUDA_ERROR_INVALID_VALUE', `${hex(ptr)} is not a pointer imported by memPoolImportPointer (released already?)`);
    }
    if (this.scheduler.anyTouching(r)) this.lifetimeViolations.push(`cuMemFree of the imported pool pointer ${hex(ptr)} with copies out of it still queued`);
    this.scheduler.drainTouching(r);
    fd.releasePointer(r);
  }

  memPoolRelease(pool: PoolHandle): void {
    assertHandle('pool', pool);
    const fd = this.requireFd('cuMemPoolDestroy');
    fd.poolRelease(fd.pool(pool, 'cuMemPoolDestroy', true));
  }

  closeFd(fd: number): void {
    assertFd('fd', fd);
    if (!this.fdNative) throw cudaError('close', 'CUDA_ERROR_NOT_SUPPORTED', 'the addon has no descriptor calls');
    this.fdNative.fdClose(fd);
  }

  fdMemoryResources(): FdMemoryResources {
    return this.fdMemory?.resources() ?? { reservations: 0, mappings: 0, pools: 0, importedPools: 0, importedPointers: 0 };
  }

  // -- streams and events ---------------------------------------------------------------

  streamCreate(): StreamHandle {
    this.requireContext('cuStreamCreate');
    return this.scheduler.create().handle;
  }

  streamDestroy(stream: StreamHandle): void {
    assertHandle('stream', stream);
    this.requireContext('cuStreamDestroy');
    this.scheduler.destroy(this.scheduler.get(stream, 'cuStreamDestroy'));
  }

  /** Runs the stream's queued work to completion now, blocking for simulated durations. */
  streamSynchronize(stream: StreamHandle): void {
    assertHandle('stream', stream);
    this.requireContext('cuStreamSynchronize');
    const s = this.scheduler.get(stream, 'cuStreamSynchronize');
    if (s.capture) throw s.capture.refuse('cuStreamSynchronize', 'a capturing stream cannot be synchronized (its work is recorded, not run)');
    this.scheduler.drain(s);
    const err = s.error;
    s.error = undefined;
    if (err) throw err;
  }

  streamWaitEvent(stream: StreamHandle, event: EventHandle): void {
    assertHandle('stream', stream);
    assertHandle('event', event);
    this.requireContext('cuStreamWaitEvent');
    const s = this.scheduler.get(stream, 'cuStreamWaitEvent');
    const ev = this.event(event, 'cuStreamWaitEvent');
    const mark = ev.captureMark;
    if (mark && this.captures.has(mark.capture)) {
      this.joinCapture(s, mark);
      return;
    }
    const target = ev.recorded; // the latest record at the time of the call, as CUDA does
    const waitFor = (gen: number): WaitItem => ({
      kind: 'wait',
      remote: ev.remote,
      ready: () => ev.isDone(gen),
      advance: () => {
        if (!ev.remote && ev.recordStream) this.scheduler.drain(ev.recordStream, () => ev.isDone(gen));
      },
      // A replay waits for the record that is latest when the graph is launched (an external event wait node).
      fresh: () => waitFor(ev.recorded),
    });
    if (!s.capture && ev.isDone(target)) return;
    this.scheduler.enqueue(s, waitFor(target));
  }

  eventCreate(options: EventOptions = {}): EventHandle {
    if (options === null || typeof options !== 'object') throw new ArgumentTypeError('options must be an object like { interprocess: true }');
    this.requireContext('cuEventCreate');
    const interprocess = options.interprocess === true;
    const timing = !interprocess && options.disableTiming !== true;
    let ev: SimEvent;
    if (interprocess) {
      const mem = this.memory!;
      const { segment, counter, nonce } = mem.createSegment('event', EVENT_STATE_BYTES, 'cuEventCreate');
      this.ensureExitHook();
      ev = new SimEvent(this.nextEvent++, false, true, segment, false);
      ev.ipcHandle = encodeHandle({
        kind: 'event',
        size: 0,
        bufferId: 0n,
        pid: process.pid,
        start: localOwner().start,
        counter,
        nonce,
        instance: this.instance,
        uuid: this.visibleDevices[this.current]!.uuid,
      });
    } else {
      ev = new SimEvent(this.nextEvent++, timing, false, undefined, false);
    }
    this.events.set(ev.handle, ev);
    return ev.handle;
  }

  eventDestroy(event: EventHandle): void {
    assertHandle('event', event);
    this.requireContext('cuEventDestroy');
    const ev = this.event(event, 'cuEventDestroy');
    if (ev.waiters > 0) this.lifetimeViolations.push(`cuEventDestroy of event ${event} while ${ev.waiters} whenComplete wait(s) still query it`);
    this.events.delete(event);
    if (!ev.segment && ev.waiters === 0) {
      // As cuEventDestroy: it returns at once, and the event's resources go once its work is done. A record
      // still queued completes later into the event's own memory, and waits queued on it still see it; only the
      // handle is invalid from now on. (Draining here instead would block the thread on streams that wait
      // for peers in this very process, up to the synchronize limit.)
      return;
    }
    this.scheduler.drainTouching(ev); // an IPC event's records land before its shared state is unmapped
    this.releaseEvent(ev);
  }

  eventRecord(event: EventHandle, stream: StreamHandle): void {
    assertHandle('event', event);
    assertHandle('stream', stream);
    this.requireContext('cuEventRecord');
    const ev = this.event(event, 'cuEventRecord');
    const s = this.scheduler.get(stream, 'cuEventRecord');
    if (s.capture) {
      // Inside a capture a record marks a point of the graph for other streams to fork from or join (no node).
      ev.captureMark = { capture: s.capture, stream: s, count: s.capture.countOn(s) };
      return;
    }
    ev.captureMark = undefined;
    const gen = ev.beginRecord();
    ev.recordStream = s;
    this.scheduler.enqueue(s, {
      kind: 'work',
      durationMs: 0,
      touches: [ev],
      run: () => {
        ev.error = s.error;
        if (ev.timing) ev.stampMs = performance.now();
        ev.complete(gen);
      },
    });
  }

  eventQuery(event: EventHandle): boolean {
    assertHandle('event', event);
    this.requireContext('cuEventQuery');
    const ev = this.event(event, 'cuEventQuery');
    this.refuseCapturedEvent(ev, 'cuEventQuery');
    const target = ev.recorded;
    if (!ev.isDone(target) && !ev.remote && ev.recordStream) this.scheduler.advance(ev.recordStream, () => ev.isDone(target));
    if (ev.error) throw ev.error;
    return ev.isDone(target);
  }

  /** Completes the event now: drains its stream (local), or polls (another process's event). */
  eventSynchronize(event: EventHandle): void {
    assertHandle('event', event);
    this.requireContext('cuEventSynchronize');
    const ev = this.event(event, 'cuEventSynchronize');
    this.refuseCapturedEvent(ev, 'cuEventSynchronize');
    const target = ev.recorded;
    if (!ev.isDone(target)) {
      if (!ev.remote && ev.recordStream) this.scheduler.drain(ev.recordStream, () => ev.isDone(target));
      const deadline = performance.now() + REMOTE_SYNC_LIMIT_MS;
      while (!ev.isDone(target)) {
        if (performance.now() > deadline) {
          throw cudaError('cuEventSynchronize', 'CUDA_ERROR_LAUNCH_TIMEOUT', 'the event was not completed by its recording process within 60 s');
        }
        sleepSync(1);
      }
    }
    if (ev.error) throw ev.error;
  }

  eventElapsedTime(start: EventHandle, end: EventHandle): number {
    assertHandle('start', start);
    assertHandle('end', end);
    this.requireContext('cuEventElapsedTime');
    const a = this.event(start, 'cuEventElapsedTime');
    const b = this.event(end, 'cuEventElapsedTime');
    if (!a.timing || !b.timing)
      throw cudaError('cuEventElapsedTime', 'CUDA_ERROR_INVALID_HANDLE', 'both events need timing (not disableTiming, not interprocess)');
    if (a.recorded === 0 || b.recorded === 0) throw cudaError('cuEventElapsedTime', 'CUDA_ERROR_INVALID_HANDLE', 'both events must have been recorded');
    if (!a.isDone(a.recorded) || !b.isDone(b.recorded)) throw cudaError('cuEventElapsedTime', 'CUDA_ERROR_NOT_READY', 'an event has not completed yet');
    return b.stampMs! - a.stampMs!;
  }

  whenComplete(event: EventHandle): Promise<void> {
    try {
      assertHandle('event', event);
      this.requireContext('cuEventQuery');
      const ev = this.event(event, 'cuEventQuery');
      this.refuseCapturedEvent(ev, 'cuEventQuery');
      const target = ev.recorded;
      ev.waiters++;
      return this.scheduler
        .waitFor(() => ev.isDone(target), ev.remote)
        .finally(() => ev.waiters--)
        .then(() => {
          if (ev.error) throw ev.error;
        });
    } catch (err) {
      return Promise.reject(err);
    }
  }

  // -- shared host memory -----------------------------------------------------------------

  shmCreate(name: string, bytes: number): SharedSegment {
    assertName('name', name);
    assertSize('bytes', bytes);
    return createSharedSegment(this.requireShm(), name, bytes);
  }

  shmOpen(name: string, bytes?: number): SharedSegment {
    assertName('name', name);
    if (bytes !== undefined) assertSize('bytes', bytes);
    const shm = this.requireShm();
    return sharedSegment(name, shm.shmOpen(name, bytes), (b) => shm.shmClose(b));
  }

  shmUnlink(name: string): void {
    assertName('name', name);
    this.requireShm().shmUnlink(name);
  }

  /** Frees and unlinks everything this instance made, unmaps what it opened, stops its timers. */

  // -- GPU-driven work -------------------------------------------------------------------------

  gpuDrivenStatus() {
    return { streamMemOps: true, waitValueNor: true, memOps64: true, graphs: true, modules: true };
  }

  streamWaitValue32(stream: StreamHandle, addr: DevicePtr, value: number, condition: WaitCondition): void {
    assertHandle('stream', stream);
    assertWordAddress('addr', addr, 4);
    assertU32('value', value);
    assertWaitCondition('condition', condition);
    this.memOps('cuStreamWaitValue32_v2', stream, [{ op: 'wait32', addr, value, condition }]);
  }

  streamWaitValue64(stream: StreamHandle, addr: DevicePtr, value: bigint, condition: WaitCondition): void {
    assertHandle('stream', stream);
    assertWordAddress('addr', addr, 8);
    assertU64('value', value);
    assertWaitCondition('condition', condition);
    this.memOps('cuStreamWaitValue64_v2', stream, [{ op: 'wait64', addr, value, condition }]);
  }

  streamWriteValue32(stream: StreamHandle, addr: DevicePtr, value: number): void {
    assertHandle('stream', stream);
    assertWordAddress('addr', addr, 4);
    assertU32('value', value);
    this.memOps('cuStreamWriteValue32_v2', stream, [{ op: 'write32', addr, value }]);
  }

  streamWriteValue64(stream: StreamHandle, addr: DevicePtr, value: bigint): void {
    assertHandle('stream', stream);
    assertWordAddress('addr', addr, 8);
    assertU64('value', value);
    this.memOps('cuStreamWriteValue64_v2', stream, [{ op: 'write64', addr, value }]);
  }

  streamBatchMemOp(stream: StreamHandle, ops: readonly StreamMemOp[]): void {
    assertHandle('stream', stream);
    assertMemOps('ops', ops);
    this.memOps('cuStreamBatchMemOp_v2', stream, ops);
  }

  streamBeginCapture(stream: StreamHandle, mode: CaptureMode = 'global'): void {
    assertHandle('stream', stream);
    assertCaptureMode('mode', mode);
    this.requireContext('cuStreamBeginCapture_v2');
    const s = this.scheduler.get(stream, 'cuStreamBeginCapture_v2');
    if (stream === 0n)
      throw cudaError(
        'cuStreamBeginCapture_v2',
        'CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED',
        'the legacy default stream cannot be captured: capture a stream from streamCreate',
      );
    if (s.capture) throw cudaError('cuStreamBeginCapture_v2', 'CUDA_ERROR_ILLEGAL_STATE', 'the stream is already capturing');
    const c = new Capture(s, mode);
    s.capture = c;
    this.captures.add(c);
  }

  streamEndCapture(stream: StreamHandle): GraphHandle {
    assertHandle('stream', stream);
    this.requireContext('cuStreamEndCapture');
    const s = this.scheduler.get(stream, 'cuStreamEndCapture');
    const c = s.capture;
    if (!c) throw cudaError('cuStreamEndCapture', 'CUDA_ERROR_ILLEGAL_STATE', 'the stream is not capturing');
    if (c.origin !== s) throw cudaError('cuStreamEndCapture', 'CUDA_ERROR_STREAM_CAPTURE_UNMATCHED', 'end the capture on the stream that began it');
    // The capture ends whatever the outcome, on every stream that took part.
    this.captures.delete(c);
    for (const t of this.scheduler.all()) if (t.capture === c) t.capture = undefined;
    if (c.invalidated) throw cudaError('cuStreamEndCapture', 'CUDA_ERROR_STREAM_CAPTURE_INVALIDATED', `the capture was invalidated: ${c.invalidated.message}`);
    if ([...c.joined.values()].some((joined) => !joined)) {
      throw cudaError(
        'cuStreamEndCapture',
        'CUDA_ERROR_STREAM_CAPTURE_UNJOINED',
        'a stream forked into the capture was not joined back (record an event at its end and wait on it from the capturing stream)',
      );
    }
    return this.graphs.addGraph(new SimGraph(c.items));
  }

  streamIsCapturing(stream: StreamHandle): boolean {
    assertHandle('stream', stream);
    this.requireContext('cuStreamIsCapturing');
    return this.scheduler.get(stream, 'cuStreamIsCapturing').capture !== undefined;
  }

  graphInstantiate(graph: GraphHandle): GraphExecHandle {
    assertHandle('graph', graph);
    this.requireContext('cuGraphInstantiateWithFlags');
    return this.graphs.instantiate(graph);
  }

  graphLaunch(exec: GraphExecHandle, stream: StreamHandle): void {
    assertHandle('exec', exec);
    assertHandle('stream', stream);
    this.requireContext('cuGraphLaunch');
    const g = this.graphs.exec(exec, 'cuGraphLaunch');
    const s = this.scheduler.get(stream, 'cuGraphLaunch');
    // As the native driver (CUDA 13, 2 × H200): a graph is not launched into a stream that is capturing, and the capture is spoilt.
    if (s.capture)
      throw s.capture.refuse('cuGraphLaunch', 'operation not permitted when stream is capturing (capture the work itself, not a launch of its graph)');
    for (const item of g.items) this.scheduler.enqueue(s, freshItem(item));
  }

  graphExecDestroy(exec: GraphExecHandle): void {
    assertHandle('exec', exec);
    this.requireContext('cuGraphExecDestroy');
    this.graphs.destroyExec(exec);
  }

  graphDestroy(graph: GraphHandle): void {
    assertHandle('graph', graph);
    this.requireContext('cuGraphDestroy');
    this.graphs.destroyGraph(graph);
  }

  /** Graphs and executable graphs not destroyed yet (tests count them to find leaks). */
  get liveGraphs(): { graphs: number; execs: number } {
    return this.graphs.size;
  }

  // -- modules and kernels: PTX entries bound to TypeScript twins (sim/kernels.ts) --
  moduleLoadData(ptx: string): ModuleLoadInfo {
    const started = performance.now();
    assertPtx('ptx', ptx);
    this.requireContext('cuModuleLoadData');
    const module = this.nextModule++;
    this.modules.set(module, parsePtx(ptx));
    return { module, loadMs: performance.now() - started };
  }

  moduleUnload(module: ModuleHandle): void {
    assertHandle('module', module);
    if (!this.modules.delete(module)) throw cudaError('cuModuleUnload', 'CUDA_ERROR_INVALID_HANDLE', `no module ${module} in this driver`);
    for (const [fn, f] of this.functions) if (f.module === module) this.functions.delete(fn);
  }

  moduleGetFunction(module: ModuleHandle, name: string): FunctionHandle {
    assertHandle('module', module);
    assertEntryName('name', name);
    const entries = this.modules.get(module);
    if (!entries) throw cudaError('cuModuleGetFunction', 'CUDA_ERROR_INVALID_HANDLE', `no module ${module} in this driver`);
    const entry = entries.get(name);
    if (!entry) throw cudaError('cuModuleGetFunction', 'CUDA_ERROR_NOT_FOUND', `the module has no .entry ${name}`);
    const fn = this.nextFunction++;
    this.functions.set(fn, { module, entry });
    return fn;
  }

  launchKernel(fn: FunctionHandle, config: LaunchConfig, args: readonly KernelArg[], stream: StreamHandle): void {
    assertHandle('fn', fn);
    assertLaunchConfig('config', config);
    assertKernelArgs('args', args);
    assertHandle('stream', stream);
    const mem = this.requireContext('cuLaunchKernel');
    const f = this.functions.get(fn);
    if (!f) throw cudaError('cuLaunchKernel', 'CUDA_ERROR_INVALID_HANDLE', `no function ${fn} in this driver (module unloaded?)`);
    const twin = bindLaunch(f.entry, config, args);
    const frozen = args.map((a) => ({ ...a }) as KernelArg);
    const asBatch = memOpTwinOf(f.entry.name);
    const memory = { view: (ptr: bigint, bytes: number) => this.viewOf(mem, 'cuLaunchKernel', ptr, bytes).bytes };
    const allocsOf = (ptrs: readonly bigint[]) =>
      ptrs.flatMap((p) => [mem.find(p) ?? this.fdMemory?.find(p) ?? this.pinned.find(p)].filter((x): x is NonNullable<typeof x> => x !== undefined));
    if (asBatch) {
      // Runs of memory operations as batches, each 8-byte copy as a copy between them, each piece of work when the stream reaches it, in order.
      let run: StreamMemOp[] = [];
      const flush = () => {
        for (let i = 0; i < run.length; i += MAX_BATCH_MEM_OPS) this.memOps('cuLaunchKernel', stream, run.slice(i, i + MAX_BATCH_MEM_OPS));
        run = [];
      };
      for (const op of asBatch(frozen, config, memory)) {
        if (op.op === 'run') {
          flush();
          const work = op.run;
          this.asyncWork(stream, 'cuLaunchKernel', 0, allocsOf(op.touches), () => work(memory));
        } else if (op.op === 'until') {
          flush();
          const s = this.scheduler.get(stream, 'cuLaunchKernel');
          this.scheduler.enqueue(
            s,
            untilItem(
              () => op.ready(memory),
              () => this.scheduler.advanceOthers(s),
            ),
          );
        } else if (op.op !== 'copy64') run.push(op);
        else {
          flush();
          const d = this.viewOf(mem, 'cuLaunchKernel', op.addr, 8);
          const s = this.viewOf(mem, 'cuLaunchKernel', op.src, 8);
          this.asyncWork(stream, 'cuLaunchKernel', 8, [d.alloc, s.alloc], () => d.bytes.set(s.bytes));
        }
      }
      flush();
      return;
    }
    // Allocations the pointer arguments name, so freeing one drains the launch first.
    const touches = allocsOf(frozen.flatMap((a) => (a.type === 'ptr' ? [a.value] : [])));
    this.asyncWork(stream, 'cuLaunchKernel', 0, touches, () => twin(memory, frozen, config));
  }
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.scheduler.close();
    this.graphs.clear();
    this.captures.clear();
    for (const ev of this.events.values()) this.releaseEvent(ev);
    this.events.clear();
    this.memory?.closeAll();
    this.fdMemory?.closeAll();
    DeviceAllocation.noteDriverClosed(this);
    if (this.exitHook) offExit(this.exitHook);
    this.exitHook = undefined;
    this.initialized = false;
    this.current = -1;
  }

  // -- helpers ----------------------------------------------------------------------------------

  private requireShm(): NativeShm {
    if (this.loadError) throw this.loadError;
    return this.shm!;
  }

  private requireInit(call: string): SimMemory {
    // A driver that crashes (faults.crashOn) takes the process with it, as a segmentation fault in native code does.
    if (this.faults.crashDue(call)) process.kill(process.pid, 'SIGSEGV');
    if (this.closed) throw cudaError(call, 'CUDA_ERROR_DEINITIALIZED', 'this driver instance was closed');
    if (!this.initialized) throw cudaError(call, 'CUDA_ERROR_NOT_INITIALIZED', 'call init() first');
    return this.memory!;
  }

  /** Calls that need a current context, as the real driver's do. */
  private requireContext(call: string): SimMemory {
    const mem = this.requireInit(call);
    if (this.current < 0) throw cudaError(call, 'CUDA_ERROR_INVALID_CONTEXT', 'no current device: call setDevice(index) first');
    return mem;
  }

  private device(index: number, call: string): SimDevice {
    this.requireInit(call);
    const d = this.visibleDevices[index];
    if (!d) throw cudaError(call, 'CUDA_ERROR_INVALID_DEVICE', `device ${index} does not exist (this process sees ${this.visibleDevices.length})`);
    return d;
  }

  private event(handle: EventHandle, call: string): SimEvent {
    const ev = this.events.get(handle);
    if (!ev) throw cudaError(call, 'CUDA_ERROR_INVALID_HANDLE', `no event ${handle} in this driver (destroyed?)`);
    return ev;
  }

  private refuseOwnHandle(h: SimHandle, call: string): void {
    if (h.pid === process.pid && h.instance === this.instance) {
      throw cudaError(call, 'CUDA_ERROR_INVALID_CONTEXT', 'a process cannot open its own IPC handle; use the pointer directly');
    }
  }

  private releaseEvent(ev: SimEvent): void {
    ev.destroyed = true;
    if (!ev.segment) return;
    if (!ev.opened) {
      try {
        this.shm!.shmUnlink(ev.segment.name);
      } catch {
        // already gone
      }
    }
    ev.segment.close();
  }

  /** The bytes [ptr, ptr+bytes): fd-shared memory (VMM, pools), a pinned host buffer, or cuMemAlloc memory and IPC mappings. */
  private viewOf(mem: SimMemory, call: string, ptr: DevicePtr, bytes: number): { alloc: object; bytes: Uint8Array } {
    if (this.fdMemory?.find(ptr)) return this.fdMemory.view(call, ptr, bytes);
    return this.pinned.view(call, ptr, bytes) ?? mem.view(call, ptr, bytes);
  }

  /** Queues a batch of memory operations on `stream` as one item (validated by the caller). */
  private memOps(call: string, stream: StreamHandle, ops: readonly StreamMemOp[]): void {
    const mem = this.requireContext(call);
    const s = this.scheduler.get(stream, call);
    const resolved: ResolvedMemOp[] = ops.map((op) => {
      if (op.op === 'barrier') return { op: 'barrier' };
      const bits = op.op === 'wait32' || op.op === 'write32' ? 4 : 8;
      const word = this.viewOf(mem, call, op.addr, bits).bytes;
      const value = BigInt(op.value);
      return op.op === 'wait32' || op.op === 'wait64' ? { op: op.op, word, value, condition: op.condition } : { op: op.op, word, value };
    });
    this.scheduler.enqueue(
      s,
      memOpBatch(call, resolved, () => this.scheduler.advanceOthers(s)),
    );
  }

  /** A stream waits on an event recorded inside a capture: it joins the capture (fork), or joins a fork back. */
  private joinCapture(s: SimStream, mark: NonNullable<SimEvent['captureMark']>): void {
    const c = mark.capture;
    if (s.capture && s.capture !== c) {
      throw cudaError('cuStreamWaitEvent', 'CUDA_ERROR_STREAM_CAPTURE_ISOLATION', 'the event was recorded in another capture: captures cannot be merged');
    }
    if (!s.capture) {
      s.capture = c;
      c.joined.set(s, false);
    }
    // The waiting stream now follows everything the marked stream had recorded: a fork is joined back when that was all of it.
    if (mark.stream !== c.origin && c.countOn(mark.stream) === mark.count && mark.stream !== s) c.joined.set(mark.stream, true);
  }

  private refuseCapturedEvent(ev: SimEvent, call: string): void {
    const mark = ev.captureMark;
    if (mark && this.captures.has(mark.capture)) {
      throw cudaError(
        call,
        'CUDA_ERROR_CAPTURED_EVENT',
        'the event was last recorded in a stream that is capturing: it names a point of the graph, not work that runs',
      );
    }
  }

  /** Calls CUDA forbids while a capture in 'global' or 'thread-local' mode is in progress (they invalidate it). */
  private refuseDuringCapture(call: string): void {
    for (const c of this.captures) {
      if (c.mode !== 'relaxed')
        throw c.refuse(
          call,
          `a synchronous or allocating call during a stream capture in '${c.mode}' mode (begin the capture with mode 'relaxed' to allow it)`,
        );
    }
  }

  /** Synchronous work: ordered after the default stream's queued work, blocking for its simulated duration. */
  private syncWork(bytes: number, run: () => void): void {
    this.refuseDuringCapture('cuMemcpy');
    this.scheduler.drain(this.scheduler.get(0n, 'cuStreamSynchronize'));
    sleepSync(this.faults.copyMs(bytes));
    run();
  }

  /** A synchronous call that returns before the device has the bytes (faults.pageableLagMs): queued on the legacy stream. */
  private lagging(call: string, touches: object, run: () => void): void {
    this.scheduler.enqueue(this.scheduler.get(0n, call), { kind: 'work', durationMs: this.faults.pageableLagMs, touches: [touches], run });
  }

  private asyncWork(stream: StreamHandle, call: string, bytes: number, touches: object[], run: () => void): void {
    const s: SimStream = this.scheduler.get(stream, call);
    this.scheduler.enqueue(s, { kind: 'work', durationMs: this.faults.copyMs(bytes), touches, run });
  }

  /** At process exit, unlink what this instance still owns, so nothing is left in /dev/shm. */
  private ensureExitHook(): void {
    if (this.exitHook) return;
    this.exitHook = () => {
      const names = [
        ...(this.memory?.ownedSegmentNames() ?? []),
        ...[...this.events.values()].filter((e) => e.segment && !e.opened).map((e) => e.segment!.name),
      ];
      for (const name of names) {
        try {
          this.shm!.shmUnlink(name);
        } catch {
          // already gone
        }
      }
    };
    onExit(this.exitHook);
  }
}

/** A kernel's wait on a condition over device memory (sim/kernels' UntilOp): polled as a remote wait; an error reading the memory (freed, unmapped) ends it with that error on the stream. */
function untilItem(ready: () => boolean, advance: () => void): WaitItem {
  const item: WaitItem = {
    kind: 'wait',
    remote: true,
    advance,
    ready(): boolean {
      try {
        return ready();
      } catch (err) {
        item.error = err as Error;
        return true;
      }
    },
    fresh: () => untilItem(ready, advance),
  };
  return item;
}
