/** A traced frame in a few words for an arrow: its type and the fields that tell one from the next. */
import { formatBytes } from '../cli/format.js';
import { FinStatus } from '../wire/frames.js';

export function frameLabel(rec: Record<string, unknown>): string {
  const type = String(rec.frame ?? '?');
  const n = (k: string) => (typeof rec[k] === 'number' ? (rec[k] as number) : undefined);
  const parts: string[] = [type];
  const field = (k: string) => {
    if (rec[k] !== undefined) parts.push(`${k}=${String(rec[k])}`);
  };
  switch (type) {
    case 'HELLO':
      field('pid');
      parts.push(`v${String(rec.version)}`);
      break;
    case 'IPC_REQ':
    case 'IPC_NOTREADY':
    case 'IPC_CONFIRM':
      field('attempt');
      break;
    case 'IPC_ACK':
      field('attempt');
      parts.push(rec.ok ? 'ok' : 'no');
      break;
    case 'IPC_ABORT':
    case 'CLOSE':
      if (typeof rec.reason === 'string' && rec.reason) parts.push(rec.reason.split(':')[0]!.slice(0, 40));
      break;
    case 'EAGER':
      field('tag');
      field('seq');
      if (n('data') !== undefined) parts.push(formatBytes(n('data')!));
      break;
    case 'RGET':
    case 'STAGE_BEGIN':
      field('tag');
      field('seq');
      if (n('length') !== undefined) parts.push(formatBytes(n('length')!));
      break;
    case 'FIN':
      field('seq');
      parts.push(n('status') !== undefined ? (FinStatus[n('status')!] ?? String(rec.status)) : '');
      break;
    case 'STAGE_CHUNK':
      field('seq');
      field('slot');
      if (n('length') !== undefined) parts.push(formatBytes(n('length')!));
      break;
    case 'STAGE_ACK':
      field('seq');
      field('slot');
      break;
    case 'CANCEL':
      field('seq');
      break;
    case 'INVALIDATE':
      field('base');
      break;
  }
  return parts.filter(Boolean).join(' ');
}
