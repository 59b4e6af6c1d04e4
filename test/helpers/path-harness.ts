/**
 * One side of a connection for driving a data path (src/paths/) on its own:
 * a real EndpointLink — the PathContext the endpoint hands its paths, and
 * in `link.parts` what each path alone gets in its constructor — over
 * a fake control channel that records every frame sent, decoded, on a
 * simulated driver. No endpoint and no matching: a test hands a path its
 * arrivals and frames itself, and reads what it answered.
 */
import { EventEmitter } from 'node:events';
import type { ControlChannel } from '../../src/channel/channel.js';
import { SimulatedCudaDriver } from '../../src/cuda/sim-driver.js';
import { EndpointLink } from '../../src/endpoint-link.js';
import { ExportTable } from '../../src/exports.js';
import { resolveOptions, type TransportOptions } from '../../src/options.js';
import type { PendingRecv, Received } from '../../src/paths/data-path.js';
import type { Tracer } from '../../src/trace.js';
import { decodeFrame } from '../../src/wire/codec.js';
import { FdChannel, type FdChannelHandlers } from '../../src/channel/fd-channel.js';
import { Feature, type Frame, FrameType, type HelloFrame, WIRE_VERSION } from '../../src/wire/frames.js';

export interface PathSide {
  driver: SimulatedCudaDriver;
  link: EndpointLink;
  /** Every frame the side sent, decoded, in order. */
  frames: Frame[];
  /** The raw bytes of each frame sent (same order). */
  bytes: Uint8Array[];
  /** Takes the frames sent so far (and forgets them). */
  take(): Frame[];
  close(): void;
}

class RecordingChannel extends EventEmitter implements Pick<ControlChannel, 'label' | 'closed' | 'send' | 'close'> {
  readonly label = 'recording';
  closed = false;
  constructor(private readonly side: { frames: Frame[]; bytes: Uint8Array[] }) {
    super();
  }
  send(frame: Uint8Array): boolean {
    this.side.bytes.push(frame.slice());
    this.side.frames.push(decodeFrame(frame.slice()));
    return true;
  }
  close(): void {
    this.closed = true;
  }
}

/**
 * `descriptors` (default true): both sides announced Feature.DESCRIPTORS, so
 * the link waits for a descriptor channel (connectDescriptors) for its rings;
 * false: it has none (staged messages go inline).
 */
export function pathSide(
  device: number,
  o: { options?: TransportOptions; tracer?: Tracer; fins?: boolean; ipcOk?: boolean; fdMemory?: boolean; descriptors?: boolean } = {},
): PathSide {
  const driver = new SimulatedCudaDriver({ env: {} });
  driver.init();
  driver.setDevice(device);
  const rec = { frames: [] as Frame[], bytes: [] as Uint8Array[] };
  const channel = new RecordingChannel(rec);
  const features = (o.fins === false ? 0 : Feature.FINS) | (o.fdMemory === true ? Feature.FD_MEMORY : 0) | (o.descriptors === false ? 0 : Feature.DESCRIPTORS);
  const local = {
    type: FrameType.HELLO,
    version: WIRE_VERSION,
    pid: process.pid,
    peerId: `side${device}`,
    deviceUuid: '',
    nonce: new Uint8Array(32),
    features,
  } as HelloFrame;
  const link = new EndpointLink(
    channel as unknown as ControlChannel,
    { driver, options: resolveOptions(o.options ?? {}), local, exports: new ExportTable(driver), tracer: o.tracer },
    `peer-of-${device}`,
    features,
  );
  link.ipcOk = o.ipcOk ?? false;
  return {
    driver,
    link,
    frames: rec.frames,
    bytes: rec.bytes,
    take: () => rec.frames.splice(0),
    close: () => {
      link.closedWith = null;
      link.close();
      driver.close();
    },
  };
}

/**
 * Joins two sides' links by a real descriptor channel (a socketpair): their
 * ring segments travel on it, and FD_DESCRIPTOR messages go to whom `takeA` /
 * `takeB` name (a path's attachFd; none: dropped).
 */
export function connectDescriptors(a: PathSide, b: PathSide, takeA?: DescriptorTaker, takeB?: DescriptorTaker): void {
  const [x, y] = FdChannel.pair();
  attachDescriptors(a, x, takeA);
  attachDescriptors(b, y, takeB);
}

/** Who takes a descriptor channel's FD_DESCRIPTOR messages (RgetPath, FdSide). */
export interface DescriptorTaker {
  attachFd?(channel: FdChannel): FdChannelHandlers | undefined;
  attach?(channel: FdChannel): FdChannelHandlers | undefined;
}

/** Attaches `channel` to the side's link as the transport does: the link starts it, `taker` gets FD_DESCRIPTOR. */
export function attachDescriptors(side: PathSide, channel: FdChannel, taker?: DescriptorTaker): void {
  side.link.attachFd(channel, (ch) => (taker?.attachFd !== undefined ? taker.attachFd(ch) : taker?.attach?.(ch)));
}

/** A posted receive and the promise it settles. */
export function pendingRecv(tag: number, into?: PendingRecv['into'], stream?: PendingRecv['stream']): { recv: PendingRecv; result: Promise<Received> } {
  let recv!: PendingRecv;
  const result = new Promise<Received>((resolve, reject) => {
    recv = { tag, into, stream, resolve, reject, cleanup: () => {} };
  });
  result.catch(() => {}); // a test that expects a rejection awaits it itself
  return { recv, result };
}

/** Resolves once `cond()` holds (polls the event loop: simulated copies complete there). */
export async function until(cond: () => boolean, what: string, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setImmediate(r));
  }
}
