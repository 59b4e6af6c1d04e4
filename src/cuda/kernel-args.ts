/**
 * Kernel arguments as cuLaunchKernel takes them: each value in its own slot,
 * aligned to its size, as the PTX `.param` list declares it (`.u64` for
 * 'ptr'/'u64'/'i64'/'f64', `.u32`/`.s32`/`.f32` for the 4-byte ones). The
 * addon copies the bytes into aligned storage and hands the driver one
 * pointer per slot (native/gpu_driven.cc).
 */
import type { KernelArg } from './driver.js';
import { kernelArgSize } from './validate-gpu-driven.js';

export interface PackedKernelArgs {
  /** The values, little-endian, each at its slot. */
  params: ArrayBuffer;
  /** [offset0, size0, offset1, size1, ...]: one slot per argument, in order. */
  layout: Uint32Array;
}

/**
 * Packs validated arguments (assertKernelArgs) into `buffer(bytes)`: by
 * default a new ArrayBuffer; the native driver passes one it reuses (the
 * addon copies the bytes before it returns).
 */
export function packKernelArgs(args: readonly KernelArg[], buffer: (bytes: number) => ArrayBuffer = (bytes) => new ArrayBuffer(bytes)): PackedKernelArgs {
  // Plain loops: a collective launches a kernel per call, and two forEach closures a launch are garbage.
  const n = args.length;
  const layout = new Uint32Array(n * 2);
  let end = 0;
  for (let k = 0; k < n; k++) {
    const size = kernelArgSize(args[k]!.type);
    const offset = Math.ceil(end / size) * size;
    layout[2 * k] = offset;
    layout[2 * k + 1] = size;
    end = offset + size;
  }
  const params = buffer(Math.ceil(end / 8) * 8);
  const view = new DataView(params);
  for (let k = 0; k < n; k++) {
    const arg = args[k]!;
    const at = layout[2 * k]!;
    switch (arg.type) {
      case 'ptr':
      case 'u64':
        view.setBigUint64(at, arg.value, true);
        break;
      case 'i64':
        view.setBigInt64(at, arg.value, true);
        break;
      case 'u32':
        view.setUint32(at, arg.value, true);
        break;
      case 'i32':
        view.setInt32(at, arg.value, true);
        break;
      case 'f32':
        view.setFloat32(at, arg.value, true);
        break;
      case 'f64':
        view.setFloat64(at, arg.value, true);
        break;
    }
  }
  return { params, layout };
}
