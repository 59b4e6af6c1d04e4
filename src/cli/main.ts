#!/usr/bin/env node
/**
 * The `smcuda` command: one sub-command per file in this folder.
 * Exit codes: 0 success, 1 the command failed, 2 bad usage.
 */
import { runBenchCommand } from './bench.js';
import { runDemo } from './demo.js';
import { runDiagram } from './diagram.js';
import { runInspect } from './inspect.js';
import { runProbe } from './probe.js';
import { runRun } from './run.js';
import { runSoak } from './soak.js';
import { runTrace } from './trace-cmd.js';
import { ENV_OVERRIDES } from '../env.js';
import { UsageError } from './usage.js';
import { packageVersion } from './version.js';

const commands: Record<string, { run: (argv: string[]) => Promise<number>; summary: string }> = {
  probe: { run: runProbe, summary: 'what the CUDA driver sees: devices, UUIDs, peer matrix, IPC support' },
  bench: { run: runBenchCommand, summary: 'the benchmark suite: figures beside same-run baselines, targets, JSON and plots' },
  demo: { run: runDemo, summary: 'local processes exchange GPU buffers over smcuda, verified (the main job)' },
  diagram: { run: runDiagram, summary: 'Mermaid, DOT and SVG pictures of the protocol state machines' },
  trace: { run: runTrace, summary: 'a recorded trace as a sequence diagram or per-endpoint timeline; flight records: who is stuck' },
  inspect: { run: runInspect, summary: "a live web page of each endpoint's negotiation state and cache counters" },
  run: { run: runRun, summary: 'start N ranks of a script (as torchrun, mpirun): RANK, WORLD_SIZE, rendezvous, prefixed output' },
  soak: { run: runSoak, summary: 'a long mixed run between 4 processes: RSS, mappings, fds at start and end, messages/s' },
};

function help(): string {
  const lines = ['usage: smcuda <command> [options]', '', 'commands:'];
  for (const [name, c] of Object.entries(commands)) lines.push(`  ${name.padEnd(8)} ${c.summary}`);
  lines.push(
    '',
    "Run 'smcuda <command> --help' for a command's options; 'smcuda --version' prints the version.",
    '',
    'environment (read by every command and worker; docs/debugging.md):',
  );
  for (const e of ENV_OVERRIDES) lines.push(`  ${e.name.padEnd(26)} ${e.value}; default ${e.default}`);
  return lines.join('\n');
}

async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (!name || name === '--help' || name === '-h' || name === 'help') {
    console.log(help());
    return name ? 0 : 2;
  }
  if (name === '--version' || name === '-v' || name === 'version') {
    console.log(packageVersion());
    return 0;
  }
  const cmd = commands[name];
  if (!cmd) {
    console.error(`smcuda: unknown command '${name}'\n\n${help()}`);
    return 2;
  }
  try {
    return await cmd.run(rest);
  } catch (err) {
    if (err instanceof UsageError) {
      console.error(`smcuda ${name}: ${err.message}\nRun 'smcuda ${name} --help' for usage.`);
      return 2;
    }
    const e = err as Error & { code?: string };
    console.error(`smcuda ${name}: ${e.code ? `[${e.code}] ` : ''}${e.message}`);
    if (process.env.NODE_DEBUG?.includes('smcuda')) console.error(e.stack);
    return 1;
  }
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err) => {
    console.error(err);
    process.exitCode = 1;
  },
);
