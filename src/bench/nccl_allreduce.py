#!/usr/bin/env python3
"""NCCL all_reduce through PyTorch: the baseline of `smcuda bench --suite collectives`.

Started by src/bench/nccl-torch.ts; also runnable by hand:

    python3 src/bench/nccl_allreduce.py --ranks 2 --sizes 8,1048576 --out result.json

One process per rank (torch.multiprocessing, rendezvous through a file), rank r on
GPU r, float32 SUM in place. Per size and mode, `runs` runs, each timed on the host:

  stream: barrier, synchronize, t0, `iters` all_reduce calls back to back,
          synchronize, t1: (t1 - t0) / iters per call ("stream time,
          host-synchronised", as ANCHORS.md quotes NCCL);
  graph:  `iters` calls captured once in a torch.cuda.CUDAGraph (after a warm-up
          on a side stream, as PyTorch asks), then per run one replay between
          the same synchronisations: per call as above.

Each run's time is the slowest rank's. Bus bandwidth is nccl-tests' for
allreduce: size / time * 2 (n - 1) / n. The result, or {"skipped": why} where
torch, CUDA or enough GPUs are missing, is written as JSON to --out (rank 0).
NVLink multicast stays off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1).
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")


def write(path, doc):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f)
    os.replace(tmp, path)


def iterations(size, a):
    return max(a.min_iters, min(a.max_iters, a.budget_bytes // max(1, size)))


def summary(xs):
    s = sorted(xs)
    return {"median": statistics.median(s), "min": s[0], "max": s[-1]}


def rank_main(rank, a, init_file):
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    kwargs = dict(backend="nccl", init_method="file://" + init_file, rank=rank, world_size=a.ranks)
    try:
        dist.init_process_group(device_id=dev, **kwargs)  # eager NCCL init (torch >= 2.3): capture needs it
    except TypeError:
        dist.init_process_group(**kwargs)
    n = a.ranks
    results = []

    def timed(fn, iters):
        runs = []
        for _ in range(a.runs):
            dist.barrier()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            us = torch.tensor([(time.perf_counter() - t0) * 1e6 / iters], device=dev, dtype=torch.float64)
            dist.all_reduce(us, op=dist.ReduceOp.MAX)
            runs.append(us.item())
        return runs

    # Correctness once: rank r contributes r + 1 everywhere.
    check = torch.full((1024,), float(rank + 1), device=dev, dtype=torch.float32)
    dist.all_reduce(check)
    verified = bool(torch.all(check == n * (n + 1) / 2).item())

    for size in a.sizes:
        count = max(1, size // 4)
        x = torch.ones(count, device=dev, dtype=torch.float32)
        iters = iterations(size, a)
        for _ in range(a.warmup):
            dist.all_reduce(x)

        def stream_calls():
            for _ in range(iters):
                dist.all_reduce(x)

        runs = timed(stream_calls, iters)
        results.append(point(size, count, "stream", iters, runs, n))

        if size in a.graph_sizes:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    dist.all_reduce(x)
            torch.cuda.current_stream().wait_stream(side)
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            # thread_local: ProcessGroupNCCL's watchdog thread queries events while this thread captures.
            with capture(torch, g):
                for _ in range(a.graph_calls):
                    dist.all_reduce(x)
            g.replay()
            torch.cuda.synchronize()
            runs = timed(g.replay, a.graph_calls)
            results.append(point(size, count, "graph", a.graph_calls, runs, n))
            del g
        del x

    if rank == 0:
        write(
            a.out,
            {
                "tool": "nccl_allreduce.py",
                "torch": torch.__version__,
                "cuda": torch.version.cuda,
                "nccl": nccl_version(torch),
                "devices": [torch.cuda.get_device_name(i) for i in range(n)],
                "ranks": n,
                "dtype": "f32",
                "op": "sum",
                "runs": a.runs,
                "verified": verified,
                "results": results,
            },
        )
    dist.barrier()
    dist.destroy_process_group()


def capture(torch, g):
    try:
        return torch.cuda.graph(g, capture_error_mode="thread_local")
    except TypeError:  # torch < 2.1
        return torch.cuda.graph(g)


def nccl_version(torch):
    v = torch.cuda.nccl.version()
    return ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)


def point(size, count, mode, iters, runs, n):
    s = summary(runs)
    bus = size / (s["median"] * 1e-6) / 1e9 * 2 * (n - 1) / n if n > 1 and s["median"] > 0 else 0.0
    return {"size": size, "count": count, "mode": mode, "iters": iters, "runsUs": runs, **s, "busGBs": bus}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--sizes", default="8,1024,16384,262144,1048576,16777216,268435456,1073741824")
    p.add_argument("--graph-sizes", default="8,16384,1048576")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--budget-bytes", type=int, default=4 << 30)
    p.add_argument("--min-iters", type=int, default=5)
    p.add_argument("--max-iters", type=int, default=1000)
    p.add_argument("--graph-calls", type=int, default=100)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    a.sizes = [int(s) for s in a.sizes.split(",") if s]
    a.graph_sizes = {int(s) for s in a.graph_sizes.split(",") if s}
    try:
        import torch
        import torch.distributed as dist
        import torch.multiprocessing as mp
    except Exception as e:  # ImportError, or a broken install
        write(a.out, {"skipped": f"python3 cannot import torch ({type(e).__name__}: {e})"})
        return 0
    if not torch.cuda.is_available():
        write(a.out, {"skipped": f"torch {torch.__version__} sees no CUDA device"})
        return 0
    if torch.cuda.device_count() < a.ranks:
        write(a.out, {"skipped": f"NCCL needs one GPU per rank: {a.ranks} ranks, {torch.cuda.device_count()} GPU(s) visible"})
        return 0
    if not dist.is_nccl_available():
        write(a.out, {"skipped": f"torch {torch.__version__} was built without NCCL"})
        return 0
    with tempfile.TemporaryDirectory(prefix="smcuda-nccl-") as d:
        mp.spawn(rank_main, args=(a, os.path.join(d, "rendezvous")), nprocs=a.ranks, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
