/**
 * Child process of `smcuda probe`: opens the IPC handle given on the command
 * line, reads the allocation and checks the 0xa5 pattern. Prints 'ok' or why not.
 */
import { openDriver } from '../cuda/open-driver.js';

const [kind, hex, sizeText] = process.argv.slice(2);
const { driver } = await openDriver({ driver: kind === 'sim' ? 'sim' : 'native' });
try {
  driver.init();
  driver.setDevice(0);
  const ptr = driver.ipcOpenMemHandle(new Uint8Array(Buffer.from(hex!, 'hex')));
  const out = new Uint8Array(Number(sizeText));
  driver.memcpyDtoH(out, ptr);
  driver.ipcCloseMemHandle(ptr);
  const bad = out.findIndex((b) => b !== 0xa5);
  console.log(bad < 0 ? 'ok' : `data mismatch at byte ${bad}`);
} catch (err) {
  console.log(`open failed: ${(err as Error).message}`);
} finally {
  driver.close();
}
