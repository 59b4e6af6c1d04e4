// dev: time the first few messages of a fresh, negotiated pair (fresh buffer each)
import { fork } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
const __M=[]; let __on=false; globalThis.__mark=(l)=>{ if(__on && __M.length<400) __M.push([l, performance.timeOrigin+performance.now()]); };
import { Transport } from '../dist/src/index.js';
import { warmSim } from './warm-sim.mjs';
const V=Number(process.env.V??0); let warmMs=0; if(V>=1) warmMs=await warmSim();
const now = () => performance.timeOrigin + performance.now();
const SIZE = Number(process.env.SIZE ?? 65536), N = Number(process.env.N ?? 6), driver = process.env.DRV ?? 'auto';
const dev = Number(process.env.DEV1 ?? 0);
if (process.argv[2] !== 'rank1') {
  const dir = mkdtempSync(join(tmpdir(), 'fm-')); const socket = join(dir, 's'); const token = randomBytes(8).toString('hex');
  const t = await Transport.create({ driver, device: 0, id: 'r0', token, warmUp: process.env.WARM !== '0' });
  await t.listen(socket);
  const epP = new Promise((r) => t.once('endpoint', r));
  const child = fork(fileURLToPath(import.meta.url), ['rank1'], { env: { ...process.env, S: socket, T: token } });
  const ep = await epP;
  if(V>=2 && !process.env.LAZY){ await new Promise(r=>ep.on('state',(s)=>s==='OK'&&r())); ep.link.gpu().legacyStreamIdle(); void ep.link.gpu().stream; }
  const times = [];
  let m1=[]; __on=true; child.on('message', (m) => typeof m==='number'? times.push(m) : (m1=m.marks));
  const res = [];
  for (let i = 0; i < N; i++) {
    const into = { ptr: t.driver.memAlloc(SIZE), length: SIZE };
    await ep.recv({ tag: i, into });
    res.push(now());
  }
  await new Promise((r) => child.once('exit', r));
  if(process.env.MARKS){const all=[...__M.map(([l,t])=>['r0',l,t]),...m1.map(([l,t])=>['r1',l,t])].sort((a,b)=>a[2]-b[2]); const t0=times[0]; for(const [w,l,t] of all) if(t>=t0-1 && t<=t0+12) console.log(((t-t0)).toFixed(3), w, l);}
  console.log(JSON.stringify({ warm: process.env.WARM !== '0', V, lazy: !!process.env.LAZY, warmMs: +warmMs.toFixed(1), driver: t.driverReason.slice(0, 12), ms: res.map((x, i) => +(x - times[i]).toFixed(3)) }));
  await t.close();
} else {
  const t = await Transport.create({ driver, device: dev, id: 'r1', token: process.env.T, warmUp: process.env.WARM !== '0' });
  const ep = await t.connect(process.env.S);
  if(!process.env.LAZY) await ep.negotiate();
  if(V>=2){ ep.link.gpu().legacyStreamIdle(); void ep.link.gpu().stream; }
  await new Promise((r) => setTimeout(r, 50));
  for (let i = 0; i < N; i++) {
    const ptr = t.driver.memAlloc(SIZE);
    if(i===0) __on=true; if(i===2) __on=false;
    const at = now();
    await ep.send({ ptr, length: SIZE }, { tag: i }); process.send(at);
    await new Promise((r) => setTimeout(r, Number(process.env.GAP ?? 20)));
  }
  process.send({marks:__M}); await t.close(); process.exit(0);
}
