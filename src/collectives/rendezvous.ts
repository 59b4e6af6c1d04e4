/**
 * The rendezvous: from a directory and (rank, size), every rank's Transport
 * and the full mesh of endpoints, with no other coordination.
 *
 *  - The token comes from the caller or SMCUDA_TOKEN; otherwise rank 0
 *    makes one and writes `<dir>/token` (mode 0600, written then renamed) for
 *    the others, who wait for it and refuse it unless it is this user's and
 *    0600. Rank 0 removes it once every rank connected (each had read it).
 *  - Rank r listens on `<dir>/r<r>.sock` and connects to every lower rank
 *    (retrying while that rank is not listening yet); higher ranks connect
 *    to it. Transport ids are `rank<r>`, so an endpoint names its rank.
 *
 * Use a fresh directory per job (or a token per job): a token file left by
 * an earlier job in the same directory would be read by the new one.
 */
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { CudaDriver } from '../cuda/driver.js';
import { envCommunicator } from '../env.js';
import type { Endpoint } from '../endpoint.js';
import { AccessDeniedError, CommunicatorTimeoutError, ConfigError, NoListenerError } from '../errors.js';
import { Transport } from '../transport.js';

export interface RendezvousOptions {
  rank: number;
  size: number;
  /** A directory only this user can reach (created 0700 when missing). */
  dir: string;
  /** The job's secret; default SMCUDA_TOKEN, else rank 0 makes one and shares it through `dir`. */
  token?: string;
  /** The device of this rank; default (localRank, else rank) % the devices this process sees. */
  device?: number;
  /** This rank's index among the ranks of its machine (torchrun's LOCAL_RANK), for the default device. */
  localRank?: number;
  /** A driver instance, or which to open (default 'auto'). */
  driver?: CudaDriver | 'auto' | 'native' | 'sim';
  /** How long to wait for every rank to join (default 60000 ms). */
  joinTimeoutMs?: number;
}

export interface Mesh {
  transport: Transport;
  /** Endpoints by rank; none at this rank's own index. */
  endpoints: Map<number, Endpoint>;
  socket: string;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export function checkRankSize(rank: unknown, size: unknown): void {
  if (typeof size !== 'number' || !Number.isInteger(size) || size < 1 || size > 4096) throw new ConfigError(`size must be an integer from 1 to 4096, got ${String(size)}`);
  if (typeof rank !== 'number' || !Number.isInteger(rank) || rank < 0 || rank >= size) throw new ConfigError(`rank must be an integer from 0 to size-1 (${size - 1}), got ${String(rank)}`);
}

async function tokenFor(o: RendezvousOptions, deadline: number): Promise<string> {
  const given = o.token ?? envCommunicator().token;
  if (given) return given;
  const file = join(o.dir, 'token');
  if (o.rank === 0) {
    const token = randomBytes(24).toString('hex');
    const tmp = `${file}.${process.pid}.tmp`;
    writeFileSync(tmp, token, { mode: 0o600 });
    renameSync(tmp, file);
    return token;
  }
  for (;;) {
    if (existsSync(file)) {
      const st = statSync(file);
      if (st.uid !== process.getuid?.() || (st.mode & 0o077) !== 0) {
        throw new AccessDeniedError(`${file} must be this user's and mode 0600 (it is uid ${st.uid}, mode ${(st.mode & 0o777).toString(8)}): remove it, or pass the token (SMCUDA_TOKEN)`);
      }
      const token = readFileSync(file, 'utf8').trim();
      if (token) return token;
    }
    if (Date.now() > deadline) throw new CommunicatorTimeoutError(`rank 0 did not write ${file} within the join timeout: is it running with the same rendezvous directory?`);
    await sleep(10);
  }
}

/** Joins the job: this rank's transport and an endpoint to every other rank. */
export async function joinMesh(o: RendezvousOptions): Promise<Mesh> {
  checkRankSize(o.rank, o.size);
  if (typeof o.dir !== 'string' || o.dir === '') throw new ConfigError('dir must name the rendezvous directory');
  const joinMs = o.joinTimeoutMs ?? 60_000;
  const deadline = Date.now() + joinMs;
  mkdirSync(o.dir, { recursive: true, mode: 0o700 });
  const token = await tokenFor(o, deadline);
  const transport = await Transport.create({ driver: o.driver ?? 'auto', id: `rank${o.rank}`, token, lazyDevice: true });
  const socket = join(o.dir, `r${o.rank}.sock`);
  const endpoints = new Map<number, Endpoint>();
  try {
    const count = transport.driver.status().available ? (transport.driver.init(), transport.driver.deviceCount()) : 0;
    transport.useDevice(o.device ?? (count > 0 ? (o.localRank ?? o.rank) % count : 0));
    const all = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new CommunicatorTimeoutError(`rank ${o.rank}: only ${endpoints.size} of ${o.size - 1} ranks joined ${o.dir} within ${joinMs} ms`)), Math.max(0, deadline - Date.now()));
      const onEndpoint = (ep: Endpoint) => {
        const m = /^rank(\d+)$/.exec(ep.peerId);
        if (!m) return;
        endpoints.set(Number(m[1]), ep);
        if (endpoints.size === o.size - 1) done();
      };
      const done = () => {
        clearTimeout(timer);
        transport.off('endpoint', onEndpoint);
        resolve();
      };
      transport.on('endpoint', onEndpoint);
      if (o.size === 1) done();
    });
    all.catch(() => {});
    if (o.size > 1) await transport.listen(socket);
    await Promise.all(
      [...Array(o.rank).keys()].map(async (k) => {
        for (;;) {
          try {
            await transport.connect(join(o.dir, `r${k}.sock`));
            return;
          } catch (err) {
            if (!(err instanceof NoListenerError) || Date.now() > deadline) throw err;
            await sleep(10);
          }
        }
      }),
    );
    await all;
    if (o.rank === 0 && !o.token && !envCommunicator().token) rmSync(join(o.dir, 'token'), { force: true });
    return { transport, endpoints, socket };
  } catch (err) {
    await transport.close();
    rmSync(socket, { force: true });
    throw err;
  }
}
