/** Argument parsing shared by the sub-commands (node:util parseArgs, with errors as UsageError). */
import { parseArgs, type ParseArgsConfig } from 'node:util';

export class UsageError extends Error {
  readonly code = 'SMCUDA_USAGE';
}

type Options = NonNullable<ParseArgsConfig['options']>;
type Values<T extends Options> = ReturnType<typeof parseArgs<{ args: string[]; options: T; allowPositionals: false; strict: true }>>['values'];

export function parse<T extends Options>(argv: string[], options: T): Values<T> {
  try {
    return parseArgs({ args: negativeValues(argv, options), options, allowPositionals: false, strict: true }).values;
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
}

/**
 * `--ranks -3`: parseArgs calls a value starting with '-' "ambiguous"; a
 * number is meant as the option's value, so it is passed as `--ranks=-3` and
 * the command's own check says what the option takes.
 */
function negativeValues(argv: string[], options: Options): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    const m = /^--([^=]+)$/.exec(arg);
    const next = argv[i + 1];
    if (m && options[m[1]!]?.type === 'string' && next !== undefined && /^-[\d.]/.test(next)) {
      out.push(`${arg}=${next}`);
      i++;
    } else {
      out.push(arg);
    }
  }
  return out;
}
