/**
 * An older NCCL (the fake built as 2.17: no ncclCommSplit, ncclGetLastError,
 * registration or windows): it loads, reports what it lacks, and only the
 * calls that need a missing entry point fail, typed. Its own file: NCCL
 * stays loaded in its process.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { type NcclError, NcclUnavailableError } from '../../../src/errors.js';
import { type Nccl, loadNccl } from '../../../src/nccl/nccl.js';
import { buildFakeNccl, cc, type FakeNccl } from '../../helpers/fake-nccl.js';

describe.skipIf(!cc)(`an NCCL without the optional entry points${cc ? '' : ' (skipped: no C compiler)'}`, () => {
  let fake: FakeNccl;
  let nccl: Nccl;

  beforeAll(() => {
    fake = buildFakeNccl(true);
    nccl = loadNccl({ env: { SMCUDA_NCCL_LIBRARY: fake.dir } });
  });
  afterAll(() => {
    vi.unstubAllEnvs();
    fake?.remove();
  });

  it('loads, and says which optional entry points it lacks', () => {
    expect(nccl.version.text).toBe('2.17.3');
    expect(nccl.path).toBe(fake.library);
    expect(Object.values(nccl.symbols)).toEqual([false, false, false, false, false, false, false, false]);
    expect(nccl.capabilities).toEqual({ split: false, lastError: false, register: false, windowRegister: false, memAlloc: false });
  });

  it('the core works; split and registration fail with SMCUDA_NCCL_UNSUPPORTED naming the version that has them', async () => {
    const comm = await nccl.initRank({ size: 1, rank: 0, id: nccl.uniqueId() });
    await expect(comm.split({ color: 0, key: 0 })).rejects.toThrow(NcclUnavailableError);
    await expect(comm.split({ color: 0, key: 0 })).rejects.toMatchObject({ code: 'SMCUDA_NCCL_UNSUPPORTED' });
    await expect(comm.split({ color: 0, key: 0 })).rejects.toThrow(/ncclCommSplit: the loaded NCCL 2\.17\.3 .* \(NCCL 2\.18 or newer does\)/);
    expect(() => comm.register(1n, 4)).toThrow(/ncclCommRegister: .*NCCL 2\.19 or newer/);
    expect(() => comm.windowRegister(1n, 4)).toThrow(/ncclCommWindowRegister: .*NCCL 2\.27 or newer/);
    expect(() => nccl.memAlloc(4)).toThrow(/ncclMemAlloc: .*NCCL 2\.19 or newer/);
    // Without ncclGetLastError an error carries NCCL's string only.
    vi.stubEnv('FAKE_NCCL_ID_FAIL', '3');
    let err: NcclError | undefined;
    try {
      nccl.uniqueId();
    } catch (e) {
      err = e as NcclError;
    }
    expect(err).toMatchObject({ code: 'SMCUDA_NCCL_INTERNAL_ERROR', result: 3, lastError: '' });
    comm.destroy();
  });
});
