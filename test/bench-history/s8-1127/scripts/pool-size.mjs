// Dev only: does cuMemPoolImportPointer survive a pool allocation of each size? Rank 0 (device 0) allocates
// from a fresh pool and exports; rank 1 (device DEV1) imports the pool and the pointer (KindImporter.open).
import { fork } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openDriver } from '../../../../dist/src/cuda/open-driver.js';
import { KindExporter, KindImporter } from '../../../../dist/src/bench/memory-kinds.js';

const GiB = 2 ** 30, MiB = 2 ** 20;
const sizes = (process.env.SIZES ?? `${2 * GiB},${4 * GiB - 2 * MiB},${4 * GiB},${4 * GiB + 2 * MiB},${6 * GiB},${8 * GiB}`).split(',').map(Number);
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
      process.send({ ok: `imported ${m.es.length} × ${m.es[0].size}`, hitNs: r.hitNs });
    } catch (err) { process.send({ err: String(err) }); }
  });
} else {
  driver.setDevice(0);
  const uuid = driver.deviceInfo(0).uuid;
  for (const [dev1, only] of (process.env.DEVS ?? '1,0').split(',').map(Number).flatMap((d) => (process.env.EACH ? sizes.map((s) => [d, s]) : [[d, undefined]]))) {
    const ex = new KindExporter(driver, uuid);
    const where = ex.listen(mkdtempSync(join(tmpdir(), 'ps-')));
    const child = fork(new URL(import.meta.url).pathname, [], { env: { ...process.env, CHILD: '1', DEV1: String(dev1) }, serialization: 'advanced' });
    const next = () => new Promise((res) => { child.once('message', res); child.once('exit', (code, sig) => res({ exit: code, sig })); });
    child.send({ connect: where });
    await ex.accept();
    console.log(`importer on device ${dev1}:`, JSON.stringify(await next()));
    for (const size of only !== undefined ? [only] : sizes) {
      const es = await ex.export('pool', size, Number(process.env.COUNT ?? 1));
      child.send({ es });
      const r = await next();
      console.log(`  pool allocation of ${size / MiB} MiB:`, JSON.stringify(r));
      ex.unexport();
      if (r.exit !== undefined || r.sig) break;
    }
    child.kill();
    ex.close();
  }
}
