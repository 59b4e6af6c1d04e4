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

/*
 * fp8 (OCP E4M3 "fn" and E5M2) to and from f32, as reduce.cu converts them:
 * loads are exact; stores round to nearest even and saturate to the largest
 * finite value (448, 57344), infinities included; NaN becomes 0x7f. This is
 * CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, …), what NCCL stores for
 * its fp8 reductions. Bit for bit reduce.cu's f8_store: the f32 significand
 * rounded to M bits, or shifted into fp8's subnormal steps.
 */
function f32ToF8(v: number, m: number, bias: number, maxCode: number): number {
  f32[0] = v;
  const x = u32[0]!;
  const sign = (x >>> 24) & 0x80;
  const a = x & 0x7fffffff;
  if (a > 0x7f800000) return 0x7f;
  const e = a >>> 23;
  let q: number;
  if (e >= 128 - bias) {
    const s = 23 - m;
    q = ((a + ((1 << (s - 1)) - 1) + ((a >>> s) & 1)) >>> s) - ((127 - bias) << m);
    if (q > maxCode) q = maxCode;
  } else {
    const mant = e === 0 ? a & 0x7fffff : (a & 0x7fffff) | 0x800000;
    const s = 151 - bias - m - (e === 0 ? 1 : e);
    if (s >= 25) q = 0;
    else {
      q = mant >>> s;
      const rem = mant & ((1 << s) - 1);
      const half = 1 << (s - 1);
      if (rem > half || (rem === half && (q & 1) !== 0)) q++;
    }
  }
  return sign | q;
}

export function f32ToE4m3(v: number): number {
  return f32ToF8(v, 3, 7, 0x7e);
}

export function f32ToE5m2(v: number): number {
  return f32ToF8(v, 2, 15, 0x7b);
}

/** Every fp8 value as f32 (256 entries each). */
const E4M3 = Float32Array.from({ length: 256 }, (_, b) => f8Value(b, 3, 7));
const E5M2 = Float32Array.from({ length: 256 }, (_, b) => f8Value(b, 2, 15));

function f8Value(b: number, m: number, bias: number): number {
  const sign = b & 0x80 ? -1 : 1;
  const exp = (b & 0x7f) >>> m;
  const mant = b & ((1 << m) - 1);
  if (bias === 7 && (b & 0x7f) === 0x7f) return NaN; // E4M3 has no infinity
  if (bias === 15 && exp === 31) return mant !== 0 ? NaN : sign * Infinity;
  if (exp === 0) return sign * mant * 2 ** (1 - bias - m);
  return sign * (1 + mant / (1 << m)) * 2 ** (exp - bias);
}

export function e4m3ToF32(b: number): number {
  return E4M3[b & 0xff]!;
}

export function e5m2ToF32(b: number): number {
  return E5M2[b & 0xff]!;
}
