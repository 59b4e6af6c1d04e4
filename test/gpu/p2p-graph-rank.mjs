// One rank of the point-to-point graph test (p2p-graph.gpu.test.ts): two ranks join through the
// environment (RANK, WORLD_SIZE, SMCUDA_RENDEZVOUS) on the driver P2P_GRAPH_DRIVER names ('native',
// the default, or 'sim'). For each size of SIZES (bytes, a multiple of 4, comma-separated), it
// captures on its stream, in one CUDA graph, an exchange in both directions:
//   1. comm.batch: a send of A to the peer and a receive of the peer's A (rank 0 lists the send
//      first, rank 1 the receive: a pipeline stage's exchange);
//   2. then a plain send and receive of B in opposite orders (rank 0 sends then receives, rank 1
//      receives then sends): the other direction first, ordered on the stream after the batch;
// and replays the graph REPLAYS times (default 1000). Before each launch it writes fresh inputs into
// both send buffers on the stream (every byte differs from the previous replay's, and from the
// peer's and the other message's: a receive that did not happen, landed at the wrong offset or from
// the wrong buffer fails the check); after each replay it checks every byte of both receive buffers.
// Every EAGER_EVERY replays (default 250) the same exchange runs eagerly (not captured), checked too:
// the flags are at rest between replays. Prints one JSON line:
//   { rank, driver, steps, sizes: [{ bytes, paths, replays, eager, chunksPerMessage, replayMs }], p2p }
// A wrong byte throws: the process exits non-zero, saying which replay, message and offset.
import { Communicator } from 'smcuda';

const comm = await Communicator.fromEnv({ driver: process.env.P2P_GRAPH_DRIVER ?? 'native', timeoutMs: 60_000 });
const { rank, size, driver: d } = comm;
const sizes = (process.env.SIZES ?? '4096,4194316').split(',').map(Number);
const replays = Number(process.env.REPLAYS ?? 1000);
const eagerEvery = Number(process.env.EAGER_EVERY ?? 250);
if (size !== 2) throw new Error(`run two ranks (got ${size})`);
const peer = 1 - rank;

/** The words of message `m` (0: A, 1: B) rank `r` sends, before the replay's stamp: distinct per offset, rank and message. */
function base(r, m, words) {
  const w = new Uint32Array(words);
  const salt = Math.imul(2 * r + m + 1, 0x01000193);
  for (let i = 0; i < words; i++) w[i] = Math.imul(i + salt, 0x9e3779b1) ^ (i >>> 8);
  return w;
}
/** Replay k's stamp of message m from rank r: one byte, repeated; consecutive replays' differ in every byte. */
const stamp = (r, m, k) => Math.imul(((k * 7 + r * 97 + m * 31 + 1) & 0xff) >>> 0, 0x01010101) >>> 0;

