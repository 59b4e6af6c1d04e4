/**
 * The data path's warm-up (src/data-path-warm-up.ts): once per process, two
 * in-memory endpoints on simulated drivers move one message by EAGER and one
 * by RGET, so a fresh process's first real message runs compiled code.
 * Transport.create starts it only for the native driver; here it is called
 * directly.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { runWarmUp, warmDataPath } from '../../../src/data-path-warm-up.js';
import { ConfigError } from '../../../src/errors.js';
import { Transport, type TransportCreateOptions } from '../../../src/transport.js';

afterEach(() => {
  vi.restoreAllMocks();
});

/** Transport.create that keeps each transport it made in `made`; `tweak` sees each as it is made. */
function recordingCreate(made: Transport[], tweak?: (t: Transport) => void): (o: TransportCreateOptions) => Promise<Transport> {
  return async (o) => {
    const t = await Transport.create(o);
    made.push(t);
    tweak?.(t);
    return t;
  };
}

describe('warmDataPath', () => {
  it('moves one message by EAGER and one by RGET, closes what it opened, and runs once per process', async () => {
    const made: Transport[] = [];
    const create = recordingCreate(made);
    const warn = vi.spyOn(process, 'emitWarning');
    const first = warmDataPath(create);
    await expect(first).resolves.toEqual({ eager: 1, rget: 1 });
    expect(made).toHaveLength(2);
    for (const t of made) {
      expect(t.endpoints()).toEqual([]);
      expect(() => t.useDevice()).toThrow(/closed/);
    }
    // Its transports carry a token: no SMCUDA_NO_TOKEN warning reaches the application.
    expect(made.map((t) => t.id)).toEqual(['warm-up-0', 'warm-up-1']);
    expect(warn).not.toHaveBeenCalled();
    expect(warmDataPath(create)).toBe(first);
    expect(made).toHaveLength(2);
  });
});

describe('runWarmUp', () => {
  it('gives up after its time limit and closes what it opened', async () => {
    const made: Transport[] = [];
    // A step that never completes: the second transport's attach hangs.
    const create = recordingCreate(made, (t) => {
      if (made.length === 2) t.attach = () => new Promise<never>(() => {});
    });
    const t0 = performance.now();
    await expect(runWarmUp(create, 200)).resolves.toBeUndefined();
    expect(performance.now() - t0).toBeGreaterThanOrEqual(190);
    expect(made).toHaveLength(2);
    for (const t of made) expect(() => t.useDevice()).toThrow(/closed/);
    // The attach that did run was failed by its transport's close.
    expect(made[0]!.endpoints()).toEqual([]);
  });

  it('resolves undefined when a step fails (a failed warm-up costs only speed)', async () => {
    const create = async (o: TransportCreateOptions) => Transport.create({ ...o, negotiation: { ipc: false } });
    await expect(runWarmUp(create)).resolves.toBeUndefined();
  });
});

describe('Transport.create warmUp option', () => {
  it('refuses anything but a boolean', async () => {
    await expect(Transport.create({ driver: 'sim', token: 't', warmUp: 'yes' as unknown as boolean })).rejects.toThrow(ConfigError);
    await expect(Transport.create({ driver: 'sim', token: 't', warmUp: 'yes' as unknown as boolean })).rejects.toThrow(/warmUp must be a boolean/);
  });
});
