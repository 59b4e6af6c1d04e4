/**
 * smcuda's public API. See README.md for a tour and docs/architecture.md for
 * how the pieces fit.
 *
 * @module smcuda
 */
export * from './errors.js';
export { Transport, type TransportCreateOptions, type TransportEvents } from './transport.js';
export { Endpoint, type SendOptions, type RecvOptions, type Received, type ReceivedData, type MessageInfo, type EndpointEvents } from './endpoint.js';
export type { ReceivedFrom } from './any-source.js';
export { ANY_TAG } from './matching.js';
export { isDeviceBuffer, offsetDevice, type DeviceBuffer, type HostBuffer, type MessageBuffer } from './buffers.js';
export type { TransportOptions, NegotiationOptions, StagingOptions, CacheOptions } from './options.js';
export type { EndpointStats, DataPath } from './endpoint-stats.js';
export type { ControlChannel, ControlChannelEvents } from './channel/channel.js';
export type * from './cuda/driver.js';
export { openDriver } from './cuda/open-driver.js';
export { FileTracer, type Tracer, type TraceRecord } from './trace.js';
