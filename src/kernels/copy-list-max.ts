/**
 * Most copies one launch of smcuda_copy_list makes: copy.cu's COPY_LIST_MAX
 * (the kernel caps a list's count at it). The launcher (src/gpu/copy-list.ts)
 * and the kernel's simulator twin (sim/copy-list.ts) both need it.
 */
export const COPY_LIST_MAX = 64;
