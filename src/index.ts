export * from './errors.js';
export type * from './cuda/driver.js';
