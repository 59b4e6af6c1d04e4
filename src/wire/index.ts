/** The wire format: frame types (frames.ts), their binary codec (codec.ts), device UUIDs (uuid.ts). */
export * from './frames.js';
export * from './codec.js';
export * from './uuid.js';
