/**
 * f16 and bf16 to and from f32, as the kernels convert them:
 * __float2half_rn (cvt.rn.f16.f32) and __float2bfloat16_rn, both round to
 * nearest even; a NaN becomes the canonical 0x7fff, as the GPU writes it.
 */
const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

export function f32ToF16(v: number): number {
  f32[0] = v;
  const x = u32[0]!;
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  let mant = x & 0x7fffff;
  if (exp === 0xff) return mant !== 0 ? 0x7fff : sign | 0x7c00;
  const e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign; // below half the smallest subnormal
    mant |= 0x800000;
    const shift = 14 - e;
    let h = mant >>> shift;
    const rem = mant & ((1 << shift) - 1);
    const mid = 1 << (shift - 1);
    if (rem > mid || (rem === mid && (h & 1) !== 0)) h++;
    return sign | h;
  }
  let h = (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && (h & 1) !== 0)) h++; // a carry into the exponent is right, up to infinity
  return sign | h;
}

/** Every f16 as f32, built on first use (256 KiB): a load per element where the sum of 64 MiB of f16 took 3 s. */
let f16Table: Float32Array | undefined;

export function f16ToF32(h: number): number {
  return (f16Table ??= f16Values())[h & 0xffff]!;
}

function f16Values(): Float32Array {
  const t = new Float32Array(65536);
  for (let h = 0; h < 65536; h++) t[h] = f16Value(h);
  return t;
}

function f16Value(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >>> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 0x1f) return mant !== 0 ? NaN : sign * Infinity;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}

export function f32ToBf16(v: number): number {
  f32[0] = v;
  const x = u32[0]!;
  if ((x & 0x7fffffff) > 0x7f800000) return 0x7fff;
  return ((x + 0x7fff + ((x >>> 16) & 1)) >>> 16) & 0xffff;
}

export function bf16ToF32(b: number): number {
  u32[0] = (b & 0xffff) << 16;
  return f32[0]!;
}
