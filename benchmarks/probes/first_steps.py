#!/usr/bin/env python3
"""Sums probe_first_steps' samples over many processes: per step, how much time each kind of
thread spent (the loop's, autograd's, hotpath's workers), and the functions where hotpath's
processes spent more than plain eager's, in microseconds a process (samples x period / runs).
  python3 first_steps.py --period-us 50 --eager E1.txt E2.txt ... --hotpath H1.txt H2.txt ...
    [--steps 4-6] [--top 25]
  python3 first_steps.py --period-us 50 --align capture --hotpath H1.txt ... [--steps -1:1]
With --align capture, each hotpath run's steps are numbered from the step it captured its CUDA
graphs in (0; runs without a capture are left out), and the capture step is set against the
step before it (the plan alone) instead of against plain eager.
Functions are named with addr2line (inlined frames expanded), each counted once a sample
(inclusive)."""
import argparse
import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from host_samples import module_offset, names_of, read_samples_file  # noqa: E402


def load(path):
    """Its samples as (step, kind, [(module, offset)]), innermost frame first, and the steps in
    which it captured CUDA graphs."""
    maps, rest = read_samples_file(path)
    threads, raw, captured = {}, [], []
    for w in rest:
        if w and w[0] == "thread":
            threads[int(w[1])] = " ".join(w[2:])
        elif w and w[0] == "captured":
            captured.append(int(w[1]))
        elif w and w[0] == "sample":
            raw.append((int(w[1]), int(w[2]), [int(a, 16) for a in w[3:]]))
    starts = [m[0] for m in maps]
    pid = min(threads) if threads else 0
    out = []
    for step, tid, addrs in raw:
        name = threads.get(tid, "")
        kind = ("loop" if tid == pid else "autograd" if name.startswith("pt_autograd")
                else "worker")
        frames = [module_offset(maps, starts, a, k == 0) for k, a in enumerate(addrs)]
        out.append((step, kind, frames))
    return out, captured


def steps_arg(text):
    """"4-6" or "-1:1" (with --align, steps around the capture are negative)."""
    a, _, b = text.partition(":") if ":" in text else text.partition("-")
    return range(int(a), int(b or a) + 1)


def clip(name, width=100):
    return name if len(name) <= width else name[: width - 3] + "..."


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--period-us", type=float, required=True)
    p.add_argument("--eager", nargs="+", default=[])
    p.add_argument("--align", choices=["capture"], default=None)
    p.add_argument("--hotpath", nargs="+", required=True)
    p.add_argument("--steps", type=steps_arg, default=None)
    p.add_argument("--top", type=int, default=25)
    a = p.parse_args()
    if not a.eager and not a.align:
        p.error("--eager is needed unless --align capture")
    runs = {"eager": [], "hotpath": []}
    for mode, files in (("eager", a.eager), ("hotpath", a.hotpath)):
        for f in files:
            r, captured = load(f)
            if a.align:
                if mode == "eager" or not captured:
                    continue
                r = [(s - captured[0], k, fr) for s, k, fr in r]
            runs[mode].append(r)
    if a.align:
        # The step before the capture stands where eager stood: the capture against the plan.
        runs["eager"] = [[(s + 1, k, fr) for s, k, fr in r if s == -1] for r in runs["hotpath"]]
        print("aligned on the capture step (0): %d runs captured; 'eager' below is each run's "
              "step -1 (the plan alone), set against its step 0" % len(runs["hotpath"]))
    if not runs["hotpath"] or not runs["eager"]:
        print("no runs to compare")
        return
    keys = {fr for rs in runs.values() for r in rs for _, _, frames in r for fr in frames}
    names = names_of(keys)
    # (mode, step, kind) -> samples; and -> Counter of function names (inclusive)
    total = collections.Counter()
    incl = collections.defaultdict(collections.Counter)
    for mode, rs in runs.items():
        for r in rs:
            for step, kind, frames in r:
                total[(mode, step, kind)] += 1
                fns = set()
                for fr in frames:
                    fns.update(names.get(fr, ["?"]) if fr else ["?"])
                incl[(mode, step, kind)].update(fns)
    steps = sorted({s for (_, s, _) in total})
    if a.steps is not None:
        steps = [s for s in steps if s in a.steps]
    per = {m: a.period_us / len(rs) for m, rs in runs.items()}  # us of a sample, a process
    print("us a process (samples x %.0f us / runs): eager %d runs, hotpath %d runs" %
          (a.period_us, len(runs["eager"]), len(runs["hotpath"])))
    for s in steps:
        row = []
        for kind in ("loop", "autograd", "worker"):
            e = total[("eager", s, kind)] * per["eager"]
            h = total[("hotpath", s, kind)] * per["hotpath"]
            row.append("%s eager %.0f hotpath %.0f" % (kind, e, h))
        print("step %d: %s" % (s, "; ".join(row)))
    for s in steps:
        for kind in ("loop", "autograd", "worker"):
            e, h = incl[("eager", s, kind)], incl[("hotpath", s, kind)]
            diff = {fn: h[fn] * per["hotpath"] - e[fn] * per["eager"] for fn in set(e) | set(h)}
            top = sorted(diff.items(), key=lambda kv: -kv[1])[: a.top]
            if not top or top[0][1] <= 0:
                continue
            print("\nstep %d, %s thread: functions where hotpath spent more (us a process, "
                  "hotpath - eager; hotpath's own in brackets)" % (s, kind))
            for fn, d in top:
                if d <= 0:
                    break
                print("  %8.1f  (%8.1f)  %s" % (d, h[fn] * per["hotpath"], clip(fn)))


if __name__ == "__main__":
    main()
