/**
 * The rendezvous: from a directory and (rank, size), every rank's Transport
 * and the full mesh of endpoints, with no other coordination.
 *
 *  - The directory is checked first (rendezvous-dir.ts): this user's, 0700,
 *    not a symbolic link; a missing one is made 0700.
 *  - The token comes from the caller or SMCUDA_TOKEN; otherwise rank 0
 *    makes one and writes it to a new `<dir>/token` (0600, created
 *    exclusively, never through a link) for the others, who wait for it and
 *    check it before reading. The file names the process that wrote it: a
 *    token whose writer has exited (an earlier job that was killed) is never
 *    read, and rank 0 replaces it. Rank 0 removes the file once every rank
 *    connected, and on every failure of the join.
 *  - Rank r listens on `<dir>/r<r>.sock` and connects to every lower rank
 *    (retrying while that rank is not listening yet); higher ranks connect
 *    to it. Transport ids are `rank<r>`, so an endpoint names its rank; a
 *    peer whose id is not a canonical rank of this job (`rank5` of 2,
 *    `rank01`) is closed and left out, and a join that times out names the
 *    ranks that did not come.
 *
 * One job at a time per directory: rank 0 refuses a directory whose token
 * belongs to a job still running.
 */
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import type { CudaDriver } from '../cuda/driver.js';
import { debug } from '../debug.js';
import { envCommunicator } from '../env.js';
import type { Endpoint } from '../endpoint.js';
import { CommunicatorTimeoutError, ConfigError, NoListenerError } from '../errors.js';
import { Transport } from '../transport.js';
import { privateRendezvousDir, readTokenFile, removeTokenFile, TOKEN_FILE, writeTokenFile } from './rendezvous-dir.js';

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
  if (typeof size !== 'number' || !Number.isInteger(size) || size < 1 || size > 4096)
    throw new ConfigError(`size must be an integer from 1 to 4096, got ${String(size)}`);
  if (typeof rank !== 'number' || !Number.isInteger(rank) || rank < 0 || rank >= size)
    throw new ConfigError(`rank must be an integer from 0 to size-1 (${size - 1}), got ${String(rank)}`);
}

const RANK_ID = /^rank(0|[1-9][0-9]{0,3})$/;

/** The rank a transport id names: `rank<r>` written canonically (no sign, no leading zero), r < size; else undefined. */
export function rankOfPeerId(id: string, size: number): number | undefined {
  const m = RANK_ID.exec(id);
  if (!m) return undefined;
  const r = Number(m[1]);
  return r < size ? r : undefined;
}

/** Rank 1 and up, without SMCUDA_TOKEN: waits for the token rank 0 writes, past a stale one. */
async function waitForToken(o: RendezvousOptions, deadline: number, joinMs: number): Promise<string> {
  const path = join(o.dir, TOKEN_FILE);
  let note = '';
  for (;;) {
    const found = readTokenFile(o.dir);
    if (found.state === 'token') return found.token;
    if (found.state === 'stale')
      note = ` (${path} is the token of an earlier job whose rank 0, pid ${found.owner.pid}, has exited: it is not used; rank 0 of this job replaces it)`;
    if (found.state === 'malformed') note = ` (${path} is not a complete token file: remove it, or use a fresh rendezvous directory per job)`;
    if (Date.now() > deadline) {
      throw new CommunicatorTimeoutError(
        `rank ${o.rank} of ${o.size}: rank 0 did not write its token to ${path} within ${joinMs} ms${note}: is rank 0 running, with the same rendezvous directory? Or give every rank the same SMCUDA_TOKEN`,
      );
    }
    await sleep(10);
  }
}

/** Joins the job: this rank's transport and an endpoint to every other rank. */
export async function joinMesh(o: RendezvousOptions): Promise<Mesh> {
  checkRankSize(o.rank, o.size);
  if (typeof o.dir !== 'string' || o.dir === '') throw new ConfigError('dir must name the rendezvous directory');
  const joinMs = o.joinTimeoutMs ?? 60_000;
  const deadline = Date.now() + joinMs;
  privateRendezvousDir(o.dir); // before anything is written in it
  const given = o.token ?? envCommunicator().token;
  const made = !given && o.rank === 0 ? randomBytes(24).toString('hex') : undefined;
  const written = made !== undefined ? writeTokenFile(o.dir, made) : undefined;
  try {
    const token = given || made || (await waitForToken(o, deadline, joinMs));
    const mesh = await connectMesh(o, token, deadline, joinMs);
    removeTokenFile(written); // every rank connected: each had read it
    return mesh;
  } catch (err) {
    removeTokenFile(written);
    throw err;
  }
}

/** Lists ranks for a message: all of them, or the first 16 and how many. */
function rankList(ranks: number[]): string {
  return ranks.length <= 16 ? ranks.join(', ') : `${ranks.slice(0, 16).join(', ')}, … (${ranks.length} in all)`;
}

