/**
 * Control channels: the contract (channel.ts), an in-memory pair for tests
 * (memory-channel.ts), the Unix domain socket channel (unix-channel.ts) and
 * its length-prefix framing (framing.ts).
 */
export type * from './channel.js';
export * from './memory-channel.js';
export * from './unix-channel.js';
export * from './framing.js';
export * from './bytes.js';
