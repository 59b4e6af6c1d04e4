// dev: what one cuEventQuery costs, by where the event was recorded, with and without a Transport around
import { openDriver } from '../dist/src/cuda/open-driver.js';
import { Transport } from '../dist/src/index.js';
const M = 100000;
function bench(d, label) {
  const s = d.streamCreate();
  const out = {};
  for (const [name, stream] of [['legacy', 0n], ['own', s]]) {
    const ev = d.eventCreate({ disableTiming: true });
    d.eventRecord(ev, stream); d.eventSynchronize(ev);
    let t0 = performance.now(); for (let i = 0; i < M; i++) d.eventQuery(ev); out[name + 'QueryUs'] = +((performance.now() - t0) * 1e3 / M).toFixed(3);
    t0 = performance.now(); for (let i = 0; i < M; i++) d.eventRecord(ev, stream); out[name + 'RecordUs'] = +((performance.now() - t0) * 1e3 / M).toFixed(3);
    d.eventSynchronize(ev);
    t0 = performance.now(); let ok = 0; for (let i = 0; i < M; i++) { d.eventRecord(ev, stream); if (d.eventQuery(ev)) ok++; } out[name + 'RecQueryUs'] = +((performance.now() - t0) * 1e3 / M).toFixed(3); out[name + 'Idle'] = ok / M;
    d.eventDestroy(ev);
  }
  let t0 = performance.now(); for (let i = 0; i < M; i++) d.currentDevice(); out.napiCallUs = +((performance.now() - t0) * 1e3 / M).toFixed(3);
  d.streamDestroy(s);
  console.log(label, JSON.stringify(out));
}
const { driver } = await openDriver({ driver: 'native' });
driver.init(); driver.setDevice(0);
bench(driver, 'bare');
bench(driver, 'bare2');
const t = await Transport.create({ driver, device: 0, id: 'x', token: 'x', warmUp: false });
bench(driver, 'transport');
await t.close();
driver.close();
