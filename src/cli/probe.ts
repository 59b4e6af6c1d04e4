/**
 * `smcuda probe`: what the CUDA driver sees here. Always exits 0 when it
 * could look (an unavailable driver is an answer, not a failure).
 *
 * Legacy IPC is checked for real: a handle of a fresh allocation is opened by
 * a child process, which reads a known pattern through it.
 */
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { CudaDriver, DeviceInfo } from '../cuda/driver.js';
import { openDriver, withoutSimHint } from '../cuda/open-driver.js';
import { mpsStatus, MPS_START_COMMAND, type MpsStatus } from './mps.js';
import { parse } from './usage.js';

const HELP = `usage: smcuda probe [--json] [--driver native|sim]

Reports whether the CUDA driver is available (and why not), its version, the
devices (index, name, UUID, PCI bus id, compute capability, memory), the
peer-access matrix, whether legacy CUDA IPC works between two processes, and
whether the CUDA Multi-Process Service (MPS) is running (processes sharing a
GPU need it for low latency; start it with nvidia-cuda-mps-control -d).

  --driver native|sim  which driver to probe (default: native)
  --json               print one JSON object
  -h, --help           this help`;

export interface ProbeReport {
  driver: 'native' | 'sim';
  available: boolean;
  reason?: string;
  driverVersion: number;
  devices: DeviceInfo[];
  /** peerAccess[i][j]: cuDeviceCanAccessPeer(i, j) */
  peerAccess: boolean[][];
  ipc: { supported: boolean; detail: string };
  /** The CUDA Multi-Process Service: whether its control socket is in its pipe directory. */
  mps: MpsStatus;
}

export async function runProbe(argv: string[]): Promise<number> {
  const args = parse(argv, {
    json: { type: 'boolean', default: false },
    driver: { type: 'string', default: 'native' },
    help: { type: 'boolean', short: 'h', default: false },
  });
  if (args.help) {
    console.log(HELP);
    return 0;
  }
  const kind = args.driver === 'sim' ? 'sim' : 'native';
  const report = await probe(kind);
  if (args.json) console.log(JSON.stringify(report, null, 2));
  else console.log(render(report));
  return 0;
}

export async function probe(kind: 'native' | 'sim'): Promise<ProbeReport> {
  return { ...(await probeDriver(kind)), mps: mpsStatus() };
}

async function probeDriver(kind: 'native' | 'sim'): Promise<Omit<ProbeReport, 'mps'>> {
  let driver: CudaDriver;
  try {
    driver = (await openDriver({ driver: kind })).driver;
  } catch (err) {
    return {
      driver: kind,
      available: false,
      reason: (err as Error).message,
      driverVersion: 0,
      devices: [],
      peerAccess: [],
      ipc: { supported: false, detail: 'no driver' },
    };
  }
  try {
    const status = driver.status();
    if (!status.available) {
      return {
        driver: kind,
        available: false,
        reason: status.reason,
        driverVersion: status.driverVersion,
        devices: [],
        peerAccess: [],
        ipc: { supported: false, detail: 'no driver' },
      };
    }
    driver.init();
    const n = driver.deviceCount();
    const devices = Array.from({ length: n }, (_, i) => driver.deviceInfo(i));
    const peerAccess = devices.map((_, i) => devices.map((_, j) => driver.canAccessPeer(i, j)));
    const ipc = n > 0 ? checkIpc(driver, kind) : { supported: false, detail: 'no device' };
    return { driver: kind, available: true, driverVersion: status.driverVersion, devices, peerAccess, ipc };
  } finally {
    driver.close();
  }
}

/** Allocates on device 0, exports a handle, and has a child process open it and read the pattern. */
function checkIpc(driver: CudaDriver, kind: string): { supported: boolean; detail: string } {
  driver.setDevice(0);
  const bytes = 4096;
  const ptr = driver.memAlloc(bytes);
  try {
    driver.memsetD8(ptr, 0xa5, bytes);
    const handle = Buffer.from(driver.ipcGetMemHandle(ptr)).toString('hex');
    const child = fileURLToPath(new URL('./probe-ipc-child.js', import.meta.url));
    try {
      const out = execFileSync(process.execPath, [child, kind, handle, String(bytes)], {
        encoding: 'utf8',
        timeout: 30_000,
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      return { supported: out.trim() === 'ok', detail: out.trim() === 'ok' ? 'a second process opened a handle and read the data' : out.trim() };
    } catch (err) {
      const e = err as { stderr?: string; message: string };
      return { supported: false, detail: (e.stderr || e.message).trim().split('\n').slice(-1)[0] ?? 'child failed' };
    }
  } catch (err) {
    return { supported: false, detail: (err as Error).message };
  } finally {
    driver.memFree(ptr);
  }
}

function render(r: ProbeReport): string {
  const lines: string[] = [];
  if (!r.available) {
    // No GPU: say so plainly, and how to try smcuda anyway; MPS is beside the point.
    const why = withoutSimHint((r.reason ?? 'unknown').replace(/^the native CUDA driver cannot be used: /, '').replace(/; or pass driver: .*$/, ''));
    if (r.driver === 'sim') {
      lines.push(`The simulated driver cannot be used here.`);
      lines.push(`  why: ${why}`);
      return lines.join('\n');
    }
    lines.push(`No GPU: the CUDA driver cannot be used on this machine.`);
    lines.push(`  why: ${why}`);
    lines.push(`  to try smcuda without a GPU, on its simulated driver (two simulated GPUs in shared memory):`);
    lines.push(`    smcuda probe --driver sim`);
    lines.push(`    smcuda demo              (picks the simulated driver by itself where there is no GPU)`);
    return lines.join('\n');
  }
  const v = r.driverVersion;
  lines.push(`CUDA driver (${r.driver}): available, version ${Math.floor(v / 1000)}.${(v % 1000) / 10}`);
  lines.push(`devices: ${r.devices.length}`);
  for (const d of r.devices) {
    lines.push(`  [${d.index}] ${d.name}  ${d.uuid}  pci ${d.pciBusId}  sm_${d.computeCapability.join('')}  ${(d.totalMemory / 2 ** 30).toFixed(1)} GiB`);
  }
  if (r.devices.length > 1) {
    lines.push('peer access (row → column):');
    lines.push(`       ${r.devices.map((d) => `[${d.index}]`.padEnd(5)).join('')}`);
    r.peerAccess.forEach((row, i) => lines.push(`  [${i}]  ${row.map((ok, j) => (i === j ? '-' : ok ? 'yes' : 'no').padEnd(5)).join('')}`));
  }
  lines.push(`legacy IPC: ${r.ipc.supported ? 'works' : 'does not work'} (${r.ipc.detail})`);
  if (r.driver !== 'sim') lines.push(mpsLine(r.mps)); // MPS concerns real GPUs only
  return lines.join('\n');
}

function mpsLine(m: MpsStatus): string {
  if (m.active) return `MPS: running (control socket in ${m.pipeDirectory}${m.controlPid ? `, nvidia-cuda-mps-control pid ${m.controlPid}` : ''})`;
  return `MPS: not running (no control socket in ${m.pipeDirectory}); ranks sharing a GPU want it: ${MPS_START_COMMAND}`;
}
