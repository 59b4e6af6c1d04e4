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
export type { TransportOptions, NegotiationOptions, StagingOptions, CacheOptions, PersistentOptions as PersistentTransportOptions } from './options.js';
export { startGroup, startSequence, PersistentTransfer, type PersistentOptions, type PersistentRole, type PersistentState } from './persistent/transfers.js';
export type { Registration, RegistrationState, RegisterOptions } from './persistent/registrations.js';
export type { CopyKernelStats, EndpointStats, DataPath } from './endpoint-stats.js';
export type { ControlChannel, ControlChannelEvents } from './channel/channel.js';
export type * from './cuda/driver.js';
export { openDriver } from './cuda/open-driver.js';
export { DeviceAllocation } from './cuda/device-allocation.js';
export { FileTracer, type Tracer, type TraceRecord } from './trace.js';
export { FdChannel } from './channel/fd-channel.js';
export {
  Communicator,
  type Algorithm,
  type AllgatherArgs,
  type AllgathervArgs,
  type AllreduceArgs,
  type AlltoallArgs,
  type AlltoallvArgs,
  type BroadcastArgs,
  type BufferArg,
  type CallOptions,
  type ReduceArgs,
  type ReduceScatterArgs,
  type CollectiveOp,
  type CollectiveResult,
  type CommunicatorEvents,
  type CommunicatorOptions,
  type CommunicatorStats,
  type FromEndpointsOptions,
  type GatherArgs,
  type PerRank,
  type ReduceScattervArgs,
  type ScatterArgs,
  type SplitArgs,
} from './collectives/communicator.js';
export type { RendezvousOptions } from './collectives/rendezvous.js';
// Types only: the communicator across nodes is loaded by Communicator.fromEnv where SMCUDA_NODE is set (not by this import).
export type { MultiNodeCommunicator, MultiNodeOp, MultiNodeOptions, MultiNodeResult } from './collectives/multinode-communicator.js';
export type { EngineKind, EngineOp, InterNodeEngine } from './collectives/internode-engine.js';
export type { P2PArgs, P2PResult, P2PStats } from './collectives/p2p.js';
export { DTYPES, REDUCE_OPS, DTYPE_BYTES, type DType, type ReduceOp } from './kernels/dtypes.js';
