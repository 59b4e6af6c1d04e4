/** `smcuda probe` reports the CUDA Multi-Process Service; demo and bench advise it when ranks share a GPU without it (src/cli/mps.ts). */
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { mpsStatus, sharedGpuAdvice, MPS_START_COMMAND } from '../../../src/cli/mps.js';
import { smcuda } from '../../helpers/cli.js';

const dirs: string[] = [];
const servers: Server[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => new Promise((r) => s.close(r))));
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function pipeDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'smcuda-mps-'));
  dirs.push(d);
  return d;
}

/** A stand-in for the MPS control daemon: a Unix socket named `control` in the pipe directory. */
async function controlSocket(dir: string): Promise<void> {
  const s = createServer();
  servers.push(s);
  await new Promise<void>((r) => s.listen(join(dir, 'control'), r));
}

describe('MPS detection', () => {
  it('is not active without a control socket in $CUDA_MPS_PIPE_DIRECTORY', () => {
    const dir = pipeDir();
    const m = mpsStatus({ CUDA_MPS_PIPE_DIRECTORY: dir });
    expect(m).toMatchObject({ active: false, controlSocket: false, pipeDirectory: dir });
  });

  it('is active when the control socket is there', async () => {
    const dir = pipeDir();
    await controlSocket(dir);
    expect(mpsStatus({ CUDA_MPS_PIPE_DIRECTORY: dir })).toMatchObject({ active: true, controlSocket: true });
  });

  it('defaults to /tmp/nvidia-mps', () => {
    expect(mpsStatus({}).pipeDirectory).toBe('/tmp/nvidia-mps');
  });

  it('advises MPS only when ranks share a GPU and it is not running', async () => {
    const dir = pipeDir();
    const off = mpsStatus({ CUDA_MPS_PIPE_DIRECTORY: dir });
    expect(sharedGpuAdvice(false, off)).toEqual([]);
    const advice = sharedGpuAdvice(true, off).join('\n');
    expect(advice).toContain('~150 µs');
    expect(advice).toContain('~19 µs');
    expect(advice).toContain(MPS_START_COMMAND);
    await controlSocket(dir);
    expect(sharedGpuAdvice(true, mpsStatus({ CUDA_MPS_PIPE_DIRECTORY: dir }))).toEqual([]);
  });

  it('smcuda probe --json says whether MPS runs, and the text names the start command', async () => {
    const dir = pipeDir();
    const before = await smcuda(['probe', '--json'], { CUDA_MPS_PIPE_DIRECTORY: dir });
    expect(before.code).toBe(0);
    expect(JSON.parse(before.stdout).mps).toMatchObject({ active: false, pipeDirectory: dir });
    await controlSocket(dir);
    const after = await smcuda(['probe', '--json'], { CUDA_MPS_PIPE_DIRECTORY: dir });
    expect(JSON.parse(after.stdout).mps).toMatchObject({ active: true, controlSocket: true });
    const text = await smcuda(['probe'], { CUDA_MPS_PIPE_DIRECTORY: pipeDir() });
    if (JSON.parse(before.stdout).available) {
      expect(text.stdout).toContain(`MPS: not running`);
      expect(text.stdout).toContain(MPS_START_COMMAND);
    } else {
      // Without a GPU: said plainly, with the way to try the simulator, and no MPS advice.
      expect(text.stdout).toMatch(/^No GPU: the CUDA driver cannot be used on this machine\.\n {2}why: .+\n/);
      expect(text.stdout).toContain('smcuda probe --driver sim');
      expect(text.stdout).not.toMatch(/MPS|nvidia-cuda-mps/);
      expect(text.stdout).not.toMatch(/--driver sim\)|or use the simulated/);
    }
  });
});
