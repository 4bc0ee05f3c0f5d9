"""Probe (issue "An honest governor", a held capture's cost): how much of a CUDA graph capture's
host time is the caching allocator growing the graph's private pool (cudaMalloc), and whether a
pool grown beforehand (its memory allocated and freed on the capture's stream, so that its
blocks wait in the pool) takes that out of the capture.

The step is the MLP+AdamW example's (1024-4096-1024, batch 256, loss.item() after the forward
pass), captured forward and backward with torch.cuda.graph on a side stream. ROUNDS rounds, each
a capture into a fresh pool and one into a pool grown to the fresh capture's size, in turns.
Also cudaMalloc's own cost by size (a fresh segment each: the allocator's cache emptied first).

  python3 benchmarks/probes/pool_prewarm.py [--rounds 8]
"""
import argparse
import statistics
import time

import torch


def segments():
    s = torch.cuda.memory_stats()
    return s.get("segment.all.allocated", 0), s.get("reserved_bytes.all.current", 0)


def malloc_costs(sizes_mib, repeats):
    out = {}
    for mib in sizes_mib:
        ts = []
        for _ in range(repeats):
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            t0 = time.perf_counter()
            x = torch.empty(mib << 20, dtype=torch.uint8, device="cuda")
            t1 = time.perf_counter()
            ts.append((t1 - t0) * 1e6)
            del x
        out[mib] = statistics.median(ts)
    torch.cuda.empty_cache()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=8)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("pool_prewarm: needs a CUDA GPU")
        return 2
    torch.manual_seed(0)
    dev = torch.device("cuda")
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)
    ).to(dev)
    x = torch.randn(256, 1024, device=dev)
    y = torch.randn(256, 1024, device=dev)

    def step():
        out = model(x)
        loss = torch.nn.functional.mse_loss(out, y)
        loss.backward()
        return loss

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            model.zero_grad(set_to_none=True)
            step()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()

    print("cudaMalloc of a fresh segment, median of 5, us:")
    for mib, us in malloc_costs([2, 20, 32, 64, 128, 256, 1024], 5).items():
        print(f"  {mib:5d} MiB: {us:9.1f}")

    def capture(pool, grow_bytes):
        model.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        grew_us = 0.0
        if grow_bytes > 0:
            t0 = time.perf_counter()
            with torch.cuda.use_mem_pool(pool):
                with torch.cuda.stream(side):
                    # The large pool's blocks and one of the small pool's 2 MiB segments.
                    blk = torch.empty(grow_bytes, dtype=torch.uint8, device=dev)
                    small = torch.empty(1024, dtype=torch.uint8, device=dev)
                    del blk, small
            grew_us = (time.perf_counter() - t0) * 1e6
            torch.cuda.synchronize()
        seg0, res0 = segments()
        g = torch.cuda.CUDAGraph()
        t0 = time.perf_counter()
        with torch.cuda.graph(g, pool=pool.id, stream=side):
            loss = step()
        t1 = time.perf_counter()
        seg1, res1 = segments()
        g.replay()
        torch.cuda.synchronize()
        del g, loss
        return (t1 - t0) * 1e6, seg1 - seg0, res1 - res0, grew_us

    # One throwaway capture: the process's first pays one-off costs (cuBLAS on a new stream).
    capture(torch.cuda.MemPool(), 0)
    fresh, warm = [], []
    for r in range(args.rounds):
        p = torch.cuda.MemPool()
        us, segs, grew, _ = capture(p, 0)
        fresh.append(us)
        print(f"round {r}: fresh pool: capture {us:8.1f} us, {segs} new segment(s), {grew >> 20} MiB")
        del p
        torch.cuda.empty_cache()
        q = torch.cuda.MemPool()
        us2, segs2, grew2, pre = capture(q, max(grew, 2 << 20))
        warm.append(us2)
        print(
            f"round {r}: grown pool: capture {us2:8.1f} us, {segs2} new segment(s), "
            f"{grew2 >> 20} MiB more; growing it took {pre:8.1f} us beforehand"
        )
        del q
        torch.cuda.empty_cache()
    print(
        f"capture medians: fresh pool {statistics.median(fresh):.1f} us, grown pool "
        f"{statistics.median(warm):.1f} us over {args.rounds} rounds "
        f"({torch.cuda.get_device_name()}, torch {torch.__version__})"
    )


if __name__ == "__main__":
    raise SystemExit(main())
