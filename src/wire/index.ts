/** The wire format: frame types (frames.ts), their schema (schema.ts), the codec compiled from it (codec.ts), device UUIDs (uuid.ts). */
export * from './frames.js';
export * from './codec.js';
export * from './uuid.js';
export { FRAME_SCHEMAS, fieldOffset, minFrameBytes, schemaOf, type Field, type FrameSchema, type Relation } from './schema.js';
