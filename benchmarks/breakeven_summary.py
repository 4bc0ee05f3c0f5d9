#!/usr/bin/env python3
"""Break-even measured outside hotpath, from bench_breakeven's runs (gpu_check.sh's `breakeven`).

Each FILE is one fresh process's first steps, timed one by one: plain eager (label "eager") or
with hotpath (any other label, e.g. "cold" and "warm"). Per label, each step's median over the
runs; then, per hotpath label, the step from which its running sum stays at or below eager's,
both summed from the step after it turned hot (the runs' median of the step in which it did,
`hot_step`; files without it, hotpath's own count, the signature's iterations): the
break-even, each step against plain eager's own step of the same number in a fresh process. Beside it, hotpath's own figure (its
report's break-even, the median over the runs). With --per-run, each hotpath run's own break-even
too, against the same eager medians from its own hot step: where the medians hide a spread (runs
that cross early and runs that cross late), the list shows it. With --releases, per label and per
reason a held capture was let go (the first "goes ahead (...)" line of the run's log, the FILE's
name ending in .txt instead of .json: ahead, behind, flat, held, or none), how many runs were
ahead of eager's step medians at some step after hot and behind them again at a later one (a
capture that cost more than the run's lead). Exits 1 when there is no eager run or no hotpath run.
"""
import argparse
import json
import os
import statistics
import sys


def median_steps(runs):
    n = min(len(r["steps_ms"]) for r in runs)
    return [statistics.median(r["steps_ms"][i] for r in runs) for i in range(n)]


def median_of(runs, key):
    values = [r[key] for r in runs if isinstance(r.get(key), int) and r[key] >= 0]
    return int(statistics.median(values)) if values else -1


def crossing(steps, eager, start):
    """The step (1-based) from which the running sum of `steps` stays at or below eager's, both
    summed from index `start` (the step after hot): start + 1 when it never was above, -1 when it
    still is at the end."""
    n = min(len(steps), len(eager))
    total_h = total_e = 0.0
    above = -1
    for i in range(start, n):
        total_h += steps[i]
        total_e += eager[i]
        if total_h > total_e:
            above = i + 1
    return -1 if above == n else (above + 1 if above >= 0 else start + 1)


# The release's reason, as the governor words it (policy/governor_replay.cpp).
RELEASES = (("ahead of eager", "ahead"), ("behind eager", "behind"), ("has not gained", "flat"),
            ("held for", "held"))


def release_of(path):
    """Why the run's held capture was let go, from the log beside its JSON file; None without
    a log."""
    log = path[:-len(".json")] + ".txt" if path.endswith(".json") else None
    if log is None or not os.path.exists(log):
        return None
    with open(log, encoding="utf-8", errors="replace") as f:
        for line in f:
            at = line.find("goes ahead (")
            if at < 0:
                continue
            why = line[at:]
            return next((name for words, name in RELEASES if words in why), "other")
    return "none"


