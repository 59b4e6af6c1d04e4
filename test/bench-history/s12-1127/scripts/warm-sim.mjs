// dev: an in-process data-path warm-up on two simulated drivers (JS compiled before the real first message)
import { SimulatedCudaDriver } from '../dist/src/cuda/sim-driver.js';
import { createMemoryChannelPair } from '../dist/src/channel/memory-channel.js';
import { FdChannel } from '../dist/src/channel/fd-channel.js';
import { Transport } from '../dist/src/index.js';
export async function warmSim() {
  const t0 = performance.now();
  const da = new SimulatedCudaDriver(), db = new SimulatedCudaDriver();
  const a = await Transport.create({ driver: da, id: 'wa', device: 0 });
  const b = await Transport.create({ driver: db, id: 'wb', device: 1 });
  const [ca, cb] = createMemoryChannelPair({ names: ['wa', 'wb'] });
  const [fa, fb] = FdChannel.pair();
  const [ea, eb] = await Promise.all([a.attach(ca, { descriptors: fa }), b.attach(cb, { descriptors: fb })]);
  const S = 65536;
  const src = da.memAlloc(S), dst = db.memAlloc(S);
  // eager first (before OK), then RGET after negotiate
  await Promise.all([ea.send({ ptr: src, length: S }, { tag: 1 }), eb.recv({ tag: 1, into: { ptr: dst, length: S } })]);
  await ea.negotiate();
  for (let i = 0; i < 2; i++) await Promise.all([ea.send({ ptr: src, length: S }, { tag: 2 }), eb.recv({ tag: 2, into: { ptr: dst, length: S } })]);
  await a.close(); await b.close(); da.close(); db.close();
  return performance.now() - t0;
}
