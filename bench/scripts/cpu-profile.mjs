// V8 CPU profile of what `fn` does, through node:inspector, written to DIR/TAG.cpuprofile
// (summarise with profile-summary.mjs). Shared by stream.mjs and pingpong.mjs.
import { writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';

export async function profileTo(dir, tag, intervalUs, fn) {
  const s = new Session();
  s.connect();
  await s.post('Profiler.enable');
  await s.post('Profiler.setSamplingInterval', { interval: intervalUs });
  await s.post('Profiler.start');
  await fn();
  const { profile } = await s.post('Profiler.stop');
  writeFileSync(`${dir}/${tag}.cpuprofile`, JSON.stringify(profile));
}
