#!/usr/bin/env python3
"""Plots of a benchmark-suite run (bench_suite's CSV, and torch_compile_suite.py's beside it).

  python3 benchmarks/plot_suite.py --suite suite.csv [--torch-compile suite_torch_compile.csv]
      [--traces bench_suite.json ... [--torch-compile-json torch_compile.json]]
      --out DIR [--title TEXT]

Writes into DIR:
  speedup.png   per workload: hotpath over C++ eager, and torch.compile (default, reduce-overhead)
                over Python eager where given (a mode that failed is marked so)
  governor.png  per workload: the governor's judged speedup with its 95% interval beside the
                speedup measured side by side (issue "An honest governor": within 5%)
  memory.png    per workload: peak allocated memory, eager and hotpath
  op_bench.png  (rows of the op_bench sweep) per op: GB/s eager and hotpath against the bytes
                moved, beside the copy bandwidth measured in the same run
  attention_memory.png  (rows of the attention_memory sweep) peak memory against sequence length
                per width, eager and hotpath, the accounting dotted, out-of-memory rows marked
  warmup.png    (with --traces: bench_suite's JSON) per workload, every iteration's time from
                the moment hotpath is enabled: its warm-up, compile and steady state, eager's
                blocks, and torch.compile's first call and iterations (--torch-compile-json)
"""
import json
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


SWEEPS = ("op_bench", "attention_memory")
FAILED = object()  # a torch.compile row that ran and did not finish (an error, out of memory)


def config(row):
    """What makes two rows the same measurement: workload, sizes, dtype and mode."""
    return (row["workload"], row["sizes"], row["dtype"], row["mode"])


def row_label(row, rows):
    """The workload's name; where it has several rows, with what tells them apart."""
    if sum(r["workload"] == row["workload"] for r in rows) < 2:
        return row["workload"]
    sizes = row["sizes"]
    if row["workload"] == "transformer_lm":  # "small (768/...), batch 4 x context 256"
        sizes = f"{sizes.split()[0]} T{sizes.rsplit(' ', 1)[-1]}"
    return f"{row['workload']}\n{sizes}, {row['mode']}, {row['dtype']}"


def sizes_of(row):
    """[b, t, d] of a sweep row's sizes text ("gelu x[16,256,64]")."""
    inside = row["sizes"][row["sizes"].rindex("[") + 1:row["sizes"].rindex("]")]
    return [int(v) for v in inside.split(",")]


