/**
 * The TypeScript twin of copy.cu's smcuda_copy_list(list): list[0] copies
 * (at most COPY_LIST_MAX, as the kernel caps it), copy k's destination,
 * source and length at list[1 + 3k ..]; the list is read when the launch
 * runs, as the kernel reads it.
 */
import { COPY_LIST_MAX } from '../copy-list-max.js';
import type { KernelTwin } from './twin.js';

export const COPY_LIST_TWINS: Readonly<Record<string, KernelTwin>> = {
  smcuda_copy_list: (memory, args) => {
    const list = args[0]!.value as bigint;
    const head = memory.view(list, 8);
    const n = Math.min(COPY_LIST_MAX, Number(new DataView(head.buffer, head.byteOffset, 8).getBigUint64(0, true)));
    if (n === 0) return;
    const e = memory.view(list + 8n, 24 * n);
    const v = new DataView(e.buffer, e.byteOffset, e.byteLength);
    for (let k = 0; k < n; k++) {
      const bytes = Number(v.getBigUint64(24 * k + 16, true));
      if (bytes === 0) continue;
      memory.view(v.getBigUint64(24 * k, true), bytes).set(memory.view(v.getBigUint64(24 * k + 8, true), bytes));
    }
  },
};
