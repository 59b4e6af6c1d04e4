/** The TypeScript twin of fill.cu's smcuda_fill_u32(ptr, value, n): ptr[i] = value for i < n. */
import type { KernelTwin } from './twin.js';

export const FILL_TWINS: Readonly<Record<string, KernelTwin>> = {
  smcuda_fill_u32: (memory, args) => {
    const n = Number(args[2]!.value as bigint);
    if (n === 0) return;
    const bytes = memory.view(args[0]!.value as bigint, n * 4);
    const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const value = (args[1]!.value as number) >>> 0;
    for (let i = 0; i < n; i++) v.setUint32(i * 4, value, true);
  },
};