// A p2p slot (src/collectives/p2p-slots.ts p2pSlotBytes): a message of more bytes goes in several chunks, reusing the slots.
const slotBytes = Math.floor(comm.stats().scratchBytes / (2 * size) / 16) * 16;
const results = [];
const stream = d.streamCreate();
const done = d.eventCreate({ disableTiming: true });
try {
  for (const bytes of sizes) {
    if (bytes % 4 !== 0) throw new Error(`SIZES: ${bytes} is not a multiple of 4`);
    const words = bytes / 4;
    const count = words; // u32
    const send = [d.memAlloc(bytes), d.memAlloc(bytes)];
    const recv = [d.memAlloc(bytes), d.memAlloc(bytes)];
    const mine = [base(rank, 0, words), base(rank, 1, words)];
    const theirs = [base(peer, 0, words), base(peer, 1, words)];
    const host = [new Uint32Array(words), new Uint32Array(words)];
    const got = new Uint32Array(words);

    /** Writes replay k's inputs into both send buffers, on the stream (ordered before what follows on it). */
    const fill = (k) => {
      for (let m = 0; m < 2; m++) {
        const s = stamp(rank, m, k);
        const src = mine[m];
        const h = host[m];
        for (let i = 0; i < words; i++) h[i] = src[i] ^ s;
        d.memcpyHtoDAsync(send[m], new Uint8Array(h.buffer), stream);
      }
    };
    /** Checks every byte of both receive buffers against the peer's inputs of replay k. */
    const check = (k, what) => {
      for (let m = 0; m < 2; m++) {
        d.memcpyDtoH(new Uint8Array(got.buffer), recv[m]);
        const s = stamp(peer, m, k);
        const want = theirs[m];
        for (let i = 0; i < words; i++) {
          if (got[i] !== (want[i] ^ s) >>> 0) {
            const hex = (x) => (x >>> 0).toString(16).padStart(8, '0');
            throw new Error(
              `rank ${rank}, ${bytes} B: ${what} ${k}: message ${'AB'[m]} from rank ${peer}, bytes ${4 * i}..${4 * i + 3} are ${hex(got[i])}, expected ${hex(want[i] ^ s)}`,
            );
          }
        }
      }
    };
    /** The exchange: the batch (A both ways), then B both ways as plain calls in opposite orders. */
    const exchange = () => {
      const a = comm.batch(() => {
        if (rank === 0) {
          comm.send({ buf: send[0], count, dtype: 'u32', peer, stream });
          comm.recv({ buf: recv[0], count, dtype: 'u32', peer, stream });
        } else {
          comm.recv({ buf: recv[0], count, dtype: 'u32', peer, stream });
          comm.send({ buf: send[0], count, dtype: 'u32', peer, stream });
        }
      });
      const b =
        rank === 0
          ? [comm.send({ buf: send[1], count, dtype: 'u32', peer, stream }), comm.recv({ buf: recv[1], count, dtype: 'u32', peer, stream })]
          : [comm.recv({ buf: recv[1], count, dtype: 'u32', peer, stream }), comm.send({ buf: send[1], count, dtype: 'u32', peer, stream })];
      return Promise.all([a, ...b]).then(([batch, ...plain]) => [...batch, ...plain]);
    };
    const finish = async () => {
      d.eventRecord(done, stream);
      await d.whenComplete(done);
    };

    d.streamBeginCapture(stream, 'thread-local');
    const captured = exchange();
    const graph = d.streamEndCapture(stream);
    const paths = (await captured).map((r) => r.path);
    if (paths.some((p) => p !== 'device')) throw new Error(`rank ${rank}, ${bytes} B: the captured calls took the paths ${paths}, not all 'device'`);
    const exec = d.graphInstantiate(graph);
    let eager = 0;
    const t0 = performance.now();
    for (let k = 0; k < replays; k++) {
      fill(k);
      d.graphLaunch(exec, stream);
      await finish();
      check(k, 'replay');
      if (eagerEvery > 0 && k % eagerEvery === eagerEvery - 1) {
        // New inputs (the stamp of replay k + replays: not any replay's), eagerly, then back to replays.
        fill(k + replays);
        const r = await exchange();
        await finish();
        check(k + replays, `eager exchange after replay`);
        if (r.some((x) => x.path !== 'device')) throw new Error(`rank ${rank}: an eager exchange took the paths ${r.map((x) => x.path)}`);
        eager++;
      }
    }
    const replayMs = (performance.now() - t0) / replays;
    d.graphExecDestroy(exec);
    d.graphDestroy(graph);
    for (const p of [...send, ...recv]) d.memFree(p);
    results.push({ bytes, paths, replays, eager, chunksPerMessage: Math.ceil(bytes / slotBytes), replayMs: Math.round(replayMs * 1000) / 1000 });
  }
  console.log(JSON.stringify({ rank, driver: d.kind, steps: comm.stats().steps, sizes: results, p2p: comm.stats().p2p }));
} finally {
  d.eventDestroy(done);
  d.streamDestroy(stream);
  await comm.close();
}
