/**
 * XState machines of smcuda (see negotiation.ts for the protocol, negotiator.ts for the wrapper endpoints use).
 *
 * @module smcuda/machines
 */
export {
  DEFAULT_NEGOTIATION_CONFIG,
  NEGOTIATION_STATES,
  frameEvent,
  fromHex,
  toHex,
  isNegotiationFrame,
  negotiationMachine,
  resolveNegotiationConfig,
  statePath,
  topState,
  type BadReasonCode,
  type CheckPeerAccessInput,
  type CheckReadyInput,
  type OpenProbeInput,
  type FrameEvent,
  type NegotiationConfig,
  type NegotiationContext,
  type NegotiationEvent,
  type NegotiationIO,
  type NegotiationInput,
  type NegotiationMachine,
  type NegotiationSnapshot,
  type NegotiationState,
  type ReadyCheck,
} from './negotiation.js';
export {
  Negotiator,
  createNegotiator,
  type NegotiatorParams,
  type StateChangeInfo,
  type StateChangeListener,
} from './negotiator.js';
export {
  PERSISTENT_STATES,
  persistentMachine,
  type PersistentMachine,
  type PersistentMachineContext,
  type PersistentMachineEvent,
  type PersistentMachineInput,
  type PersistentMachineState,
  type PersistentSnapshot,
} from './persistent.js';
