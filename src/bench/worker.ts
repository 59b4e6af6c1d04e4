/**
 * One of the two `smcuda bench` worker processes (forked by runner.ts via
 * WorkerGroup). It opens the driver on its device, then runs the commands of
 * protocol.ts: sessions (Transport pairs with their own options) and
 * measurements on them, and the raw baselines.
 */
import { join } from 'node:path';
import { connectUnix } from '../channel/unix-channel.js';
import type { CudaDriver } from '../cuda/driver.js';
import { openDriver } from '../cuda/open-driver.js';
import type { Endpoint } from '../endpoint.js';
import { Transport } from '../transport.js';
import { cacheHit, copyCompletion, ipcOpen, rawCopy, rawCopyMany, stagingBaseline } from './baselines.js';
import { cacheHitPattern } from './cache-hits.js';
import { CountingChannel } from './counting-channel.js';
import { BENCH_WORKER_ENV, type BenchCommand, type BenchWorkerConfig, type BenchWorkerInfo, type ExportedBuffer } from './protocol.js';
import { type EchoServer, pingPong as socketPingPong, startEchoServer } from './socket-pingpong.js';
import { KindExporter, KindImporter } from './memory-kinds.js';
import { AllToAll } from './all-to-all.js';
import { type CallRecord, recordStates, timedDriver } from './first-send.js';
import { FloorSide } from './native-floor.js';
import { bidirectional, firstSend, negotiate, oneWay, pingPong, postProbe, probeSend } from './transport-measures.js';
import { serveWorker } from './worker-group.js';
import { isSuiteCommand, SuiteWorker } from './worker-suites.js';

interface Session {
  transport: Transport;
  endpoint: Promise<Endpoint>;
  counter?: CountingChannel;
  /** timeCalls sessions: the driver calls and negotiation states, for first-send. */
  calls?: CallRecord[];
  states?: Array<{ state: string; at: number }>;
}

class BenchWorker {
  private readonly sessions = new Map<string, Session>();
  private readonly exported: bigint[] = [];
  private readonly echoServers: EchoServer[] = [];
  private nextSocket = 0;
  private exporter: KindExporter | undefined;
  private importer: KindImporter | undefined;
  private probe: { finish(abort: boolean): Promise<unknown> } | undefined;
  private floor: FloorSide | undefined;
  private a2a: AllToAll | undefined;
  private readonly suites: SuiteWorker;

  constructor(
    private readonly cfg: BenchWorkerConfig,
    private readonly driver: CudaDriver,
  ) {
    this.suites = new SuiteWorker(driver, cfg, (session) => this.endpoint(session));
  }

  private get initiator(): boolean {
    // in the pairs, rank 1 initiates (and times)
    return this.cfg.rank === 1;
  }

