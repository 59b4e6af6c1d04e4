/** An error's `code` (smcuda's, the driver's, Node's), or SMCUDA_ERROR where it has none: what an abort reports as its cause. */
export function errorCode(err: unknown): string {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : 'SMCUDA_ERROR';
}
