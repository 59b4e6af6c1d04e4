/**
 * PTX of `smcuda_flag_ops`: a persistent transfer's flag operations (the
 * same write64 / wait64 >= value lists flags.ts builds for
 * cuStreamBatchMemOp) run by one GPU thread instead of the stream's
 * memory-operation unit. Why: cuGraphLaunch costs the host a fixed amount per
 * memory-operation node of the graph, and next to nothing per kernel node
 * (H100, driver 580, test/gpu/measure-graph-launch.mjs), so a graph of many
 * rounds cost the host more per replay than its rounds took; with the
 * kernel the graph suite's 16 ping-pongs of 8 B launch at a fraction of
 * that, and their half round trip is shorter (no memory-operation unit, no
 * copy engine between the flags; docs/benchmarks.md, 'GPU-driven
 * transfers').
 *
 * Written here, not generated from a .cu (src/kernels/README.md): it is one
 * unrolled list of at most FLAG_OPS_MAX operations, each an address and a
 * value as kernel parameters (a graph bakes them in, as it does a batch's;
 * 64 operations are 1 KiB of the 4 KiB a launch may pass). Bit k of `waits` says operation k waits (spins until the word at the
 * address >= value, an acquire at system scope, as the peer's writes come
 * over the mapping); bit k of `copies` says it copies the 8 bytes at
 * `value` (read as an address) to the address (a small round's bytes, so
 * that no copy-engine node sits between the flags); otherwise it writes the
 * value: a release at system scope where bit k of `releases` is set (a
 * signal to the peer, which publishes the thread's earlier writes and
 * copies with it), else a relaxed write (this side's own bookkeeping: a
 * release costs a system-wide fence). PTX 8.0, sm_75, as the generated
 * modules.
 */

/** Operations one launch takes. */
export const FLAG_OPS_MAX = 64;

export const FLAG_OPS_ENTRY = 'smcuda_flag_ops';

function opCode(k: number): string {
  return `	// operation ${k}
	setp.le.u32 	%p1, %r1, ${k};
	@%p1 bra 	$L__end;
	ld.param.u64 	%rd1, [${FLAG_OPS_ENTRY}_a${k}];
	ld.param.u64 	%rd2, [${FLAG_OPS_ENTRY}_v${k}];
	cvta.to.global.u64 	%rd3, %rd1;
	and.b64 	%rd5, %rd6, 0x${(1n << BigInt(k)).toString(16).padStart(16, "0")};
	setp.ne.u64 	%p2, %rd5, 0;
	@%p2 bra 	$L__wait${k};
	and.b64 	%rd5, %rd7, 0x${(1n << BigInt(k)).toString(16).padStart(16, "0")};
	setp.ne.u64 	%p2, %rd5, 0;
	@%p2 bra 	$L__copy${k};
	and.b64 	%rd5, %rd8, 0x${(1n << BigInt(k)).toString(16).padStart(16, '0')};
	setp.ne.u64 	%p2, %rd5, 0;
	@%p2 bra 	$L__release${k};
	st.relaxed.sys.global.u64 	[%rd3], %rd2;
	bra.uni 	$L__next${k};
$L__release${k}:
	st.release.sys.global.u64 	[%rd3], %rd2;
	bra.uni 	$L__next${k};
$L__copy${k}:
	cvta.to.global.u64 	%rd1, %rd2;
	ld.volatile.global.u64 	%rd4, [%rd1];
	st.volatile.global.u64 	[%rd3], %rd4;
	bra.uni 	$L__next${k};
$L__wait${k}:
	ld.acquire.sys.global.u64 	%rd4, [%rd3];
	setp.lt.u64 	%p3, %rd4, %rd2;
	@%p3 bra 	$L__wait${k};
$L__next${k}:
`;
}

function params(): string {
  const ps = [`	.param .u32 ${FLAG_OPS_ENTRY}_n`, `	.param .u64 ${FLAG_OPS_ENTRY}_waits`, `	.param .u64 ${FLAG_OPS_ENTRY}_copies`, `	.param .u64 ${FLAG_OPS_ENTRY}_releases`];
  for (let k = 0; k < FLAG_OPS_MAX; k++) ps.push(`	.param .u64 ${FLAG_OPS_ENTRY}_a${k}`, `	.param .u64 ${FLAG_OPS_ENTRY}_v${k}`);
  return ps.join(',\n');
}

/** PTX text of smcuda_flag_ops(n: u32, waits: u64, copies: u64, releases: u64, a0: u64, v0: u64, …, a63, v63). */
export const FLAG_OPS_PTX: string = `.version 8.0
.target sm_75
.address_size 64

.visible .entry ${FLAG_OPS_ENTRY}(
${params()}
)
{
	.reg .pred 	%p<4>;
	.reg .b32 	%r<2>;
	.reg .b64 	%rd<9>;

	ld.param.u32 	%r1, [${FLAG_OPS_ENTRY}_n];
	ld.param.u64 	%rd6, [${FLAG_OPS_ENTRY}_waits];
	ld.param.u64 	%rd7, [${FLAG_OPS_ENTRY}_copies];
	ld.param.u64 	%rd8, [${FLAG_OPS_ENTRY}_releases];
${Array.from({ length: FLAG_OPS_MAX }, (_, k) => opCode(k)).join('')}$L__end:
	ret;
}
`;

export const FLAG_OPS_ENTRIES = [FLAG_OPS_ENTRY] as const;
