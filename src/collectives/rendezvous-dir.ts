/**
 * The rendezvous directory and the token file in it, against whatever else
 * may be there: another user's directory or symbolic link, a file planted
 * where the token goes (a link to a file rank 0 must not overwrite, a file
 * others can read, a FIFO that would block a reader for good), and a token
 * left by an earlier job.
 *
 *  - The directory is checked before anything is written in it: not a
 *    symbolic link (lstat), a directory, this user's, no group or other bits.
 *    A missing one is made 0700 first.
 *  - Rank 0 creates `<dir>/token` with O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600,
 *    and checks what it opened (fstat) before writing: it never writes into
 *    a file that was there. Readers open it O_NOFOLLOW|O_NONBLOCK and check
 *    it (a regular file of this user, mode 0600, one link) before reading.
 *  - The file names its writer (pid, start time, boot, pid namespace, as
 *    shared-memory segment names do: src/segment-owner.ts). A token whose
 *    writer is gone is stale: readers wait past it, and rank 0 replaces it.
 *    One whose writer lives belongs to another job: rank 0 refuses to start.
 */
import { closeSync, constants, fchmodSync, fstatSync, lstatSync, mkdirSync, openSync, readSync, unlinkSync, writeSync, type Stats } from 'node:fs';
import { join, resolve } from 'node:path';
import { tmpdir } from 'node:os';
import { debug } from '../debug.js';
import { AccessDeniedError, ConfigError } from '../errors.js';
import { localOwner, ownerAlive, type SegmentOwner } from '../segment-owner.js';

export const TOKEN_FILE = 'token';

/** The token file rank 0 wrote, to remove it only while it is still that file. */
export interface WrittenToken {
  path: string;
  dev: number;
  ino: number;
}

/** What is at the token path: nothing, a token, a token whose writer is gone, or a file that is no token file. */
export type FoundToken =
  | { state: 'absent' }
  | { state: 'token'; token: string; owner: SegmentOwner }
  | { state: 'stale'; owner: SegmentOwner }
  | { state: 'malformed' };

const { O_CREAT, O_EXCL, O_NOFOLLOW, O_NONBLOCK, O_RDONLY, O_WRONLY } = constants;
const MAX_TOKEN_FILE = 256;
const LINE = /^smcuda-token 1 (\d{1,10}) (\d{1,10}) ([0-9a-f]{8}) (\d{1,20}) ([0-9a-f]{16,128})\n$/;

function uid(): number {
  return process.getuid!();
}

function kindOf(st: Stats): string {
  if (st.isFile()) return 'regular file';
  if (st.isDirectory()) return 'directory';
  if (st.isSymbolicLink()) return 'symbolic link';
  if (st.isFIFO()) return 'FIFO';
  if (st.isSocket()) return 'socket';
  return 'device file';
}

function errno(err: unknown): string | undefined {
  return (err as NodeJS.ErrnoException).code;
}

/** How to get a private directory. */
function freshDirAdvice(): string {
  return `use a fresh directory only you can enter (mkdir -m 700 DIR, or fs.mkdtempSync(path.join(${JSON.stringify(tmpdir())}, 'job-')))`;
}

/**
 * Makes `dir` (0700) if it is missing, then checks it: a directory, not a
 * symbolic link, this user's, mode & 0o077 = 0. Throws AccessDeniedError
 * (owner, mode, link) or ConfigError (not a directory), saying what to do.
 */