def fell_back(steps, eager, start):
    """Whether the running sum of `steps` was at or below eager's at some step after `start` and
    above it again at a later one (both summed from index `start`)."""
    total_h = total_e = 0.0
    ahead = False
    for i in range(start, min(len(steps), len(eager))):
        total_h += steps[i]
        total_e += eager[i]
        if total_h <= total_e:
            ahead = True
        elif ahead:
            return True
    return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", help="bench_breakeven --json files")
    parser.add_argument("--show", type=int, default=20, help="steps shown one by one")
    parser.add_argument("--per-run", action="store_true",
                        help="each run's break-even after hot too, against eager's medians")
    parser.add_argument("--releases", action="store_true",
                        help="per reason a held capture was let go (from the runs' logs), the "
                             "runs that were ahead of eager and behind it again")
    args = parser.parse_args()
    by_label = {}
    for path in args.files:
        with open(path, encoding="utf-8") as f:
            run = json.load(f)
        run["path"] = path
        by_label.setdefault(run.get("label", run.get("mode")), []).append(run)
    eager_runs = by_label.pop("eager", [])
    if not eager_runs or not by_label:
        print("breakeven_summary: needs runs labelled eager and runs with hotpath", file=sys.stderr)
        return 1
    eager = median_steps(eager_runs)
    medians = {label: median_steps(runs) for label, runs in by_label.items()}
    shown = min([args.show, len(eager)] + [len(m) for m in medians.values()])
    labels = list(medians)
    print("step  eager(%d)  " % len(eager_runs) +
          "  ".join("%s(%d)" % (l, len(by_label[l])) for l in labels) + "   (ms, medians over runs)")
    for i in range(shown):
        print(f"{i + 1:4d}  {eager[i]:9.3f}  " +
              "  ".join(f"{medians[l][i]:{len(l) + 3}.3f}" for l in labels))
    for label in labels:
        steps = medians[label]
        n = min(len(steps), len(eager))
        # The process's steps where bench_breakeven recorded them; else hotpath's own counts (the
        # signature's iterations, which start where the detector found the loop).
        steps_known = all("hot_step" in r for r in by_label[label])
        hot = median_of(by_label[label], "hot_step" if steps_known else "hot_at")
        own = median_of(by_label[label], "governor_break_even")
        first = median_of(by_label[label], "fused_step" if steps_known else "first_fused")
        # From hot on: the step after the last one at which hotpath's running sum was still above
        # eager's (at hot itself when it never was; never when it still is at the end).
        # Summed from the step after hot, as hotpath's own break-even is: the steps before it
        # (the process's start, its first step alone some 300 ms that differ by tens between
        # processes, and the hook's cost while it watches) are no part of what fusing cost.
        crossed = crossing(steps, eager, max(hot, 0))
        steady = statistics.median(eager[n // 2:n]) / statistics.median(steps[n // 2:n])
        where = (f"step {crossed} ({crossed - hot} after hot)" if crossed >= 0 and hot >= 0
                 else f"step {crossed}" if crossed >= 0 else f"never within {n} steps")
        print(f"{label}: {len(by_label[label])} run(s), hot at step {hot}, fused from {first}; "
              f"break-even against plain eager's own first steps at {where}; hotpath's own "
              f"report: {own}; steady speedup {steady:.2f}x over the second half")
    if args.per_run:
        for label in labels:
            after = []
            for r in by_label[label]:
                own = r.get("hot_step", r.get("hot_at", -1))
                c = crossing(r["steps_ms"], eager, max(own, 0))
                after.append(c - own if c >= 0 and own >= 0 else None)
            known = sorted(a for a in after if a is not None)
            print(f"{label}: each run's break-even after hot, against eager's step medians: "
                  f"{', '.join(str(a) for a in known) or '-'}"
                  f"{f' (never within the run: {len(after) - len(known)})' if len(known) < len(after) else ''}")
    if args.releases:
        for label in labels:
            counts = {}
            for r in by_label[label]:
                why = release_of(r["path"])
                if why is None:
                    continue
                own = r.get("hot_step", r.get("hot_at", -1))
                runs, back = counts.get(why, (0, 0))
                counts[why] = (runs + 1, back + fell_back(r["steps_ms"], eager, max(own, 0)))
            if counts:
                print(f"{label}: captures let go, by reason: " + "; ".join(
                    f"{why} {runs} run(s), {back} of them ahead of eager and then behind again"
                    for why, (runs, back) in sorted(counts.items())))
    for label in labels:
        traced = [r for r in by_label[label] if r.get("trace")]
        if traced:
            print_trace(label, traced[0], shown)
    return 0


def print_trace(label, run, shown):
    """One run's steps (bench_breakeven --trace): what hotpath's main signature did in each."""
    print(f"{label}, first traced run, step by step: ms (GPU), host ms, state (H hot, R plan "
          "ready, C compiled), and what the step added: F fused iterations, L kernel launches, "
          "I of them on the interpreter, E groups run eagerly, D divergences, M cudaMalloc "
          "calls of the caching allocator, stall ms")
    before = {}
    for i, st in enumerate(run["trace"][:shown]):
        state = "".join(c for c, k in (("H", "hot"), ("R", "ready"), ("C", "compiled"))
                        if st.get(k)) or "-"
        added = []
        for key, tag in (("fused_iterations", "F"), ("launches", "L"), ("interpreted", "I"),
                         ("eager_runs", "E"), ("divergences", "D"), ("segments", "M")):
            d = st.get(key, 0) - before.get(key, 0)
            if d:
                added.append(f"{tag}{d}")
        stall = st.get("stall_ms", 0) - before.get("stall_ms", 0)
        if stall > 0:
            added.append(f"stall {stall:.2f}")
        host = run.get("host_ms", [])
        print(f"{i + 1:4d}  {run['steps_ms'][i]:8.3f}  "
              f"{host[i] if i < len(host) else float('nan'):8.3f}  {state:3s}  {' '.join(added)}")
        before = st


if __name__ == "__main__":
    sys.exit(main())
