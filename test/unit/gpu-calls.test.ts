/**
 * The GPU runtime is the only library code that creates, records, destroys
 * or waits on events and synchronises streams (docs/architecture.md, 'Who
 * owns what while the GPU works'): no source file outside src/gpu/ and
 * src/cuda/ calls eventCreate, eventDestroy, eventRecord, streamWaitEvent,
 * ipcOpenEventHandle, whenComplete or streamSynchronize. A release
 * that waits for the GPU goes through the runtime (a mark, a hold), so that
 * what the GPU uses is released from one place, from completion.
 *
 * The exceptions are benchmarks that time the driver's own calls: the call
 * is what they measure, so it cannot go through the runtime.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const root = join(import.meta.dirname, '..', '..');

/** Calls that only the GPU runtime and the drivers make: an event's life, its records and the waits on it, a peer's event opened. */
const CALLS = ['eventCreate', 'eventDestroy', 'eventRecord', 'streamWaitEvent', 'ipcOpenEventHandle', 'whenComplete', 'streamSynchronize'] as const;

/** Calls that make or end a stream's life. */
const STREAM_CALLS = ['streamCreate', 'streamDestroy'] as const;

/** Where they may be called. */
const OWNERS = ['src/gpu/', 'src/cuda/'];

/** File → why it must call the driver itself. */
const EXCEPTIONS: Record<string, string> = {
  'src/bench/baselines.ts': 'times cuMemcpyAsync, event records and whenComplete themselves (the driver-level floor)',
  'src/bench/completion-latency.ts': "times whenComplete against a spin on eventQuery: the driver's completion path is what it measures",
  'src/bench/memory-kinds.ts': 'times copies between timing events (eventElapsed)',
  'src/bench/graph-replays.ts': 'times graph replays between timing events (eventElapsed)',
  'src/bench/memop-pingpong.ts': 'times stream memory operations between timing events, and waits for the end event itself before reading the time',
  'src/bench/nccl-anchor-rank.ts': "times NCCL's isolated call as nccl-tests does: a launch, then a stream synchronise",
  'src/bench/host-staged-allreduce.ts': 'the reference it compares against: a host-staged allreduce synchronising its stream as such a baseline does',
};

function sources(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(join(root, dir))) {
    const rel = `${dir}/${name}`;
    if (statSync(join(root, rel)).isDirectory()) out.push(...sources(rel));
    else if (name.endsWith('.ts') && !name.endsWith('.d.ts')) out.push(rel);
  }
  return out;
}

/** The calls of `text` (comments left out), as `file:line call`. */
function callsIn(file: string, text: string, calls: readonly string[] = CALLS): string[] {
  const found: string[] = [];
  const lines = text.replace(/\/\*[\s\S]*?\*\//g, (c) => c.replace(/[^\n]/g, ' ')).split('\n');
  lines.forEach((line, i) => {
    const code = line.replace(/\/\/.*$/, '');
    for (const call of calls) if (new RegExp(`\\.${call}\\s*\\(`).test(code)) found.push(`${file}:${i + 1} ${call}`);
  });
  return found;
}

describe('GPU calls (the GPU runtime owns events and stream synchronisation)', () => {
  const files = ['src', 'machines', 'cache'].flatMap(sources);

  it('no file outside src/gpu/ and src/cuda/ creates, records, destroys, opens or waits on events, or synchronises a stream', () => {
    const bad = files
      .filter((f) => !OWNERS.some((o) => f.startsWith(o)) && EXCEPTIONS[f] === undefined)
      .flatMap((f) => callsIn(f, readFileSync(join(root, f), 'utf8')));
    expect(bad).toEqual([]);
  });

  it("no library file outside src/gpu/ and src/cuda/ creates or destroys a stream (the runtime's stream(purpose) and ownStream() do; the CLI and the bench are tools)", () => {
    const tools = ['src/cli/', 'src/bench/'];
    const bad = files
      .filter((f) => !OWNERS.some((o) => f.startsWith(o)) && !tools.some((t) => f.startsWith(t)))
      .flatMap((f) => callsIn(f, readFileSync(join(root, f), 'utf8'), STREAM_CALLS));
    expect(bad).toEqual([]);
  });

  it('every exception still needs to be one (it makes such a call, and the file exists)', () => {
    for (const f of Object.keys(EXCEPTIONS)) expect(callsIn(f, readFileSync(join(root, f), 'utf8')).length, f).toBeGreaterThan(0);
  });

  it('finds a call, and not one in a comment', () => {
    expect(callsIn('x.ts', 'const e = d.eventCreate({});\n// d.eventDestroy(e)\n/* d.whenComplete(e) */ d.streamSynchronize (s);')).toEqual([
      'x.ts:1 eventCreate',
      'x.ts:3 streamSynchronize',
    ]);
  });
});