def plot_op_bench(ops, tc, args):
    """GB/s against bytes moved, per op; torch.compile default's where its rows (`tc`, by config)
    have the same configuration: its median time at the bytes eager moves."""
    if not ops:
        return
    beside = 0
    names = sorted({r["sizes"].split(" x[")[0] for r in ops})
    fig, axes = plt.subplots(1, len(names), figsize=(3.6 * len(names), 3.8), squeeze=False)
    copy = max(number(r, "copy_gbps") or 0 for r in ops)
    for ax, name in zip(axes[0], names):
        def gigabytes(r):  # what the op moves: its time at its bandwidth
            return number(r, "eager_ms") * number(r, "eager_gbps") / 1e3

        mine = sorted((r for r in ops if r["sizes"].split(" x[")[0] == name), key=gigabytes)
        moved = [gigabytes(r) for r in mine]
        ax.plot(moved, [number(r, "eager_gbps") for r in mine], "o", ms=3, label="eager")
        ax.plot(moved, [number(r, "hotpath_gbps") for r in mine], "x", ms=4, label="hotpath")
        compiled = [(gigabytes(r), gigabytes(r) / number(t, "median_ms") * 1e3)
                    for r in mine for t in [tc.get((config(r), "default"), {})]
                    if t.get("status") == "ok" and number(t, "median_ms")]
        if compiled:
            beside += len(compiled)
            ax.plot(*zip(*compiled), "^", ms=4, mfc="none", label="torch.compile default")
        if copy:
            ax.axhline(copy, color="grey", linestyle="--", linewidth=0.8, label="copy")
        ax.set_xscale("log")
        ax.set_xlabel("bytes moved (GB)")
        ax.set_ylabel("GB/s")
        ax.set_title(name, fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle(f"{args.title}: op_bench bandwidth")
    save(fig, args.out, "op_bench.png")
    if beside:
        print(f"op_bench.png: torch.compile default beside hotpath in {beside} configuration(s)")


def plot_attention_memory(att, args):
    if not att:
        return
    widths = sorted({sizes_of(r)[2] for r in att})
    fig, ax = plt.subplots(figsize=(7, 4.4))
    for k, d in enumerate(widths):
        mine = sorted((r for r in att if sizes_of(r)[2] == d), key=lambda r: sizes_of(r)[1])
        color = f"C{k}"
        ran = [r for r in mine if r["status"] == "ok"]
        seq = [sizes_of(r)[1] for r in ran]
        ax.plot(seq, [number(r, "eager_peak_mib") for r in ran], "-o", color=color, ms=3,
                label=f"d {d} eager")
        ax.plot(seq, [number(r, "hotpath_peak_mib") for r in ran], "--x", color=color, ms=4,
                label=f"d {d} hotpath")
        ax.plot([sizes_of(r)[1] for r in mine], [number(r, "theory_peak_mib") for r in mine],
                ":", color=color, linewidth=0.8)
        oom = [r for r in mine if r["status"].startswith("out of memory")]
        if oom:
            ax.plot([sizes_of(r)[1] for r in oom], [number(r, "theory_peak_mib") for r in oom],
                    "X", color=color, ms=9, label=f"d {d} out of memory (at its accounting)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequence length")
    ax.set_ylabel("peak allocated (MiB)")
    ax.set_title(f"{args.title}: naive attention, peak memory (dotted: the accounting, a lower bound)",
                 fontsize=9)
    ax.legend(fontsize=6, ncol=2)
    save(fig, args.out, "attention_memory.png")


def plot_warmup(traced, tc_json, args):
    traced = [r for r in traced if r.get("hotpath_trace_ms")]
    if not traced:
        return
    tc = {(config(r), r["compiler"]): r for r in tc_json if r.get("trace_ms")}
    cols = min(3, len(traced))
    rows_n = (len(traced) + cols - 1) // cols
    fig, axes = plt.subplots(rows_n, cols, figsize=(5.2 * cols, 3.4 * rows_n), squeeze=False)
    for ax, r in zip(axes.flat, traced):
        hot = r["hotpath_trace_ms"]
        ax.plot(range(1, len(hot) + 1), hot, linewidth=0.9, label="hotpath (C++)")
        eager = r.get("eager_trace_ms") or []
        if eager:
            med = sorted(eager)[len(eager) // 2]
            ax.axhline(med, color="C1", linestyle="--", linewidth=0.9,
                       label=f"C++ eager (median {med:.3g} ms)")
        for k, mode in enumerate(("eager", "default", "reduce-overhead")):
            t = tc.get((config(r), mode))
            if t:
                ax.plot(range(1, len(t["trace_ms"]) + 1), t["trace_ms"], linewidth=0.7,
                        color=f"C{k + 2}", alpha=0.8,
                        label=f"Python {mode}" if mode == "eager" else f"torch.compile {mode}")
        ax.set_yscale("log")
        ax.set_xlabel("iteration")
        ax.set_ylabel("ms")
        ax.set_title(row_label(r, traced).replace("\n", " "), fontsize=8)
        ax.legend(fontsize=6)
    for ax in list(axes.flat)[len(traced):]:
        ax.axis("off")
    fig.suptitle(f"{args.title}: every iteration through warm-up, compile and steady state")
    save(fig, args.out, "warmup.png")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--suite", required=True)
    p.add_argument("--torch-compile")
    p.add_argument("--out", required=True)
    p.add_argument("--title", default="hotpath benchmark suite")
    p.add_argument("--traces", nargs="*", default=[],
                   help="bench_suite's JSON files (per-iteration times): warmup.png")
    p.add_argument("--torch-compile-json", help="torch_compile_suite.py's JSON, for warmup.png")
    args = p.parse_args()
    everything = rows(args.suite)
    ok = [r for r in everything if r.get("status") == "ok"]
    if not ok:
        p.error(f"{args.suite}: no row with status ok")
    for key in ("workload", "speedup", "governor_speedup", "eager_peak_mib", "hotpath_peak_mib"):
        if key not in ok[0]:
            p.error(f"{args.suite}: no column '{key}' (is it bench_suite's CSV?)")
    os.makedirs(args.out, exist_ok=True)
    tc = {}
    if args.torch_compile:
        for r in rows(args.torch_compile):
            tc[(config(r), r["compiler"])] = r
    plot_op_bench([r for r in ok if r["workload"] == "op_bench"], tc, args)
    plot_attention_memory([r for r in everything if r["workload"] == "attention_memory"], args)
    traced = [r for path in args.traces for r in json.load(open(path))]
    tc_json = json.load(open(args.torch_compile_json)) if args.torch_compile_json else []
    plot_warmup(traced, tc_json, args)
    suite = [r for r in ok if r["workload"] not in SWEEPS]
    if not suite:
        return 0
    configs = [config(r) for r in suite]
    names = [row_label(r, suite) for r in suite]
    x = range(len(names))

    # Speedups.
    series = [("hotpath / C++ eager", [number(r, "speedup") for r in suite])]
    for mode in ("default", "reduce-overhead"):
        if any((c, mode) in tc for c in configs):
            series.append((f"torch.compile {mode} / Python eager",
                           [number(tc[(c, mode)], "speedup_over_python_eager")
                            if tc.get((c, mode), {}).get("status") == "ok"
                            else FAILED if (c, mode) in tc else None
                            for c in configs]))
    fig, ax = plt.subplots(figsize=(1.8 + 1.6 * len(names), 4.2))
    width = 0.8 / len(series)
    for k, (label, values) in enumerate(series):
        xs = [i + (k - (len(series) - 1) / 2) * width for i in x]
        bars = ax.bar(xs, [v if v and v is not FAILED else 0 for v in values], width, label=label)
        for xi, v, b in zip(xs, values, bars):
            if v is None:  # not run for this configuration: no bar, no label
                continue
            failed = v is FAILED
            ax.text(xi, 0.03 if failed else v + 0.03, "failed" if failed else f"{v:.2f}x",
                    ha="center", va="bottom", fontsize=7, rotation=90 if failed else 0)
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
