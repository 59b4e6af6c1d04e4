/**
 * Refusing option keys nobody reads: `{ tokn: '…' }` would otherwise make a
 * transport without a token, silently. The error names the key and the
 * known key it is closest to.
 */
import { ConfigError } from './errors.js';

/** Throws ConfigError when `o` is not a plain options object or has a key not in `known`. */
export function refuseUnknownKeys(where: string, o: unknown, known: readonly string[]): void {
  if (o === undefined) return;
  if (typeof o !== 'object' || o === null || Array.isArray(o)) {
    throw new ConfigError(`${where} must be an object, got ${o === null ? 'null' : Array.isArray(o) ? 'an array' : typeof o}`);
  }
  for (const key in o) {
    if (!known.includes(key)) throw new ConfigError(unknownKeyMessage(where, key, known));
  }
}

function unknownKeyMessage(where: string, key: string, known: readonly string[]): string {
  const near = closest(key, known);
  return `unknown option ${JSON.stringify(key)} in ${where}${near ? `: did you mean ${JSON.stringify(near)}?` : ''} (known: ${known.join(', ')})`;
}

/** The known key within a small edit distance of `key` (a typo), or a case-insensitive match. */
export function closest(key: string, known: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestDistance = Infinity;
  for (const k of known) {
    const a = key.toLowerCase();
    const b = k.toLowerCase();
    // Same letters, or one cut short ('maxTry' of 'maxTries'): as good as one edit.
    const d = a === b ? 0 : a.length >= 3 && (b.startsWith(a.slice(0, -1)) || a.startsWith(b)) ? 1 : editDistance(a, b);
    if (d < bestDistance) {
      best = k;
      bestDistance = d;
    }
  }
  // A third of the key's length, at least 1, at most 3 edits: 'tokn' → 'token', not 'x' → 'id'.
  const allowed = Math.min(3, Math.max(1, Math.floor(key.length / 3)));
  return bestDistance <= allowed ? best : undefined;
}

/** Levenshtein distance (keys are short: the quadratic table is fine). */
function editDistance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    for (let j = 1; j <= b.length; j++) {
      cur[j] = Math.min(prev[j]! + 1, cur[j - 1]! + 1, prev[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    prev = cur;
  }
  return prev[b.length]!;
}
