/**
 * `smcuda run --devices`: rank i runs on entry i % length of the list. A
 * rank's device is LOCAL_RANK % (devices it sees) (Communicator.fromEnv,
 * as torchrun's scripts pick theirs), so each rank is shown every device of
 * the list, once each, ordered so that this index lands on its entry. Every
 * rank still sees all the job's devices: peer access and IPC between them
 * need that.
 */

/** The CUDA_VISIBLE_DEVICES value of local rank `localRank`. */
export function visibleDevicesFor(list: readonly string[], localRank: number): string {
  const unique = [...new Set(list)];
  const want = list[localRank % list.length]!;
  const at = localRank % unique.length;
  const from = unique.indexOf(want);
  [unique[at], unique[from]] = [unique[from]!, unique[at]!];
  return unique.join(',');
}

/** The variables that carry it: the CUDA driver's and the simulated driver's. */
export function deviceEnv(list: readonly string[] | undefined, localRank: number): Record<string, string> {
  if (list === undefined) return {};
  const visible = visibleDevicesFor(list, localRank);
  return { CUDA_VISIBLE_DEVICES: visible, SMCUDA_SIM_VISIBLE: visible };
}
