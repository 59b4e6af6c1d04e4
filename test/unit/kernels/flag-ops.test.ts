/**
 * The flag kernel (src/kernels/flag-ops.ptx.ts): its PTX declares the
 * parameters flagOpsArgs packs, one unrolled operation per slot, waits as
 * system-scope acquires and writes as releases; the simulated driver loads
 * it and queues a launch as the same memory-operation batch.
 */
import { describe, expect, it } from 'vitest';
import { parsePtx } from '../../../src/cuda/sim/kernels.js';
import { FLAG_OPS_ENTRY, FLAG_OPS_MAX, FLAG_OPS_PTX } from '../../../src/kernels/flag-ops.ptx.js';
import { type FlagOp, flagOpsAsMemOps } from '../../../src/kernels/sim/flag-ops.js';
import { flagOpsArgs } from '../../../src/persistent/transfers.js';

describe('the flag kernel', () => {
  it('declares n, waits, copies and an address and value per operation, as flagOpsArgs packs them', () => {
    const entry = parsePtx(FLAG_OPS_PTX).get(FLAG_OPS_ENTRY)!;
    expect(entry.params).toEqual(['b32', 'b64', 'b64', 'b64', ...Array.from({ length: 2 * FLAG_OPS_MAX }, () => 'b64')]);
    const args = flagOpsArgs([{ op: 'write64', addr: 0x100n, value: 1n }]);
    expect(args.map((a) => a.type)).toEqual(['u32', 'u64', 'u64', 'u64', ...Array.from({ length: 2 * FLAG_OPS_MAX }, () => 'u64')]);
    expect(FLAG_OPS_PTX).toMatch(/^\.version 8\.0\n\.target sm_75\n/);
    expect(FLAG_OPS_PTX.match(/ld\.acquire\.sys\.global\.u64/g)).toHaveLength(FLAG_OPS_MAX);
    expect(FLAG_OPS_PTX.match(/st\.release\.sys\.global\.u64/g)).toHaveLength(FLAG_OPS_MAX);
    expect(FLAG_OPS_PTX.match(/st\.relaxed\.sys\.global\.u64/g)).toHaveLength(FLAG_OPS_MAX);
    expect(FLAG_OPS_PTX.match(/st\.volatile\.global\.u64/g)).toHaveLength(FLAG_OPS_MAX);
    // Every label it branches to is defined once.
    const defined = [...FLAG_OPS_PTX.matchAll(/^(\$L__\w+):/gm)].map((m) => m[1]);
    expect(new Set(defined).size).toBe(defined.length);
    for (const m of FLAG_OPS_PTX.matchAll(/bra(?:\.uni)?\s+(\$L__\w+);/g)) expect(defined).toContain(m[1]);
  });

  it('packs write64, wait64 (geq) and copy64 in order, waits and copies as bits; the simulator reads back the same operations', () => {
    const ops: FlagOp[] = [
      { op: 'write64', addr: 0x10n, value: 1n },
      { op: 'wait64', addr: 0x18n, value: 1n, condition: 'geq' },
      { op: 'write64', addr: 0x18n, value: 0n },
      { op: 'copy64', addr: 0x40n, src: 0x80n },
    ];
    const args = flagOpsArgs(ops, new Set([0x18n]));
    expect(args[0]).toEqual({ type: 'u32', value: 4 });
    expect(args[1]).toEqual({ type: 'u64', value: 0b0010n });
    expect(args[2]).toEqual({ type: 'u64', value: 0b1000n });
    expect(args[3]).toEqual({ type: 'u64', value: 0b0001n }); // the write to 0x10 is not local: a release
    expect(flagOpsAsMemOps(args)).toEqual(ops);
    const full = Array.from({ length: FLAG_OPS_MAX }, (_, k) => ({ op: 'wait64' as const, addr: BigInt(8 * k), value: 1n, condition: 'geq' as const }));
    expect(flagOpsArgs(full)[1]).toEqual({ type: 'u64', value: (1n << BigInt(FLAG_OPS_MAX)) - 1n });
    expect(() => flagOpsArgs([{ op: 'wait64', addr: 0n, value: 1n, condition: 'eq' }])).toThrow(/write64, wait64 \(geq\) and copy64/);
  });
});