/** What a join saw: the ranks that came, and the peers and connections it turned away (for the timeout's message). */
class Joining {
  readonly endpoints = new Map<number, Endpoint>();
  readonly strays: string[] = [];
  readonly refusals: string[] = [];

  constructor(
    private readonly o: RendezvousOptions,
    private readonly joinMs: number,
  ) {}

  /** An endpoint from the listener or a connect: filed under its rank, or closed when its id names no other rank of this job. */
  admit(ep: Endpoint): void {
    const k = rankOfPeerId(ep.peerId, this.o.size);
    if (k === undefined || k === this.o.rank) {
      debug('rendezvous: rank %d of %d: closed the endpoint to %j, not another rank of this job', this.o.rank, this.o.size, ep.peerId);
      if (this.strays.length < 8) this.strays.push(ep.peerId);
      ep.close(`${JSON.stringify(ep.peerId)} is not a rank of this job of ${this.o.size} (rank0 … rank${this.o.size - 1})`);
      return;
    }
    this.endpoints.set(k, ep);
  }

  get complete(): boolean {
    return this.endpoints.size === this.o.size - 1;
  }

  timeout(): CommunicatorTimeoutError {
    const { rank, size, dir } = this.o;
    const joined = [...this.endpoints.keys(), rank].sort((a, b) => a - b);
    const missing = [...Array(size).keys()].filter((k) => !joined.includes(k));
    let msg = `rank ${rank} of ${size}: ${missing.length === 1 ? 'rank' : 'ranks'} ${rankList(missing)} did not join ${dir} within ${this.joinMs} ms (joined: ${rankList(joined)})`;
    if (this.strays.length > 0) {
      msg += `; closed peers that are no rank of this job: ${this.strays.map((s) => JSON.stringify(s)).join(', ')} (a rank past ${size - 1} means the ranks disagree on the size: check WORLD_SIZE)`;
    }
    if (this.refusals.length > 0) msg += `; refused ${this.refusals.length} connection(s), the last: ${this.refusals.at(-1)}`;
    return new CommunicatorTimeoutError(`${msg}. Start every rank with the same rendezvous directory, size and token, or raise joinTimeoutMs`);
  }
}

async function connectMesh(o: RendezvousOptions, token: string, deadline: number, joinMs: number): Promise<Mesh> {
  const transport = await Transport.create({ driver: o.driver ?? 'auto', id: `rank${o.rank}`, token, lazyDevice: true });
  const socket = join(o.dir, `r${o.rank}.sock`);
  const joining = new Joining(o, joinMs);
  let timer: NodeJS.Timeout | undefined;
  let done = () => {};
  const all = new Promise<void>((resolve, reject) => {
    timer = setTimeout(() => reject(joining.timeout()), Math.max(0, deadline - Date.now()));
    done = resolve;
  });
  all.catch(() => {}); // awaited below; a failure elsewhere may come first
  const onEndpoint = (ep: Endpoint) => {
    joining.admit(ep);
    if (joining.complete) done();
  };
  const onRefused = (err: Error) => joining.refusals.push(err.message);
  transport.on('endpoint', onEndpoint);
  transport.on('refused', onRefused);
  let stopped = false;
  try {
    const count = transport.driver.status().available ? (transport.driver.init(), transport.driver.deviceCount()) : 0;
    transport.useDevice(o.device ?? (count > 0 ? (o.localRank ?? o.rank) % count : 0));
    if (joining.complete) done(); // a job of one
    if (o.size > 1) await transport.listen(socket);
    const connects = Promise.all([...Array(o.rank).keys()].map((k) => connectTo(k)));
    connects.catch(() => {});
    await Promise.race([connects.then(() => all), all]);
    return { transport, endpoints: joining.endpoints, socket };
  } catch (err) {
    stopped = true;
    await transport.close(); // its listener removes its own socket
    throw err;
  } finally {
    clearTimeout(timer);
    transport.off('endpoint', onEndpoint);
    transport.off('refused', onRefused);
  }

  /** Connects to rank k, retrying while it is not listening yet; the endpoint must be rank k's. */
  async function connectTo(k: number): Promise<void> {
    const path = join(o.dir, `r${k}.sock`);
    for (;;) {
      if (stopped) return;
      try {
        const ep = await transport.connect(path);
        if (ep.peerId !== `rank${k}`) {
          ep.close('not the rank this socket is for');
          throw new ConfigError(
            `rank ${o.rank}: the process listening at ${path} is ${JSON.stringify(ep.peerId)}, not rank${k}: use a fresh rendezvous directory per job`,
          );
        }
        return;
      } catch (err) {
        if (!(err instanceof NoListenerError)) throw err;
        if (Date.now() > deadline) throw joining.timeout();
        await sleep(10);
      }
    }
  }
}
