/**
 * The drawable graph of an XState v5 machine: states (nested) and every kind
 * of transition — events, eventless `always`, invoked actors' done and error,
 * `after` delays — each labelled in words (see vocabulary.ts).
 *
 * xstate/graph's toDirectedGraph leaves out `always` edges, so this walks the
 * state nodes itself: `node.transitions` (events, after, done/error) and
 * `node.always`.
 *
 * Transitions declared on the root apply in every state unless a state
 * overrides them; those with a target are drawn from one pseudo-state,
 * ANY_STATE ("any state"); those without (ignore and count) are listed as
 * `globalNotes`.
 */
import type { AnyStateMachine } from 'xstate';
import { camelToWords, EMPTY_VOCABULARY, type Vocabulary } from './vocabulary.js';

export const ANY_STATE = '*';

export type EdgeKind = 'event' | 'always' | 'done' | 'error' | 'after';

export interface GraphState {
  /** Path below the root joined by '.', e.g. 'INIT.idle'. */
  id: string;
  key: string;
  path: string[];
  description?: string;
  /** Child states, in definition order (empty for atomic states). */
  children: GraphState[];
  /** Id of the initial child (compound states). */
  initial?: string;
  tags: string[];
  final: boolean;
  /** Invoked actors: their id and their source's name. */
  invokes: { id: string; src: string }[];
}

export interface GraphEdge {
  /** Source state id, or ANY_STATE for a transition declared on the root. */
  source: string;
  /** Target state id; undefined for a transition that stays (actions only). */
  target?: string;
  kind: EdgeKind;
  /** What fires it, in words: 'IPC_REQ', 'always', 'checkReady done', 'after requestTimeoutMs'. */
  trigger: string;
  /** The guard in words ('my attempt and ok'), 'else' for the fallback of a guarded list, or undefined. */
  guard?: string;
  /** Actions a reader must see ('send IPC_ACK(yes)'). */
  actions: string[];
  description?: string;
  /** trigger [guard] / actions */
  label: string;
}

export interface MachineGraph {
  id: string;
  description?: string;
  /** The root's children: the top-level states. */
  states: GraphState[];
  initial?: string;
  edges: GraphEdge[];
  /** Root transitions without a target, e.g. 'IPC_REQ: ignore (unless the state handles it)'. */
  globalNotes: string[];
}

/** The parts of an XState v5 StateNode this reads (public, but loosely typed in xstate's own types). */
interface NodeLike {
  key: string;
  path: string[];
  type: string;
  description?: string;
  tags: string[];
  states: Record<string, NodeLike>;
  initial?: { target: NodeLike[] };
  transitions: Map<string, TransitionLike[]>;
  always?: TransitionLike[];
  after: { eventType: string; delay: string | number }[];
  invoke: { id: string; src: unknown }[];
}

interface TransitionLike {
  target?: NodeLike[];
  guard?: unknown;
  actions: unknown[];
  description?: string;
  eventType: string;
}

const DONE = 'xstate.done.actor.';
const ERROR = 'xstate.error.actor.';
const AFTER = 'xstate.after.';

