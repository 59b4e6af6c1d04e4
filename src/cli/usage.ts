/** Argument parsing shared by the sub-commands (node:util parseArgs, with errors as UsageError). */
import { parseArgs, type ParseArgsConfig } from 'node:util';

export class UsageError extends Error {
  readonly code = 'SMCUDA_USAGE';
}

type Options = NonNullable<ParseArgsConfig['options']>;
type Values<T extends Options> = ReturnType<typeof parseArgs<{ args: string[]; options: T; allowPositionals: false; strict: true }>>['values'];

export function parse<T extends Options>(argv: string[], options: T): Values<T> {
  try {
    return parseArgs({ args: argv, options, allowPositionals: false, strict: true }).values;
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
}
