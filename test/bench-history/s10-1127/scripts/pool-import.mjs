// Dev: what importing and releasing a pool allocation costs by size, across GPUs: rank 0 (device 0) exports
// COUNT allocations of each size from a fresh pool; rank 1 (device DEV1) imports each pointer and releases it
// (KindImporter.open: openUs / closeUs per allocation after the first).
import { fork } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openDriver } from '../dist/src/cuda/open-driver.js';
import { KindExporter, KindImporter } from '../dist/src/bench/memory-kinds.js';

const MiB = 2 ** 20;
const sizes = (process.env.SIZES ?? `${2 * MiB},${256 * MiB},${1024 * MiB}`).split(',').map(Number);
const { driver } = await openDriver({ driver: 'native' });
driver.init();
if (process.env.CHILD) {
  const dev = Number(process.env.DEV1);
  driver.setDevice(dev);
  const imp = new KindImporter(driver, dev);
  process.on('message', async (m) => {
    if (m.connect) { await imp.connect(m.connect.path, m.connect.token); process.send({ ok: 'connected' }); return; }
    try {
      const r = await imp.open(m.es, 1, 10);
      process.send({ openUs: r.openUs.map((x) => +x.toFixed(1)), closeUs: r.closeUs.map((x) => +x.toFixed(1)), poolImportUs: r.poolImportUs });
    } catch (err) { process.send({ err: String(err) }); }
  });
} else {
  driver.setDevice(0);
  const uuid = driver.deviceInfo(0).uuid;
  const ex = new KindExporter(driver, uuid);
  const where = ex.listen(mkdtempSync(join(tmpdir(), 'pi-')));
  const child = fork(new URL(import.meta.url).pathname, [], { env: { ...process.env, CHILD: '1', DEV1: process.env.DEV1 ?? '1' }, serialization: 'advanced' });
  const next = () => new Promise((res) => { child.once('message', res); child.once('exit', (code, sig) => res({ exit: code, sig })); });
  child.send({ connect: where });
  await ex.accept();
  await next();
  for (const size of sizes) {
    for (const kind of ['pool', 'legacy']) {
      const es = await ex.export(kind, size, Number(process.env.COUNT ?? 5));
      child.send({ es });
      console.log(JSON.stringify({ kind, MiB: size / MiB, ...(await next()) }));
      ex.unexport();
    }
  }
  child.kill();
  ex.close();
  process.exit(0);
}
