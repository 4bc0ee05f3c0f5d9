#!/usr/bin/env python3
"""The governor's figure against the side-by-side over many runs (gpu_check.sh's `figure` part).

Reads bench_suite's summary lines (from FILE, or stdin), e.g.
  batch 256, 1024->4096->1024: eager 1.049 ms, hotpath 0.820 ms: 1.280x measured; the governor
  judged 1.361x (1.208-1.535, kept), +6.4% (its medians: ...)
(an optional run number first), prints them back, then per workload: the runs, how many were
within 5% of the measured figure, the median difference, and how many of the governor's 95%
intervals covered the measured figure. Exits 1 when no line could be read.

With --json (bench_suite's JSON of the same runs, every iteration of both sides), also how well
the side-by-side agrees with itself: the speedup of its first half of iterations against its
second half, per run. Where those differ by as much as the governor does, the measurement, not
the governor, is what sets the limit.
"""
import argparse
import json
import re
import statistics
import sys

ROW = re.compile(
    r"^\s*(?:\d+\s+)?(?P<workload>.+?): eager [0-9.]+ ms, hotpath [0-9.]+ ms: "
    r"(?P<measured>[0-9.]+)x measured; the governor judged (?P<judged>[0-9.]+)x "
    r"\((?P<low>[0-9.]+)-(?P<high>[0-9.]+)")


def halves(row: dict):
    """The side-by-side's speedup over its first and over its second half of iterations."""
    eager = row.get("eager_trace_ms") or []
    hot = (row.get("hotpath_trace_ms") or [])[-len(eager):] if eager else []
    n = len(eager) // 2
    if n < 2 or len(hot) != len(eager):
        return None
    first = statistics.median(eager[:n]) / statistics.median(hot[:n])
    second = statistics.median(eager[n:]) / statistics.median(hot[n:])
    return first, second


def self_agreement(paths) -> None:
    seen = {}
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for row in json.load(f):
                h = halves(row)
                if h is not None:
                    seen.setdefault(row.get("sizes", row.get("workload", "?")), []).append(h)
    for workload, rows in seen.items():
        diffs = [100.0 * (b - a) / a for a, b in rows]
        within = sum(abs(d) <= 5.0 for d in diffs)
        print(f"{workload}: the side-by-side's own halves within 5% of each other in {within} "
              f"of {len(rows)} run(s), median |difference| "
              f"{statistics.median(abs(d) for d in diffs):.1f}% (largest {max(map(abs, diffs)):.1f}%)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", nargs="?", help="bench_suite output (default: stdin)")
    parser.add_argument("--json", nargs="+", default=[], metavar="FILE",
                        help="bench_suite --json files of the same runs")
    args = parser.parse_args()
    lines = open(args.file, encoding="utf-8") if args.file else sys.stdin
    runs = {}
    for line in lines:
        m = ROW.match(line)
        if not m:
            continue
        print(line.rstrip("\n"))
        measured, judged = float(m["measured"]), float(m["judged"])
        low, high = float(m["low"]), float(m["high"])
        runs.setdefault(m["workload"], []).append((measured, judged, low, high))
    if not runs:
        print(f"figure_summary: no bench_suite line with a governor's figure in "
              f"{args.file or 'stdin'}", file=sys.stderr)
        return 1
    for workload, rows in runs.items():
        diffs = [100.0 * (j - m) / m for m, j, _, _ in rows]
        within = sum(abs(d) <= 5.0 for d in diffs)
        covered = sum(lo <= m <= hi for m, _, lo, hi in rows)
        print(f"{workload}: {len(rows)} run(s), judged within 5% of measured in {within}, "
              f"median difference {statistics.median(diffs):+.1f}% "
              f"(from {min(diffs):+.1f}% to {max(diffs):+.1f}%), "
              f"interval covers measured in {covered}")
    self_agreement(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
