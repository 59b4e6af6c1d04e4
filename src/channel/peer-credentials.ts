/**
 * Who may connect: the two checks a Unix control socket gets besides its own
 * file mode (0600) and the handshake's proof of the job token (src/auth).
 *
 *  1. Its directory is private: owned by this user, no access for group or
 *     others (0700). A socket file is chmod'ed only after bind(), so in a
 *     shared directory there is a moment when another user could connect;
 *     in a private directory there is none.
 *  2. The peer's uid, as the kernel recorded it at connect (SO_PEERCRED,
 *     through the addon), is one that is allowed: by default this process's
 *     own. A process cannot lie about it, and it holds wherever the file
 *     modes are wrong (a socket in a shared directory, a permissive umask,
 *     a path handed in by configuration).
 *
 * Root passes every file mode, so only the uid check stops a root peer
 * connecting to a user's job, and only the uid check stops a user connecting
 * to root's.
 */
import { promises as fsp } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import type * as net from 'node:net';
import { loadAddon } from '../cuda/addon.js';
import { AccessDeniedError, ConfigError } from '../errors.js';

export interface PeerCredentials {
  pid: number;
  uid: number;
  gid: number;
}

/** Which peer uids are let in: 'same' (this process's uid, default), a list, or 'any' (no check). */
export type PeerUidPolicy = 'same' | 'any' | readonly number[];

/** The addon's SO_PEERCRED call; injectable for tests. */
export interface PeerCredentialSource {
  peerCredentials(fd: number): PeerCredentials;
}

function addonSource(): PeerCredentialSource {
  return loadAddon();
}

/** The file descriptor of a connected net.Socket (Unix), or undefined when Node does not expose one. */
function socketFd(socket: net.Socket): number | undefined {
  const fd = (socket as unknown as { _handle?: { fd?: unknown } })._handle?.fd;
  return typeof fd === 'number' && fd >= 0 ? fd : undefined;
}

/** The kernel's record of the process at the other end of `socket` (SO_PEERCRED). */
export function socketPeerCredentials(socket: net.Socket, source: PeerCredentialSource = addonSource()): PeerCredentials {
  const fd = socketFd(socket);
  if (fd === undefined) throw new AccessDeniedError('cannot tell who the peer is: the socket has no file descriptor (closed already?)');
  return source.peerCredentials(fd);
}

export function checkUidPolicy(policy: unknown): PeerUidPolicy {
  if (policy === 'same' || policy === 'any') return policy;
  if (Array.isArray(policy) && policy.every((u) => Number.isInteger(u) && u >= 0)) return policy as number[];
  throw new ConfigError(`peerUids must be 'same', 'any' or a list of uids, got ${JSON.stringify(policy)}`);
}

/**
 * Throws AccessDeniedError unless the peer of `socket` runs as an allowed uid.
 * Returns its credentials (undefined under 'any': nothing was asked).
 */
export function checkPeer(socket: net.Socket, policy: PeerUidPolicy, label: string, source?: PeerCredentialSource): PeerCredentials | undefined {
  if (policy === 'any') return undefined;
  let cred: PeerCredentials;
  try {
    cred = socketPeerCredentials(socket, source);
  } catch (err) {
    throw new AccessDeniedError(`${label}: refused a connection whose peer cannot be identified: ${(err as Error).message}`);
  }
  const allowed = policy === 'same' ? [process.getuid!()] : policy;
  if (!allowed.includes(cred.uid)) {
    throw new AccessDeniedError(
      `${label}: refused a connection from pid ${cred.pid}, uid ${cred.uid}: only uid ${allowed.join(', ')} may connect. ` +
        'Run every process of the job as the same user (or list the other uid in peerUids).',
    );
  }
  return cred;
}

/**
 * Throws ConfigError unless `dir` is a directory owned by this user that
 * group and others cannot use (mode & 0o077 === 0), saying how to fix it.
 */
export async function checkPrivateDir(dir: string): Promise<void> {
  let st;
  try {
    st = await fsp.stat(dir);
  } catch (err) {
    throw new ConfigError(`socket directory ${dir} cannot be used (${(err as NodeJS.ErrnoException).code}): create it with mode 0700 first`);
  }
  if (!st.isDirectory()) throw new ConfigError(`${dir} is not a directory`);
  const uid = process.getuid!();
  // A shared directory (/tmp, sticky) must stay shared: advise a private one inside it, never a chmod of it.
  const ownDir = `a private directory for the job's sockets inside it (mkdir -m 700 ${join(dir, 'myjob')}, or fs.mkdtempSync(path.join(${JSON.stringify(dir)}, 'job-')))`;
  if (st.uid !== uid) {
    throw new ConfigError(`socket directory ${dir} belongs to uid ${st.uid}, not to this process's uid ${uid}: listen in ${ownDir}`);
  }
  if ((st.mode & 0o077) !== 0) {
    const shared = (st.mode & 0o1000) !== 0 || resolve(dir) === resolve(tmpdir());
    throw new ConfigError(
      `socket directory ${dir} has mode 0${(st.mode & 0o7777).toString(8)}: others could reach the socket before it is made private. ` +
        (shared ? `It is shared by every user: listen in ${ownDir}` : `Use a directory only you can enter (chmod 700 ${dir}, or ${ownDir})`) +
        `, or pass privateDir: false where the uid check alone will do.`,
    );
  }
}
