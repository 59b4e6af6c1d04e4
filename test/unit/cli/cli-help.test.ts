/** What an installed user reads — every command's help and the generated diagram headers — names no repository script. */
import { describe, expect, it } from 'vitest';
import { dotOf, mermaidOf } from '../../../src/diagram/render.js';
import { MACHINES } from '../../../src/diagram/machines.js';
import { smcuda } from '../../helpers/cli.js';

const REPO_ONLY = /npm run|scripts\/|\.\.\/shared|gpu-bundle|\.gpu\//;

describe('help texts and generated headers', () => {
  it.each(['probe', 'demo', 'diagram', 'trace', 'inspect', 'bench', 'soak', 'run'])('smcuda %s --help', async (cmd) => {
    const r = await smcuda([cmd, '--help']);
    expect(r.code).toBe(0);
    expect(r.stdout).not.toMatch(REPO_ONLY);
  });

  it('smcuda --help and --version', async () => {
    expect((await smcuda(['--help'])).stdout).not.toMatch(REPO_ONLY);
    expect((await smcuda(['--version'])).stdout.trim()).toMatch(/^\d+\.\d+\.\d+/);
  });

  it('diagram headers', () => {
    for (const m of MACHINES) {
      expect(mermaidOf(m)).not.toMatch(REPO_ONLY);
      expect(dotOf(m)).not.toMatch(REPO_ONLY);
    }
  });
});
