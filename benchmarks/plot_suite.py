#!/usr/bin/env python3
"""Plots of a benchmark-suite run (bench_suite's CSV, and torch_compile_suite.py's beside it).

  python3 benchmarks/plot_suite.py --suite suite.csv [--torch-compile suite_torch_compile.csv]
      --out DIR [--title TEXT]

Writes into DIR:
  speedup.png   per workload: hotpath over C++ eager, and torch.compile (default, reduce-overhead)
                over Python eager where given (a mode that failed is marked so)
  governor.png  per workload: the governor's judged speedup with its 95% interval beside the
                speedup measured side by side (issue "An honest governor": within 5%)
  memory.png    per workload: peak allocated memory, eager and hotpath
"""
import argparse
import csv
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def number(row, key):
    try:
        return float(row.get(key, ""))
    except ValueError:
        return None


def save(fig, out, name):
    path = os.path.join(out, name)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


def finish_axes(ax, names, ylabel, title):
    ax.set_xticks(list(range(len(names))))
    ax.set_xticklabels(names, rotation=20, ha="right")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--suite", required=True)
    p.add_argument("--torch-compile")
    p.add_argument("--out", required=True)
    p.add_argument("--title", default="hotpath benchmark suite")
    args = p.parse_args()
    suite = [r for r in rows(args.suite) if r.get("status") == "ok"]
    if not suite:
        p.error(f"{args.suite}: no row with status ok")
    for key in ("workload", "speedup", "governor_speedup", "eager_peak_mib", "hotpath_peak_mib"):
        if key not in suite[0]:
            p.error(f"{args.suite}: no column '{key}' (is it bench_suite's CSV?)")
    tc = {}
    if args.torch_compile:
        for r in rows(args.torch_compile):
            tc[(r["workload"], r["compiler"])] = r
    os.makedirs(args.out, exist_ok=True)
    names = [r["workload"] for r in suite]
    x = range(len(names))

    # Speedups.
    series = [("hotpath / C++ eager", [number(r, "speedup") for r in suite])]
    for mode in ("default", "reduce-overhead"):
        if any((n, mode) in tc for n in names):
            series.append((f"torch.compile {mode} / Python eager",
                           [number(tc.get((n, mode), {}), "speedup_over_python_eager")
                            if tc.get((n, mode), {}).get("status") == "ok" else None
                            for n in names]))
    fig, ax = plt.subplots(figsize=(1.8 + 1.6 * len(names), 4.2))
    width = 0.8 / len(series)
    for k, (label, values) in enumerate(series):
        xs = [i + (k - (len(series) - 1) / 2) * width for i in x]
        bars = ax.bar(xs, [v or 0 for v in values], width, label=label)
        for xi, v, b in zip(xs, values, bars):
            ax.text(xi, (v or 0) + 0.03, f"{v:.2f}x" if v else "failed", ha="center",
                    va="bottom", fontsize=7, rotation=90 if v is None else 0)
    ax.axhline(1.0, color="grey", linewidth=0.8)
    finish_axes(ax, names, "speedup (x)", f"{args.title}: speedup per workload")
    save(fig, args.out, "speedup.png")

    # The governor's report against the measurement.
    fig, ax = plt.subplots(figsize=(1.8 + 1.6 * len(names), 4.2))
    measured = [number(r, "speedup") for r in suite]
    judged = [number(r, "governor_speedup") for r in suite]
    low = [number(r, "governor_low") or j for r, j in zip(suite, judged)]
    high = [number(r, "governor_high") or j for r, j in zip(suite, judged)]
    ax.bar([i - 0.2 for i in x], measured, 0.4, label="measured side by side")
    ax.bar([i + 0.2 for i in x], judged, 0.4, label="governor's judged (95% interval)",
           yerr=[[max(0, j - lo) for j, lo in zip(judged, low)],
                 [max(0, hi - j) for j, hi in zip(judged, high)]], capsize=3)
    for i, (m, j) in enumerate(zip(measured, judged)):
        if m and j:
            ax.text(i, max(m, j) * 1.02, f"{100 * (j / m - 1):+.1f}%", ha="center", fontsize=8)
    finish_axes(ax, names, "speedup (x)",
                f"{args.title}: the governor's report against the measurement")
    save(fig, args.out, "governor.png")

    # Peak memory.
    fig, ax = plt.subplots(figsize=(1.8 + 1.6 * len(names), 4.2))
    ax.bar([i - 0.2 for i in x], [number(r, "eager_peak_mib") for r in suite], 0.4, label="eager")
    ax.bar([i + 0.2 for i in x], [number(r, "hotpath_peak_mib") for r in suite], 0.4,
           label="hotpath")
    finish_axes(ax, names, "peak allocated (MiB)", f"{args.title}: peak memory")
    save(fig, args.out, "memory.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
