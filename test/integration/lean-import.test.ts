/**
 * A lean core (issue 43): `import 'smcuda'` loads neither the simulator, nor
 * the inspector and its diagrams, nor the CLI or the bench, nor NCCL's
 * binding (src/nccl/) or the TCP store; they load on first use. And the package runs where code generation from strings is
 * refused (`node --disallow-code-generation-from-strings`): the frame codec
 * is generated ahead of time (src/wire/codec.generated.ts), not compiled
 * with `new Function` at load. Both run the compiled package (dist/) in a
 * fresh node: `npx tsc -p .` first.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const run = promisify(execFile);
const fixture = (name: string) => fileURLToPath(new URL(`../fixtures/${name}`, import.meta.url));
const DIST = new URL('../../dist/', import.meta.url).href;

/** The modules that only load on first use, as URLs under dist/. */
const ON_FIRST_USE = /^src\/(cuda\/sim|kernels\/sim\/|inspect\/|diagram\/|cli\/|bench\/|nccl\/|collectives\/tcp-store)/;

interface Loaded {
  entry: string[];
  sim: string[];
}

async function loadedModules(): Promise<Loaded> {
  const dir = mkdtempSync(join(tmpdir(), 'smcuda-lean-'));
  try {
    const { stdout } = await run(process.execPath, [fixture('lean-import.mjs'), join(dir, 'loaded.txt')], { timeout: 30_000 });
    return JSON.parse(stdout) as Loaded;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const inDist = (urls: string[]) => urls.filter((u) => u.startsWith(DIST)).map((u) => u.slice(DIST.length));

describe("import 'smcuda'", () => {
  it('loads no module of the simulator, the inspector, the diagrams, the CLI or the bench; openDriver loads the simulator when it is chosen', async () => {
    const { entry, sim } = await loadedModules();
    const own = inDist(entry);
    expect(own).toContain('src/index.js');
    expect(own.filter((p) => ON_FIRST_USE.test(p))).toEqual([]);
    // The hooks see what loads later too: the check above is not blind.
    expect(inDist(sim)).toContain('src/cuda/sim-driver.js');
    expect(inDist(sim).some((p) => p.startsWith('src/kernels/sim/'))).toBe(true);
    console.log(
      `import 'smcuda' loads ${entry.filter((u) => u.startsWith('file:')).length} modules (${own.length} of the package); openDriver({ driver: 'sim' }) ${sim.length} more`,
    );
  }, 60_000);

  it('works under node --disallow-code-generation-from-strings: a host message over a memory channel pair, the negotiation and device messages', async () => {
    const { stdout } = await run(process.execPath, ['--disallow-code-generation-from-strings', fixture('no-codegen-message.mjs')], { timeout: 30_000 });
    const out = JSON.parse(stdout) as { evalRefused: boolean; received: number[]; path: string; warmUp: unknown };
    // The flag is in force in that process (new Function throws), and the message still went through.
    expect(out.evalRefused).toBe(true);
    expect(out.received).toEqual([1, 2, 3, 4]);
    expect(out.path).toBe('eager');
    // The warm-up's device messages: by EAGER, then by RGET once the negotiation (XState) reached OK.
    expect(out.warmUp).toEqual({ eager: 1, rget: 1 });
  }, 60_000);
});