export function machineGraph(machine: AnyStateMachine, vocabulary: Vocabulary = EMPTY_VOCABULARY): MachineGraph {
  const root = machine.root as unknown as NodeLike;
  const edges: GraphEdge[] = [];
  /** Root transitions that stay, grouped by what they do: 'ignore' → ['IPC_REQ', 'IPC_ACK', …]. */
  const rootStays = new Map<string, string[]>();
  const idOf = (n: NodeLike) => n.path.join('.');

  const walk = (node: NodeLike): GraphState => {
    const invokes = node.invoke.map((i) => ({ id: i.id, src: typeof i.src === 'string' ? i.src : i.id }));
    const srcOf = new Map(invokes.map((i) => [i.id, i.src]));
    const delayOf = new Map(node.after.map((a) => [a.eventType, a.delay]));
    const isRoot = node.path.length === 0;
    const source = isRoot ? ANY_STATE : idOf(node);

    const add = (list: TransitionLike[], kind: EdgeKind, trigger: string) => {
      list.forEach((t, i) => {
        const guard = branchGuardWords(list, i, vocabulary);
        const actions = t.actions.map((a) => actionWords(a, vocabulary)).filter((a): a is string => a !== undefined);
        const target = t.target?.[0];
        if (isRoot && !target) {
          if (actions.length) rootStays.set(actions.join(', '), [...(rootStays.get(actions.join(', ')) ?? []), trigger]);
          return;
        }
        // A transition that stays and does nothing visible is an override that ignores the event.
        if (!target && actions.length === 0) actions.push('ignore');
        const edge: GraphEdge = { source, kind, trigger, actions, label: label(trigger, guard, actions) };
        if (target) edge.target = idOf(target);
        if (guard !== undefined) edge.guard = guard;
        if (t.description) edge.description = t.description;
        edges.push(edge);
      });
    };

    for (const [eventType, list] of node.transitions) {
      if (eventType.startsWith(DONE)) add(list, 'done', `${srcOf.get(eventType.slice(DONE.length)) ?? eventType.slice(DONE.length)} done`);
      else if (eventType.startsWith(ERROR)) add(list, 'error', `${srcOf.get(eventType.slice(ERROR.length)) ?? eventType.slice(ERROR.length)} failed`);
      else if (eventType.startsWith(AFTER)) add(list, 'after', `after ${delayWords(delayOf.get(eventType) ?? eventType, vocabulary)}`);
      else add(list, 'event', eventType);
    }
    if (node.always?.length) add(node.always, 'always', 'always');

    const children = Object.values(node.states).map(walk);
    const state: GraphState = {
      id: idOf(node),
      key: node.key,
      path: [...node.path],
      children,
      tags: [...node.tags],
      final: node.type === 'final',
      invokes,
    };
    if (node.description) state.description = node.description;
    const initial = node.initial?.target?.[0];
    if (initial && children.length) state.initial = idOf(initial);
    return state;
  };

  const top = walk(root);
  const globalNotes = [...rootStays].map(([what, triggers]) => `${triggers.join(', ')}: ${what} (unless the state handles it)`);
  const graph: MachineGraph = { id: machine.id, states: top.children, edges, globalNotes };
  if (top.description) graph.description = top.description;
  if (top.initial) graph.initial = top.initial;
  return graph;
}

function label(trigger: string, guard: string | undefined, actions: string[]): string {
  return `${trigger}${guard !== undefined ? ` [${guard}]` : ''}${actions.length ? ` / ${actions.join(', ')}` : ''}`;
}

/** Guard names a guard is the conjunction of (a name, or and() of names), or undefined for anything else. */
function conjuncts(guard: unknown): string[] | undefined {
  if (typeof guard === 'string') return [guard];
  if (guard && typeof guard === 'object' && 'type' in guard && typeof guard.type === 'string' && !('params' in guard && guard.params)) return [guard.type];
  if (typeof guard === 'function' && guard.name === 'and') {
    const parts = (guard as { guards?: unknown }).guards;
    if (!Array.isArray(parts)) return undefined;
    const names = parts.map(conjuncts);
    return names.every((n) => n !== undefined) ? (names.flat() as string[]) : undefined;
  }
  return undefined;
}

function negatedWords(name: string, vocabulary: Vocabulary): string {
  return vocabulary.negated?.[name] ?? `not ${vocabulary.guards[name] ?? camelToWords(name)}`;
}

/**
 * The guard of branch `i` of a transition list in words, reading the list in
 * order as XState does. A guard that an earlier branch refines by one more
 * condition gets that condition negated ("my attempt" after "my attempt and
 * ok" → "my attempt and no"); the unguarded fallback becomes the negation of
 * the earlier single guards ("not ready"), or 'else'.
 */
