/**
 * AllocationRanges: a buffer checked once costs one buffer-id query after;
 * a range past its allocation and an unknown pointer are refused; a freed
 * allocation whose address is given again is checked afresh (new id).
 */
import { describe, expect, it, vi } from 'vitest';
import { simDevice } from '../../helpers/sim-device.js';
import { AllocationRanges } from '../../../src/paths/allocation-ranges.js';
import { ArgumentRangeError, CudaError } from '../../../src/errors.js';

describe('allocation ranges', () => {
  it('a buffer checked before costs one buffer-id query, no address-range query', () => {
    const drv = simDevice();
    const r = new AllocationRanges(drv);
    const p = drv.memAlloc(4096);
    r.check({ ptr: p, length: 4096 });
    const range = vi.spyOn(drv, 'memGetAddressRange');
    const id = vi.spyOn(drv, 'bufferId');
    for (let i = 0; i < 10; i++) r.check({ ptr: p + 1024n, length: 1024 });
    expect(range).not.toHaveBeenCalled();
    expect(id).toHaveBeenCalledTimes(10);
  });

  it('refuses bytes past the allocation (known or not) and a pointer the driver does not know', () => {
    const drv = simDevice();
    const r = new AllocationRanges(drv);
    const p = drv.memAlloc(4096);
    expect(() => r.check({ ptr: p, length: 4097 }, 'options.into')).toThrow(ArgumentRangeError);
    r.check({ ptr: p, length: 16 });
    expect(() => r.check({ ptr: p + 4000n, length: 200 })).toThrow(ArgumentRangeError);
    expect(() => r.check({ ptr: 0x7777_0000n, length: 8 })).toThrow(CudaError);
  });

  it('a freed allocation is not trusted: its pointer is refused, and a new allocation at the same address is checked afresh', () => {
    const drv = simDevice();
    const r = new AllocationRanges(drv);
    const big = drv.memAlloc(1 << 20);
    r.check({ ptr: big, length: 1 << 20 });
    drv.memFree(big);
    expect(() => r.check({ ptr: big, length: 8 })).toThrow(CudaError);
    const small = drv.memAlloc(4096);
    if (small === big) expect(() => r.check({ ptr: small, length: 1 << 20 })).toThrow(ArgumentRangeError);
    r.check({ ptr: small, length: 4096 });
  });
});
