/** The machines `smcuda diagram` draws, by name, each with the words for its internal names. */
import type { AnyStateMachine } from 'xstate';
import { negotiationMachine } from '../../machines/negotiation.js';
import { persistentMachine } from '../../machines/persistent.js';
import { EMPTY_VOCABULARY, NEGOTIATION_VOCABULARY, type Vocabulary } from './vocabulary.js';

export interface DrawableMachine {
  name: string;
  /** One line: what the machine is. */
  summary: string;
  /** Where it is defined, for the generated files' header. */
  source: string;
  machine: AnyStateMachine;
  vocabulary: Vocabulary;
}

export const MACHINES: readonly DrawableMachine[] = [
  {
    name: 'negotiation',
    source: 'machines/negotiation.ts',
    summary: 'per-endpoint CUDA IPC negotiation (INIT, SENT, ACKING, ACKED, OK, BAD)',
    machine: negotiationMachine as unknown as AnyStateMachine,
    vocabulary: NEGOTIATION_VOCABULARY,
  },
  {
    name: 'persistent',
    source: 'machines/persistent.ts',
    summary: 'per persistent transfer and side: its life (registered, armed, replaying, stuck, closed)',
    machine: persistentMachine as unknown as AnyStateMachine,
    // Its actions only count and record (context): nothing a reader must see on an edge.
    vocabulary: EMPTY_VOCABULARY,
  },
];

export function findMachine(name: string): DrawableMachine | undefined {
  return MACHINES.find((m) => m.name === name);
}