export function privateRendezvousDir(dir: string): void {
  try {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
  } catch (err) {
    const code = errno(err);
    if (code === 'EACCES' || code === 'EPERM') throw new AccessDeniedError(`cannot create the rendezvous directory ${dir} (${code}): ${freshDirAdvice()}`);
    if (code !== 'EEXIST')
      throw new ConfigError(
        `cannot create the rendezvous directory ${dir} (${code}: a part of the path is not a directory?): choose another path, or ${freshDirAdvice()}`,
      );
  }
  let st: Stats;
  try {
    st = lstatSync(dir);
  } catch (err) {
    throw new ConfigError(`cannot use the rendezvous directory ${dir} (${errno(err)}): ${freshDirAdvice()}`);
  }
  if (st.isSymbolicLink()) {
    throw new AccessDeniedError(
      `the rendezvous directory ${dir} is a symbolic link: whoever can change the link could redirect the job's token and sockets. Give the directory itself (its realpath), or ${freshDirAdvice()}`,
    );
  }
  if (!st.isDirectory()) throw new ConfigError(`the rendezvous directory ${dir} is a ${kindOf(st)}, not a directory: remove it, or ${freshDirAdvice()}`);
  if (st.uid !== uid()) {
    throw new AccessDeniedError(`the rendezvous directory ${dir} belongs to uid ${st.uid}, not to this process's uid ${uid()}: ${freshDirAdvice()}`);
  }
  if ((st.mode & 0o077) !== 0) {
    const shared = (st.mode & 0o1000) !== 0 || resolve(dir) === resolve(tmpdir());
    const mode = `0${(st.mode & 0o7777).toString(8)}`;
    throw new AccessDeniedError(
      `the rendezvous directory ${dir} has mode ${mode}: other users could read the job token or reach the sockets. ` +
        (shared ? `It is shared by every user: ${freshDirAdvice()}` : `chmod 700 ${dir}, or ${freshDirAdvice()}`),
    );
  }
}

/** Throws unless `st` (of the open token file) is a regular file of this user with mode 0600 (no group/other bits) and one link. */
function checkTokenStat(path: string, st: Stats): void {
  const remove = `remove it (rm -rf ${path}) or use a fresh rendezvous directory per job`;
  if (!st.isFile()) throw new ConfigError(`${path} is a ${kindOf(st)}, not a token file: ${remove}`);
  if (st.uid !== uid())
    throw new AccessDeniedError(`${path} belongs to uid ${st.uid}, not to this process's uid ${uid()}: ${remove}, or pass the token (SMCUDA_TOKEN)`);
  if ((st.mode & 0o077) !== 0) {
    throw new AccessDeniedError(
      `${path} has mode 0${(st.mode & 0o777).toString(8)}: others could read the job token. It must be 0600: ${remove}, or pass the token (SMCUDA_TOKEN)`,
    );
  }
  if (st.nlink !== 1) throw new AccessDeniedError(`${path} has ${st.nlink} links: another name reaches the job token. ${remove}`);
}

/** A typed error for a failed open of the token file (never a raw errno). */
function openError(path: string, err: unknown): Error {
  const code = errno(err);
  const remove = `remove it or use a fresh rendezvous directory per job`;
  if (code === 'ELOOP' || code === 'EMLINK')
    return new AccessDeniedError(`${path} is a symbolic link: the token file is never followed through one. ${remove}`);
  if (code === 'EACCES' || code === 'EPERM') return new AccessDeniedError(`cannot open ${path} (${code}): ${remove}`);
  if (code === 'EISDIR') return new ConfigError(`${path} is a directory, not a token file: ${remove}`);
  if (code === 'ENXIO') return new ConfigError(`${path} is a socket or FIFO, not a token file: ${remove}`);
  return new ConfigError(`cannot open ${path} (${code}): ${remove}`);
}

/** Whether the process that wrote a token is still running; another boot's is gone, another pid namespace's cannot be judged (alive). */
function writerAlive(owner: SegmentOwner): boolean {
  const me = localOwner();
  if (owner.boot !== me.boot) return false;
  if (owner.pidns !== me.pidns) return true;
  return ownerAlive(owner);
}

