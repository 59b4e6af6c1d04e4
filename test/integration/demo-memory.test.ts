/**
 * `smcuda demo --memory legacy|vmm|vmm-chunked|pool` on the simulated driver:
 * the ranks' buffers are made of that kind (the driver's memoryKind says so),
 * a vmm-chunked message spans chunks, every byte is verified, and the report
 * says by which data path the large messages went.
 */
import { describe, expect, it } from 'vitest';
import { smcuda } from '../helpers/cli.js';

interface DemoMemoryJson {
  verified: boolean;
  ipc: boolean;
  memory: {
    option: string;
    buffers: { rank: number; kind: string; reason?: string; chunkSize?: number; chunksTouched?: number }[];
    largeMessages: { rget: number; staging: number };
  };
}

async function demo(args: string[]): Promise<DemoMemoryJson> {
  const r = await smcuda(['demo', '--driver', 'sim', '--json', '--sizes', '0,8,64K,3M', '--iters', '2', ...args]);
  expect(r.stderr).toBe('');
  expect(r.code).toBe(0);
  return JSON.parse(r.stdout) as DemoMemoryJson;
}

describe('smcuda demo --memory', () => {
  it.each([
    ['vmm', 'vmm'],
    ['vmm-chunked', 'vmm'],
    ['pool', 'pool'],
  ])('--memory %s with IPC off: %s buffers, every byte verified, large messages by staging', async (option, kind) => {
    const r = await demo(['--memory', option, '--ipc', 'off']);
    expect(r.verified).toBe(true);
    expect(r.memory.option).toBe(option);
    expect(r.memory.buffers.map((b) => [b.rank, b.kind])).toEqual([
      [0, kind],
      [1, kind],
    ]);
    expect(r.memory.largeMessages.rget).toBe(0);
    expect(r.memory.largeMessages.staging).toBeGreaterThan(0);
    if (option === 'vmm-chunked') {
      for (const b of r.memory.buffers) {
        expect(b.chunksTouched).toBeGreaterThanOrEqual(2);
        expect(b.chunkSize).toBeGreaterThan(0);
      }
    } else {
      for (const b of r.memory.buffers) expect(b.chunksTouched).toBeUndefined();
    }
  });

  it('--memory legacy (the default) with IPC on: cuMemAlloc buffers, large messages by RGET', async () => {
    const r = await demo([]);
    expect(r.verified).toBe(true);
    expect(r.memory.option).toBe('legacy');
    expect(r.memory.buffers.every((b) => b.kind === 'legacy-ipc')).toBe(true);
    expect(r.memory.largeMessages.rget).toBeGreaterThan(0);
    expect(r.memory.largeMessages.staging).toBe(0);
  });

  it('the text report names the kind, the chunks a message spans, and the path with its reason', async () => {
    const r = await smcuda(['demo', '--driver', 'sim', '--memory', 'vmm-chunked', '--ipc', 'off', '--sizes', '8,3M', '--iters', '1']);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/rank0 buffers: the driver sees vmm memory; the largest message spans 2 chunks of/);
    expect(r.stdout).toMatch(/memory vmm-chunked \(driver: vmm\): large messages by RGET 0, by staging 4 — IPC is off/);
    expect(r.stdout).toMatch(/verified: all 8 messages byte-exact/);
  });

  it('refuses an unknown kind with a usage error', async () => {
    const r = await smcuda(['demo', '--driver', 'sim', '--memory', 'managed']);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/--memory must be one of legacy, vmm, vmm-chunked, pool, got managed/);
  });

  // Acceptance of issue 18: VMM and pool memory moves by RGET (by descriptor,
  // RGET of a descriptor key), not staging; before the descriptor path a send from VMM memory
  // with IPC on failed (cuIpcGetMemHandle refuses it).
  it('--memory vmm with IPC on: large messages by RGET (a descriptor key)', async () => {
    const r = await demo(['--memory', 'vmm']);
    expect(r.verified).toBe(true);
    expect(r.memory.largeMessages.rget).toBeGreaterThan(0);
    expect(r.memory.largeMessages.staging).toBe(0);
  });

  it.each(['vmm-chunked', 'pool'])('--memory %s with IPC on: large messages by RGET, every byte verified', async (option) => {
    const r = await demo(['--memory', option]);
    expect(r.verified).toBe(true);
    expect(r.memory.largeMessages.rget).toBeGreaterThan(0);
    expect(r.memory.largeMessages.staging).toBe(0);
  });
});
