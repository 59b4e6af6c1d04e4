/**
 * The IPC probe of the negotiation: proof, before either side says OK, that
 * each process can open the other's device memory — not only that
 * cuDeviceCanAccessPeer said yes (in containers without a shared IPC
 * namespace, and under some drivers, the open still fails).
 *
 * Each side exports one small allocation holding a random 8-byte value and
 * sends its description in IPC_REQ / IPC_ACK(ok) (IPC_PROBE_BYTES):
 *
 *   off size  field
 *    0   64   cuIpcGetMemHandle of the allocation
 *   64    8   base (u64)
 *   72    8   size (u64, as cuMemGetAddressRange reports it)
 *   80    8   buffer id (u64)
 *   88    8   the value at the allocation's first byte
 *
 * The other side opens it through its handle pool and reads the value back.
 * The mapping stays in the pool, so the first real message finds the peer
 * context already set up (the first cross-GPU open costs milliseconds).
 */
import { randomFillSync } from 'node:crypto';
import type { HandlePool } from '../cache/index.js';
import { type CudaDriver, type DevicePtr, LEGACY_STREAM } from './cuda/driver.js';
import { IPC_HANDLE_BYTES, IPC_PROBE_BYTES } from './wire/frames.js';
import type { GpuWork } from './gpu/gpu-work.js';

const VALUE_BYTES = 8;

/** One side's exported probe; `free` when the endpoint closes. */
export class ExportedProbe {
  private freed = false;

  private constructor(
    private readonly driver: CudaDriver,
    private readonly ptr: DevicePtr,
    /** What goes on the wire (IPC_PROBE_BYTES). */
    readonly bytes: Uint8Array,
  ) {}

  /** Allocates, fills and exports a probe on the current device. Throws the driver's error. */
  static create(driver: CudaDriver, gpu: Pick<GpuWork, 'synchronize'>): ExportedProbe {
    const value = randomFillSync(new Uint8Array(VALUE_BYTES));
    const ptr = driver.memAlloc(VALUE_BYTES);
    try {
      driver.memcpyHtoD(ptr, value);
      // A pageable cuMemcpyHtoD may return before the DMA is done, and the
      // peer reads the value through its own mapping: wait for it (once per endpoint).
      gpu.synchronize(LEGACY_STREAM);
      const handle = driver.ipcGetMemHandle(ptr);
      const range = driver.memGetAddressRange(ptr);
      const bytes = new Uint8Array(IPC_PROBE_BYTES);
      const v = new DataView(bytes.buffer);
      bytes.set(handle, 0);
      v.setBigUint64(IPC_HANDLE_BYTES, range.base, true);
      v.setBigUint64(IPC_HANDLE_BYTES + 8, BigInt(range.size), true);
      v.setBigUint64(IPC_HANDLE_BYTES + 16, driver.bufferId(ptr), true);
      bytes.set(value, IPC_HANDLE_BYTES + 24);
      return new ExportedProbe(driver, ptr, bytes);
    } catch (err) {
      driver.memFree(ptr);
      throw err;
    }
  }

  free(): void {
    if (this.freed) return;
    this.freed = true;
    try {
      this.driver.memFree(this.ptr);
    } catch {
      // the context is gone (driver closed): nothing left to free
    }
  }
}

/**
 * Opens the peer's probe (device `peerUuid`) through `pool` and reads its
 * value. Resolves when the bytes read are the bytes announced; rejects with
 * the reason otherwise (it becomes the BAD reason's detail).
 */
export async function verifyPeerProbe(driver: CudaDriver, pool: HandlePool, probe: Uint8Array, peerUuid: string): Promise<void> {
  if (probe.byteLength !== IPC_PROBE_BYTES) throw new Error('the peer sent no probe');
  const v = new DataView(probe.buffer, probe.byteOffset, probe.byteLength);
  const size = v.getBigUint64(IPC_HANDLE_BYTES + 8, true);
  if (size < BigInt(VALUE_BYTES) || size > BigInt(Number.MAX_SAFE_INTEGER)) throw new Error(`the peer's probe claims ${size} bytes`);
  let mapping;
  try {
    mapping = await pool.acquire({
      deviceUuid: peerUuid,
      base: v.getBigUint64(IPC_HANDLE_BYTES, true),
      size: Number(size),
      handle: probe.subarray(0, IPC_HANDLE_BYTES),
      bufferId: v.getBigUint64(IPC_HANDLE_BYTES + 16, true),
    });
  } catch (err) {
    throw new Error(`opening the peer's probe allocation failed: ${(err as Error).message}`, { cause: err });
  }
  try {
    const got = new Uint8Array(VALUE_BYTES);
    driver.memcpyDtoH(got, mapping.ptr);
    const want = probe.subarray(IPC_HANDLE_BYTES + 24);
    if (!got.every((b, i) => b === want[i])) throw new Error("the peer's probe allocation opened, but read back another value");
  } finally {
    mapping.release(); // the mapping stays cached in the pool for the first real message
  }
}
