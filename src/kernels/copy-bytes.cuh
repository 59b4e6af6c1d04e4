// copy_bytes, shared by reduce.cu (the two-shot's and one-shot's copies) and copy.cu (a list of
// copies). Include it after a `u64` typedef (unsigned long long).
#pragma once

// dst[i] = src[i] for the `bytes` bytes, by threads tid of nthr: 16 bytes a load where both are
// aligned, four loads in flight a thread, the last round too (its loads predicated), else byte by
// byte. A tail loop of single loads made the threads past a block's last whole round wait for one
// load after another, and a launch ends with its slowest block: two-shot 16 MiB on 2 x H200, 264
// blocks (31 KiB a block), medians of 5, two alternations: 59.9, 59.5 us against 61.3, 60.9.
__device__ void copy_bytes(char *dst, const char *src, u64 bytes, unsigned tid, unsigned nthr) {
  u64 e = tid;
  if ((((u64)dst | (u64)src) & 15) == 0) {
    const u64 nv = bytes / 16;
    const uint4 *s = (const uint4 *)src;
    uint4 *d = (uint4 *)dst;
    for (u64 i = tid; i < nv; i += 4 * nthr) {
      const bool hb = i + nthr < nv, hc = i + 2 * nthr < nv, hx = i + 3 * nthr < nv;
      uint4 a = s[i], b, c, x;
      if (hb) b = s[i + nthr];
      if (hc) c = s[i + 2 * nthr];
      if (hx) x = s[i + 3 * nthr];
      d[i] = a;
      if (hb) d[i + nthr] = b;
      if (hc) d[i + 2 * nthr] = c;
      if (hx) d[i + 3 * nthr] = x;
    }
    e = nv * 16 + tid;
  }
  for (; e < bytes; e += nthr) dst[e] = src[e];
}
