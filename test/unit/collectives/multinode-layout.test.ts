/**
 * The pure parts of a job across nodes: the layout every rank computes from
 * the node names in the store (node-layout.ts), how a count is cut among a
 * node's ranks (pieces), and the names and engine kinds the environment may
 * give. A layout the hierarchy cannot run is a ConfigError that says what to
 * change, computed alike on every rank.
 */
import { describe, expect, it } from 'vitest';
import { engineKindOf } from '../../../src/collectives/internode-engine.js';
import { pieces } from '../../../src/collectives/multinode-communicator.js';
import { checkNodeName, discoverNodes, layoutOf } from '../../../src/collectives/node-layout.js';
import { ConfigError } from '../../../src/errors.js';
import { memoryStore } from '../../helpers/memory-store.js';

describe('node layout', () => {
  it('numbers nodes by their lowest rank, and each rank by its place on its node', () => {
    const names = ['x', 'x', 'y', 'y', 'z', 'z'];
    expect(names.map((_, r) => layoutOf(names, r))).toEqual([
      { node: 0, nodes: 3, name: 'x', localRank: 0, localSize: 2 },
      { node: 0, nodes: 3, name: 'x', localRank: 1, localSize: 2 },
      { node: 1, nodes: 3, name: 'y', localRank: 0, localSize: 2 },
      { node: 1, nodes: 3, name: 'y', localRank: 1, localSize: 2 },
      { node: 2, nodes: 3, name: 'z', localRank: 0, localSize: 2 },
      { node: 2, nodes: 3, name: 'z', localRank: 1, localSize: 2 },
    ]);
    expect(layoutOf(['only'], 0)).toEqual({ node: 0, nodes: 1, name: 'only', localRank: 0, localSize: 1 });
  });

  it('refuses nodes of different sizes, naming each', () => {
    expect(() => layoutOf(['a', 'a', 'b'], 2)).toThrow(ConfigError);
    expect(() => layoutOf(['a', 'a', 'b'], 0)).toThrow(/a: 2, b: 1.*same number of ranks on every node/);
  });

  it('refuses ranks of a node that are not consecutive, saying how they must be numbered', () => {
    expect(() => layoutOf(['a', 'b', 'a', 'b'], 0)).toThrow(ConfigError);
    expect(() => layoutOf(['a', 'b', 'a', 'b'], 3)).toThrow(/rank 1 runs on node b, and ranks 0-1 must be on one node.*consecutively/);
  });

  it('discoverNodes: every rank writes its name and reads all, through the store', async () => {
    const store = memoryStore();
    const names = ['n1', 'n1', 'n2', 'n2'];
    const got = await Promise.all(names.map((n, r) => discoverNodes(store, r, 4, n, 1000)));
    expect(got.map((l) => [l.node, l.localRank])).toEqual([
      [0, 0],
      [0, 1],
      [1, 0],
      [1, 1],
    ]);
  });

  it('node names are what a folder name can hold', () => {
    expect(checkNodeName('gpu-node.07_a')).toBe('gpu-node.07_a');
    for (const bad of ['', '../x', 'a b', 'x'.repeat(65), 7]) expect(() => checkNodeName(bad)).toThrow(ConfigError);
  });

  it('SMCUDA_INTERNODE: nccl or sockets; unset, NCCL on a GPU and the socket twin on the simulated driver', () => {
    expect(engineKindOf(undefined, 'native')).toBe('nccl');
    expect(engineKindOf(undefined, 'sim')).toBe('sockets');
    expect(engineKindOf('sockets', 'native')).toBe('sockets');
    expect(() => engineKindOf('mpi', 'sim')).toThrow(/SMCUDA_INTERNODE .* must be nccl or sockets, got "mpi"/);
  });
});

describe('pieces: a count cut among the ranks of a node', () => {
  it('gives the first count % L ranks one element more, packed, covering every element once', () => {
    expect(pieces(10, 4)).toEqual({ counts: [3, 3, 2, 2], displs: [0, 3, 6, 8] });
    expect(pieces(2, 4)).toEqual({ counts: [1, 1, 0, 0], displs: [0, 1, 2, 2] });
    expect(pieces(0, 3)).toEqual({ counts: [0, 0, 0], displs: [0, 0, 0] });
    for (const [count, parts] of [
      [1001, 3],
      [7, 7],
      [5, 1],
      [123457, 8],
    ] as const) {
      const { counts, displs } = pieces(count, parts);
      expect(counts.reduce((a, b) => a + b, 0)).toBe(count);
      for (let i = 1; i < parts; i++) expect(displs[i]).toBe(displs[i - 1]! + counts[i - 1]!);
      expect(Math.max(...counts) - Math.min(...counts)).toBeLessThanOrEqual(1);
    }
  });
});
