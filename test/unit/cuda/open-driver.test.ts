/**
 * openDriver: which driver it picks and why. On a machine without a GPU,
 * 'auto' falls back to the simulator and 'native' is refused with the reason;
 * on a GPU machine 'auto' picks native.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { CudaDriver } from '../../../src/cuda/driver.js';
import { openDriver, withoutSimHint } from '../../../src/cuda/open-driver.js';
import { DriverUnavailableError } from '../../../src/errors.js';

const opened: CudaDriver[] = [];
afterEach(() => {
  for (const d of opened.splice(0)) d.close();
});

describe('openDriver', () => {
  it("'sim' gives the simulator, initialised, on the device asked for", async () => {
    const { driver, kind, reason } = await openDriver({ driver: 'sim', device: 1, sim: { env: {} } });
    opened.push(driver);
    expect(kind).toBe('sim');
    expect(driver.kind).toBe('sim');
    expect(reason).toMatch(/^simulated driver/);
    expect(driver.currentDevice()).toBe(1);
    expect(driver.isReady()).toBe(true);
  });

  it("'auto' picks native only where it works, and says why", async () => {
    const { driver, kind, reason } = await openDriver({ sim: { env: {} } });
    opened.push(driver);
    expect(driver.kind).toBe(kind);
    expect(reason).toMatch(kind === 'sim' ? /^simulated driver: .+/ : /^native driver: \d+ CUDA device/);
    // On the simulator already: nothing tells the user to use the simulator.
    if (kind === 'sim') expect(reason).not.toMatch(/--driver sim|use the simulat/);
    expect(driver.deviceCount()).toBeGreaterThan(0);
  });

  it("withoutSimHint takes the native layer's CLI advice out of a reason", () => {
    expect(
      withoutSimHint('libcuda.so.1 not found: no NVIDIA driver on this machine; install the NVIDIA driver or use the simulated driver (--driver sim)'),
    ).toBe('libcuda.so.1 not found: no NVIDIA driver on this machine; install the NVIDIA driver');
    expect(withoutSimHint('update the NVIDIA driver (525 or newer) or use the simulated driver (--driver sim)')).toBe(
      'update the NVIDIA driver (525 or newer)',
    );
  });

  it("'native' where unavailable is a DriverUnavailableError with the reason; where available, a native driver", async () => {
    let result: Awaited<ReturnType<typeof openDriver>> | undefined;
    try {
      result = await openDriver({ driver: 'native' });
    } catch (err) {
      expect(err).toBeInstanceOf(DriverUnavailableError);
      expect((err as DriverUnavailableError).code).toBe('SMCUDA_DRIVER_UNAVAILABLE');
      expect((err as Error).message).toMatch(
        /native CUDA driver cannot be used: .+; or pass driver: 'sim' \(or 'auto'; CLI: --driver sim\) to run without a GPU$/,
      );
      expect((err as Error).message.match(/driver sim/g)).toHaveLength(1); // said once
      return;
    }
    opened.push(result.driver);
    expect(result.kind).toBe('native');
  });

  it('refuses an unknown driver name and a device that does not exist', async () => {
    await expect(openDriver({ driver: 'gpu' as 'sim' })).rejects.toThrow(TypeError);
    await expect(openDriver({ driver: 'sim', device: 5, sim: { env: {} } })).rejects.toMatchObject({ code: 'CUDA_ERROR_INVALID_DEVICE' });
  });
});