function branchGuardWords(list: TransitionLike[], i: number, vocabulary: Vocabulary): string | undefined {
  const t = list[i]!;
  const earlier = list.slice(0, i).filter((e) => e.guard !== undefined);
  if (t.guard === undefined) {
    if (earlier.length === 0) return undefined;
    const singles = earlier.map((e) => conjuncts(e.guard));
    if (singles.every((c) => c !== undefined && c.length === 1)) return singles.map((c) => negatedWords(c![0]!, vocabulary)).join(' and ');
    return 'else';
  }
  const words = guardWords(t.guard, vocabulary);
  const mine = conjuncts(t.guard);
  if (!mine) return words;
  const negations: string[] = [];
  for (const e of earlier) {
    const theirs = conjuncts(e.guard);
    if (!theirs) continue;
    const extra = theirs.filter((n) => !mine.includes(n));
    if (extra.length === 1 && mine.every((n) => theirs.includes(n))) negations.push(negatedWords(extra[0]!, vocabulary));
  }
  return negations.length ? `${words} and ${negations.join(' and ')}` : words;
}

/** A guard: a name, `{ type, params }`, or xstate's and/or/not (functions carrying `guards`). */
export function guardWords(guard: unknown, vocabulary: Vocabulary): string {
  if (typeof guard === 'string') return vocabulary.guards[guard] ?? camelToWords(guard);
  if (typeof guard === 'function') {
    const parts = (guard as { guards?: unknown }).guards;
    const sub = Array.isArray(parts) ? parts.map((g) => guardWords(g, vocabulary)) : parts !== undefined ? [guardWords(parts, vocabulary)] : [];
    switch (guard.name) {
      case 'and':
        return sub.join(' and ');
      case 'or':
        return sub.map((s) => (s.includes(' and ') ? `(${s})` : s)).join(' or ');
      case 'not':
        return `not ${sub.length === 1 && !sub[0]!.includes(' ') ? sub[0] : `(${sub.join(', ')})`}`;
      default:
        return guard.name ? camelToWords(guard.name) : 'condition';
    }
  }
  if (guard && typeof guard === 'object' && 'type' in guard && typeof guard.type === 'string') return guardWords(guard.type, vocabulary);
  return 'condition';
}

function actionWords(action: unknown, vocabulary: Vocabulary): string | undefined {
  const name = typeof action === 'string' ? action : action && typeof action === 'object' && 'type' in action ? String(action.type) : undefined;
  return name === undefined ? undefined : vocabulary.actions[name];
}

function delayWords(delay: string | number, vocabulary: Vocabulary): string {
  if (typeof delay === 'number') return `${delay} ms`;
  return vocabulary.delays[delay] ?? delay;
}

/** Every state of the graph, depth first. */
export function allStates(graph: MachineGraph): GraphState[] {
  const out: GraphState[] = [];
  const visit = (s: GraphState) => {
    out.push(s);
    s.children.forEach(visit);
  };
  graph.states.forEach(visit);
  return out;
}

/**
 * Edges for drawing: parallel edges (same source, target, kind of target and
 * visible actions) become one, their triggers joined by ' or ' — e.g.
 * "checkReady failed or after checkTimeoutMs / send IPC_NOTREADY" — so that
 * a picture shows one arrow per way from A to B.
 */
export function drawnEdges(graph: MachineGraph): GraphEdge[] {
  const out: GraphEdge[] = [];
  const byKey = new Map<string, GraphEdge>();
  for (const e of graph.edges) {
    const key = `${e.source}\u0000${e.target ?? ''}\u0000${e.actions.join(',')}`;
    const seen = byKey.get(key);
    const part = `${e.trigger}${e.guard !== undefined ? ` [${e.guard}]` : ''}`;
    if (!seen) {
      const copy = { ...e, actions: [...e.actions] };
      byKey.set(key, copy);
      out.push(copy);
      continue;
    }
    const parts = seen.label.replace(seen.actions.length ? / \/ .*$/ : /$^/, '');
    seen.label = `${parts} or ${part}${seen.actions.length ? ` / ${seen.actions.join(', ')}` : ''}`;
    if (seen.kind !== e.kind) seen.kind = 'event';
    if (e.description) seen.description = seen.description ? `${seen.description} ${e.description}` : e.description;
  }
  return out;
}
