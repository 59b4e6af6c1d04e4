/** `smcuda run`'s command line: the launcher's options before the script, the script's own after it; wrong values are UsageErrors. */
import { describe, expect, it } from 'vitest';
import { parseRunArgs, splitAtScript } from '../../../src/cli/run-args.js';
import { UsageError } from '../../../src/cli/usage.js';

describe('smcuda run arguments', () => {
  it("everything from the script on is the script's, options included", () => {
    const a = parseRunArgs(['-n', '4', '--grace', '100', 'train.mjs', '-n', '2', '--json']);
    expect(a).toMatchObject({ ranks: 4, graceMs: 100, json: false, script: 'train.mjs', scriptArgs: ['-n', '2', '--json'], runtime: 'node' });
  });

  it('-- before the script; --opt=value forms; defaults', () => {
    expect(splitAtScript(['--ranks=2', '--', '-weird.mjs', 'x'])).toEqual({ own: ['--ranks=2'], script: '-weird.mjs', scriptArgs: ['x'] });
    const a = parseRunArgs(['--ranks=2', '--runtime=deno', 'a.mjs']);
    expect(a).toMatchObject({ ranks: 2, runtime: 'deno', graceMs: 5000, devices: undefined, rendezvous: undefined });
  });

  it('-n defaults to the --devices count; duplicates in --devices are kept (two ranks on one GPU)', () => {
    expect(parseRunArgs(['--devices', '0, 0,GPU-5170a11e-0001-4000-8000-000000000001', 's.mjs'])).toMatchObject({
      ranks: 3,
      devices: ['0', '0', 'GPU-5170a11e-0001-4000-8000-000000000001'],
    });
  });

  it('--help needs no script', () => {
    expect(parseRunArgs(['--help']).help).toBe(true);
  });

  it.each([
    [[], /give the number of ranks/],
    [['s.mjs'], /give the number of ranks/],
    [['-n', '2'], /give the script/],
    [['-n', '0', 's.mjs'], /from 1 to 1024/],
    [['-n', '1025', 's.mjs'], /from 1 to 1024/],
    [['-n', '2.5', 's.mjs'], /integer/],
    [['-n', '-1', 's.mjs'], /integer/],
    [['-n', '2', '--grace', '-5', 's.mjs'], /--grace takes an integer/],
    [['-n', '2', '--runtime', 'rhino', 's.mjs'], /--runtime takes node, bun, deno/],
    [['--devices', '', 's.mjs'], /--devices takes/],
    [['--devices', '0,,1', 's.mjs'], /--devices takes/],
    [['-n', '2', '--rendezvous', '', 's.mjs'], /--rendezvous takes a directory/],
    [['-n', '2', '--frobnicate', 's.mjs'], /Unknown option/],
    [['-n', '2', '--json=yes', 's.mjs'], /does not take an argument/],
  ] as const)('%j is refused', (argv, says) => {
    expect(() => parseRunArgs([...argv])).toThrow(UsageError);
    expect(() => parseRunArgs([...argv])).toThrow(says);
  });
});