  async handle(c: BenchCommand): Promise<unknown> {
    const d = this.driver;
    if (isSuiteCommand(c)) return this.suites.handle(c);
    switch (c.op) {
      case 'open':
        return this.open(c.session, c.options);
      case 'close': {
        const s = this.sessions.get(c.session);
        this.sessions.delete(c.session);
        await s?.transport.close();
        return null;
      }
      case 'negotiate':
        return negotiate(d, await this.endpoint(c.session), this.initiator);
      case 'pingpong':
        return pingPong(d, await this.endpoint(c.session), this.initiator, c.size, c, c.ready === true);
      case 'oneway':
        // rank 0 sends: RGET is then rank 1 reading rank 0's memory, as the raw copy does
        return oneWay(d, await this.endpoint(c.session), !this.initiator, c.size, c.window, c, c.memory);
      case 'export':
        return this.export(c.size, c.count);
      case 'unexport':
        for (const p of this.exported.splice(0)) d.memFree(p);
        return null;
      case 'raw-copy':
        return rawCopy(d, c.buffer, c.size, c, c.slices);
      case 'ipc-open':
        return ipcOpen(d, c.buffers);
      case 'cache-hit':
        return cacheHit(d, c.buffer, c.batches, c.perBatch);
      case 'cache-hit-pattern':
        return cacheHitPattern(d, c.buffers, c.pattern, c.batches, c.perBatch);
      case 'copy-completion':
        return copyCompletion(d, c);
      case 'staging-baseline':
        return stagingBaseline(d, c.size, c);
      case 'socket-serve': {
        const server = await startEchoServer(join(this.cfg.dir, `raw-${this.nextSocket++}.sock`));
        this.echoServers.push(server);
        return { path: server.path };
      }
      case 'socket-ping':
        return { samples: await socketPingPong(c.path, c.frameBytes, c) };
      case 'fd-listen':
        this.exporter ??= new KindExporter(d, d.deviceInfo(this.cfg.device).uuid);
        return this.exporter.listen(this.cfg.dir);
      case 'fd-accept':
        await this.kindExporter().accept();
        return null;
      case 'fd-connect':
        this.importer ??= new KindImporter(d, this.cfg.device);
        await this.importer.connect(c.path, c.token);
        return null;
      case 'kind-export':
        return this.kindExporter().export(c.kind, c.size, c.count);
      case 'kind-unexport':
        this.kindExporter().unexport();
        return null;
      case 'kind-open':
        return this.kindImporter().open(c.exports, c.batches, c.perBatch);
      case 'kind-raw-copy':
        return this.kindImporter().rawCopy(c.export, c);
      case 'probe-recv':
        if (this.probe) throw new Error('a probe is pending already');
        this.probe = postProbe(d, await this.endpoint(c.session), c.size, c.memory);
        return null;
      case 'probe-send':
        return probeSend(d, await this.endpoint(c.session), c.size, c.memory);
      case 'probe-finish': {
        const probe = this.probe;
        this.probe = undefined;
        if (!probe) throw new Error('no probe is pending');
        return probe.finish(c.abort);
      }
      case 'floor-prepare':
        this.floor ??= new FloorSide(d, this.cfg.rank === 1 ? 1 : 0, this.cfg.device);
        return this.floor.prepare(c.segment, c.size);
      case 'floor-run':
        if (!this.floor) throw new Error('floor-prepare first');
        return { samples: await this.floor.run(c, c) };
      case 'floor-finish':
        this.floor?.finish();
        return null;
      case 'bidir':
        return bidirectional(d, await this.endpoint(c.session), c.size, c.window, c);
      case 'raw-copy-many':
        return rawCopyMany(d, c.buffers, c.size, c);
      case 'first-send': {
        const s = this.sessions.get(c.session);
        if (!s?.calls || !s.states) throw new Error(`session ${c.session} does not time its calls on rank ${this.cfg.rank}`);
        const ep = await s.endpoint;
        let negotiateMs: number | undefined;
        if (c.negotiateFirst && this.initiator) {
          const t0 = performance.now();
          await ep.negotiate();
          negotiateMs = performance.now() - t0;
        }
        const r = await firstSend(d, ep, this.initiator, c.size);
        return { ...r, states: s.states, calls: s.calls, ...(negotiateMs !== undefined ? { negotiateMs } : {}) };
      }
      case 'a2a-listen':
        this.a2a ??= new AllToAll(d, this.cfg);
        return this.a2a.listen();
      case 'a2a-connect':
        return this.a2aGroup().connect(c.ranks);
      case 'a2a-run':
        return this.a2aGroup().run(c.size, c);
      case 'a2a-close':
        await this.a2a?.close();
        this.a2a = undefined;
        return null;
      case 'frames': {
        const counter = this.sessions.get(c.session)?.counter;
        if (!counter) throw new Error(`session ${c.session} does not count frames on rank ${this.cfg.rank}`);
        return counter.snapshot();
      }
    }
  }

