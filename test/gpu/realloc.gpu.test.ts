/**
 * The free / realloc scenario between two real processes on the native
 * driver: same GPU, and across two GPUs where there are two. Skipped, visibly,
 * where no GPU is usable.
 */
import { reallocCases } from '../helpers/realloc-cases.js';
import { probeNative } from './native-probe.js';

const p = await probeNative();
reallocCases('native driver, same GPU', { kind: 'native', devices: [0, 0], makeDriver: () => p.make!(), skip: p.skip });
reallocCases('native driver, GPU0 → GPU1', {
  kind: 'native',
  devices: [0, 1],
  makeDriver: () => p.make!(),
  skip: p.skip || (p.devices < 2 ? `needs 2 GPUs, ${p.devices} visible` : false),
});
