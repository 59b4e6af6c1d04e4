/** docs/examples run as a user runs them (`node <file>`), on the simulated driver here. */
import { execFile } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const EXAMPLES = new URL('../../docs/examples/', import.meta.url).pathname;
const run = promisify(execFile);

describe('docs/examples', () => {
  const files = readdirSync(EXAMPLES).filter((f) => f.endsWith('.mjs'));

  it('has the examples the README links', () => {
    expect(files).toEqual(expect.arrayContaining(['two-process.mjs', 'own-control-plane.mjs', 'graph-capture.mjs', 'gradient-average.mjs']));
  });

  it('the README shows two-process.mjs whole, as it is run here', () => {
    const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
    expect(readme).toContain(`\`\`\`js\n${readFileSync(join(EXAMPLES, 'two-process.mjs'), 'utf8')}\`\`\``);
  });

  it('two-process.mjs moves device memory between two processes, by RGET from the first message on, every byte checked', async () => {
    const { stdout } = await run(process.execPath, [join(EXAMPLES, 'two-process.mjs')], { timeout: 60_000, env: { ...process.env, SMCUDA_SIM: '' } });
    expect(stdout).toMatch(/simulated driver|native driver/); // 'auto': the native driver on a GPU machine
    expect(stdout.match(/received 4194304 bytes by rget .* every byte checked/g)).toHaveLength(2); // the first waited for the negotiation
    expect(stdout).toContain('negotiation INIT');
  });

  it('gradient-average.mjs averages f32 gradients over 4 ranks with allreduce avg, every element checked on every rank', async () => {
    const { stdout } = await run(process.execPath, [join(EXAMPLES, 'gradient-average.mjs'), '4', '100003'], {
      timeout: 60_000,
      env: { ...process.env, SMCUDA_SIM: '' },
    });
    for (let r = 0; r < 4; r++) expect(stdout).toMatch(new RegExp(`rank ${r}/4: averaged 100003 f32 gradients by \\S+ in .* every element checked`));
    expect(stdout).toContain('gradient average: 4 ranks verified');
  });

  it('own-control-plane.mjs carries the control frames over the runtime own channel via attach()', async () => {
    const { stdout } = await run(process.execPath, [join(EXAMPLES, 'own-control-plane.mjs')], { timeout: 60_000 });
    expect(stdout).toMatch(/parent: 262144 device bytes by \w+ over child's own channel, every byte checked/);
    expect(stdout).toContain('child: parent says thanks');
  });

  it('graph-capture.mjs replays a captured persistent transfer between two processes, fresh bytes checked', async () => {
    const { stdout } = await run(process.execPath, [join(EXAMPLES, 'graph-capture.mjs'), '50'], { timeout: 60_000, env: { ...process.env, SMCUDA_SIM: '' } });
    expect(stdout).toMatch(/rank0: 50 replays launched, [\d.]+ µs of host time per replay/);
    expect(stdout).toMatch(/rank1: 50 replays launched/);
    for (const round of [1, 2, 3]) expect(stdout).toContain(`rank0: replay with fresh data ${round}: 65536 bytes, every byte checked`);
  });
});
