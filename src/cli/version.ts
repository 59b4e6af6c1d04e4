/** The installed package's version (src/version.ts). */
export { packageVersion } from '../version.js';