/** Reads `<dir>/token` safely; throws typed errors for a link, a wrong kind of file, owner or mode. */
export function readTokenFile(dir: string): FoundToken {
  const path = join(dir, TOKEN_FILE);
  let fd: number;
  try {
    // O_NONBLOCK: a FIFO opens at once (and is refused below) instead of waiting for a writer that never comes.
    fd = openSync(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
  } catch (err) {
    if (errno(err) === 'ENOENT') return { state: 'absent' };
    throw openError(path, err);
  }
  let text: string;
  try {
    checkTokenStat(path, fstatSync(fd));
    const buf = Buffer.alloc(MAX_TOKEN_FILE + 1);
    let n = 0;
    for (let got = 1; got > 0 && n < buf.length; n += got) got = readSync(fd, buf, n, buf.length - n, n);
    text = buf.subarray(0, n).toString('latin1');
  } finally {
    closeSync(fd);
  }
  const m = LINE.exec(text);
  if (!m) return { state: 'malformed' }; // or rank 0 is still writing it
  const owner: SegmentOwner = { pid: Number(m[1]), start: Number(m[2]), boot: m[3]!, pidns: Number(m[4]) };
  return writerAlive(owner) ? { state: 'token', token: m[5]!, owner } : { state: 'stale', owner };
}

/** Creates the file exclusively, never through a link; undefined when something is already at `path`. */
function createExclusive(path: string): number | undefined {
  try {
    return openSync(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0o600);
  } catch (err) {
    if (errno(err) === 'EEXIST') return undefined;
    throw openError(path, err);
  }
}

/**
 * Rank 0: writes `token` to a new `<dir>/token` (0600). A stale token file
 * (its writer is gone) is replaced; anything else already there is refused
 * with a typed error, and nothing is written into it.
 */
export function writeTokenFile(dir: string, token: string): WrittenToken {
  const path = join(dir, TOKEN_FILE);
  for (let attempt = 0; ; attempt++) {
    const fd = createExclusive(path);
    if (fd !== undefined) return fill(path, fd, token);
    const found = readTokenFile(dir);
    if (found.state === 'absent' && attempt < 3) continue; // removed since: try again
    if (found.state === 'stale' && attempt < 3) {
      debug('rendezvous: %s is a token of pid %d, which has exited: replaced', path, found.owner.pid);
      unlinkIfThere(path);
      continue;
    }
    if (found.state === 'token') {
      throw new ConfigError(
        `${path} is the token of another job (its rank 0, pid ${found.owner.pid}, is running): give each job its own rendezvous directory, or stop that job`,
      );
    }
    throw new ConfigError(`${path} is there but is not a token file of this job: remove it, or use a fresh rendezvous directory per job`);
  }
}

function fill(path: string, fd: number, token: string): WrittenToken {
  let st: Stats;
  try {
    fchmodSync(fd, 0o600); // whatever the umask
    st = fstatSync(fd);
    checkTokenStat(path, st);
    const me = localOwner();
    const line = Buffer.from(`smcuda-token 1 ${me.pid} ${me.start >>> 0} ${me.boot} ${me.pidns} ${token}\n`, 'latin1');
    for (let n = 0; n < line.length; ) n += writeSync(fd, line, n, line.length - n, n);
  } catch (err) {
    closeSync(fd);
    unlinkIfThere(path); // made by this O_EXCL open: ours
    throw err;
  }
  closeSync(fd);
  return { path, dev: st.dev, ino: st.ino };
}

function unlinkIfThere(path: string): void {
  try {
    unlinkSync(path);
  } catch (err) {
    if (errno(err) !== 'ENOENT') throw err;
  }
}

/** Removes the token file rank 0 wrote, only while the path still holds that very file. */
export function removeTokenFile(w: WrittenToken | undefined): void {
  if (!w) return;
  try {
    const st = lstatSync(w.path);
    if (st.dev === w.dev && st.ino === w.ino) unlinkSync(w.path);
  } catch (err) {
    debug('rendezvous: could not remove %s: %s', w.path, (err as Error).message);
  }
}