  private async open(name: string, o: { ipc: boolean; cache: boolean; countFrames?: boolean; timeCalls?: boolean }): Promise<null> {
    if (this.sessions.has(name)) throw new Error(`session ${name} is already open`);
    const calls: CallRecord[] | undefined = o.timeCalls ? [] : undefined;
    const transport = await Transport.create({
      driver: calls ? timedDriver(this.driver, calls) : this.driver,
      id: `bench-rank${this.cfg.rank}-${name}`,
      device: this.cfg.device,
      token: this.cfg.token,
      negotiation: { ipc: o.ipc },
      // The frame counter sees what crosses the channel it wraps; control rings would bypass it.
      ...(o.countFrames ? { controlRing: false } : {}),
      ...(o.cache ? {} : { cache: { maxEntries: 0 } }),
    });
    const path = join(this.cfg.dir, `${name}.sock`);
    if (calls) {
      // States are recorded from the endpoint's first moment: a negotiation may start before the first send.
      const session: Session = { transport, endpoint: Promise.resolve(null as unknown as Endpoint), calls, states: [] };
      const wrap = (ep: Endpoint) => {
        const states = recordStates(ep);
        session.states = states;
        return ep;
      };
      if (this.cfg.rank === 0) {
        session.endpoint = new Promise<Endpoint>((resolve) => transport.once('endpoint', (ep: Endpoint) => resolve(wrap(ep))));
        this.sessions.set(name, session);
        await transport.listen(path);
      } else {
        session.endpoint = transport.connect(path).then(wrap);
        this.sessions.set(name, session);
        await session.endpoint;
      }
      return null;
    }
    if (this.cfg.rank === 0) {
      const endpoint = new Promise<Endpoint>((resolve) => transport.once('endpoint', resolve));
      this.sessions.set(name, { transport, endpoint });
      await transport.listen(path);
    } else if (o.countFrames) {
      // Attached through the counter: such an endpoint has no descriptor channel (no VMM/pool memory by RGET).
      const counter = new CountingChannel(await connectUnix(path));
      const endpoint = transport.attach(counter);
      this.sessions.set(name, { transport, endpoint, counter });
      await endpoint;
    } else {
      // connect(), as a user would: the descriptor channel comes with it, so VMM and pool memory go by RGET (descriptor keys).
      const endpoint = transport.connect(path);
      this.sessions.set(name, { transport, endpoint });
      await endpoint;
    }
    return null;
  }

  private a2aGroup(): AllToAll {
    if (!this.a2a) throw new Error(`a2a-listen first on rank ${this.cfg.rank}`);
    return this.a2a;
  }

  private kindExporter(): KindExporter {
    if (!this.exporter) throw new Error(`no descriptor channel on rank ${this.cfg.rank}: fd-listen first`);
    return this.exporter;
  }

  private kindImporter(): KindImporter {
    if (!this.importer) throw new Error(`no descriptor channel on rank ${this.cfg.rank}: fd-connect first`);
    return this.importer;
  }

  private endpoint(name: string): Promise<Endpoint> {
    const s = this.sessions.get(name);
    if (!s) return Promise.reject(new Error(`no session ${name} on rank ${this.cfg.rank}`));
    return s.endpoint;
  }

  private export(size: number, count: number): ExportedBuffer[] {
    const d = this.driver;
    const out: ExportedBuffer[] = [];
    for (let i = 0; i < count; i++) {
      const base = d.memAlloc(size);
      this.exported.push(base);
      out.push({ handle: d.ipcGetMemHandle(base), base, size, bufferId: d.pointerAttributes(base).bufferId, deviceUuid: d.deviceInfo(this.cfg.device).uuid });
    }
    return out;
  }

  async shutdown(): Promise<void> {
    await this.suites.shutdown().catch(() => {});
    for (const s of this.sessions.values()) await s.transport.close().catch(() => {});
    this.sessions.clear();
    await Promise.all(this.echoServers.map((s) => s.close()));
    for (const p of this.exported.splice(0)) this.driver.memFree(p);
    this.importer?.close();
    this.exporter?.close();
    this.floor?.finish();
    await this.a2a?.close().catch(() => {});
    this.driver.close();
  }
}

async function start(cfg: BenchWorkerConfig) {
  const { driver, reason } = await openDriver({ driver: cfg.driver });
  const deviceCount = driver.deviceCount();
  // With fewer devices than asked for, fall back to the last one and say so in
  // `info`: the runner then skips the across-GPU figures instead of failing.
  const device = Math.min(cfg.device, deviceCount - 1);
  driver.setDevice(device);
  const dev = driver.deviceInfo(device);
  const info: BenchWorkerInfo = {
    rank: cfg.rank,
    pid: process.pid,
    driver: driver.kind,
    reason,
    deviceCount,
    device: { index: device, name: dev.name, uuid: dev.uuid, totalMemory: dev.totalMemory },
  };
  const w = new BenchWorker({ ...cfg, device }, driver);
  return { info, handle: (c: BenchCommand) => w.handle(c), shutdown: () => w.shutdown() };
}

serveWorker<BenchWorkerConfig, BenchCommand>(BENCH_WORKER_ENV, start);
