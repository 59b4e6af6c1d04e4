/** `smcuda run --devices`: LOCAL_RANK % (devices seen) lands on entry LOCAL_RANK % length, each device shown once. */
import { fc, it } from '@fast-check/vitest';
import { describe, expect } from 'vitest';
import { deviceEnv, visibleDevicesFor } from '../../../src/cli/run-devices.js';

describe('--devices', () => {
  it('examples', () => {
    expect(visibleDevicesFor(['0', '1', '2', '3'], 2)).toBe('0,1,2,3');
    expect(visibleDevicesFor(['1', '1', '0', '0'], 0)).toBe('1,0');
    expect(visibleDevicesFor(['1', '1', '0', '0'], 1)).toBe('0,1');
    expect(visibleDevicesFor(['3'], 5)).toBe('3');
    expect(deviceEnv(undefined, 0)).toEqual({});
    expect(deviceEnv(['2', '5'], 1)).toEqual({ CUDA_VISIBLE_DEVICES: '2,5', SMCUDA_SIM_VISIBLE: '2,5' });
  });

  it.prop([fc.array(fc.constantFrom('0', '1', '2', '3', 'GPU-a', 'GPU-b'), { minLength: 1, maxLength: 12 }), fc.nat(64)])(
    'the rank picks its entry, and sees every listed device exactly once',
    (list, localRank) => {
      const seen = visibleDevicesFor(list, localRank).split(',');
      expect(seen[localRank % seen.length]).toBe(list[localRank % list.length]);
      expect([...seen].sort()).toEqual([...new Set(list)].sort());
    },
  );
});
