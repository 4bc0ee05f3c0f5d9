"""What a replayed step's and a capture's host time is made of, on the GPU machine's host
(issues #18 and #19): a cudaMalloc of the sizes a capture's private pool takes (the MLP step's
capture made 9 new allocator segments for a 138 MiB pool), and a CUDA graph launch against the
number of kernel nodes in the graph (hotpath launches 5 graphs a replayed MLP step; its host
profile reads 8.8 us a launch on an H200 host).

  python3 benchmarks/probes/capture_costs.py [--reps 20] [--launches 400]

Prints, per allocation size, the median host time of an allocation that has to call cudaMalloc
(the caching allocator emptied first); per node count, the median host time of a graph launch
(torch.cuda.CUDAGraph.replay, whose own C++ and Python overhead is the same for every count: the
slope over the counts is what a node costs), beside a plain kernel launch from Python.
"""
import argparse
import statistics
import sys
import time

import torch


def malloc_costs(sizes_mib, reps):
    rows = []
    for mib in sizes_mib:
        times = []
        for _ in range(reps):
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            t0 = time.perf_counter()
            x = torch.empty(int(mib * (1 << 20)), dtype=torch.uint8, device="cuda")
            t1 = time.perf_counter()
            del x
            times.append((t1 - t0) * 1e6)
        rows.append((mib, statistics.median(times)))
    torch.cuda.empty_cache()
    return rows


def graph_of(nodes, x):
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):  # warm-up outside the capture, as torch.cuda.graphs asks
            for _ in range(nodes):
                x.add_(1)
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        for _ in range(nodes):
            x.add_(1)
    return g


def host_median(launch, launches):
    """The median host time of `launch()` in us, the GPU caught up every 20 (the queue never
    fills)."""
    times = []
    for i in range(launches):
        if i % 20 == 0:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        launch()
        times.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(times)


def launch_costs(node_counts, launches):
    x = torch.zeros(256, device="cuda")
    rows = [(n, host_median(graph_of(n, x).replay, launches)) for n in node_counts]
    return rows, host_median(lambda: x.add_(1), launches)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--launches", type=int, default=400)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("capture_costs: needs a CUDA GPU (it times cudaMalloc and graph launches on it)",
              file=sys.stderr)
        return 2
    torch.zeros(1, device="cuda")  # the context, outside the timings
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("cudaMalloc through the caching allocator (its cache emptied first), host us, median:")
    for mib, us in malloc_costs([2, 8, 16, 32, 64, 138], args.reps):
        print(f"  {mib:6.0f} MiB  {us:9.1f}")
    rows, plain = launch_costs([1, 2, 4, 8, 16, 32], args.launches)
    print("graph launch (CUDAGraph.replay), host us, median:")
    for n, us in rows:
        print(f"  {n:3d} kernel nodes  {us:7.2f}")
    if len(rows) >= 2:
        (n0, t0), (n1, t1) = rows[0], rows[-1]
        print(f"  per node over {n0}-{n1}: {(t1 - t0) / (n1 - n0):.3f} us")
    print(f"one kernel launched from Python (x.add_(1)): {plain:.2f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
