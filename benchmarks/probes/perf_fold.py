#!/usr/bin/env python3
"""Folds `perf script -F comm,tid,ip,sym,dso` output (perf record -g) into what the hook costs.

Reads the script's text on stdin and prints, for replay_perf.sh:
- samples by thread;
- of the samples whose stack passes through the hook (a frame named HOOK, default
  hotpath_fallback): by the innermost hotpath frame (a frame whose object is libhotpath: its own
  time and what it calls outside hotpath), inclusive by hotpath function, and by leaf function.
"""
import collections
import re
import sys

HOOK = sys.argv[1] if len(sys.argv) > 1 else "hotpath_fallback"
TOP = 45


def samples(lines):
    head, frames = None, []
    for line in lines:
        if not line.strip():
            if head is not None:
                yield head, frames
            head, frames = None, []
            continue
        if not line[0].isspace():
            head, frames = line.strip(), []
            continue
        m = re.match(r"\s*[0-9a-f]+\s+(.*)\s+\((.*)\)\s*$", line)
        if m:
            frames.append((m.group(1).strip(), m.group(2)))
    if head is not None:
        yield head, frames


def short(sym):
    sym = re.sub(r"\(anonymous namespace\)::", "", sym)
    sym = sym.replace("hotpath::detail::", "")
    return sym[:140]


def main():
    threads = collections.Counter()
    total = 0
    hook = 0
    innermost = collections.Counter()
    inclusive = collections.Counter()
    leaf = collections.Counter()
    chains = collections.defaultdict(collections.Counter)  # innermost hotpath frame -> callees
    for head, frames in samples(sys.stdin):
        total += 1
        threads[head] += 1
        if not any(HOOK in s for s, _ in frames):
            continue
        hook += 1
        leaf[short(frames[0][0]) + "  [" + frames[0][1].split("/")[-1] + "]"] += 1
        at = next((i for i, (_, d) in enumerate(frames) if "hotpath" in d), None)
        own = frames[at][0] if at is not None else "?"
        innermost[short(own)] += 1
        # What it called outside hotpath, leaf last, and who called it (two frames up).
        below = [short(f)[:60] for f, _ in reversed(frames[:at])] if at else []
        above = [short(f)[:40] for f, _ in frames[at + 1:at + 3]] if at is not None else []
        chains[short(own)][" < ".join(above[::-1]) + " | " + (" > ".join(below[:4]) or "(self)")] += 1
        seen = set()
        for s, d in frames:
            if "hotpath" in d and s not in seen:
                seen.add(s)
                inclusive[short(s)] += 1
    print(f"{total} samples; by thread:")
    for t, n in threads.most_common(8):
        print(f"  {100.0 * n / total:6.2f}%  {t}")
    print(f"\n{hook} samples under {HOOK} ({100.0 * hook / max(total, 1):.2f}% of all)")
    for title, c in (("by the innermost hotpath frame (its time and its callees' outside hotpath)",
                      innermost), ("inclusive, by hotpath function", inclusive),
                     ("by leaf function", leaf)):
        print(f"\n{title}, % of the hook's samples:")
        for s, n in c.most_common(TOP):
            print(f"  {100.0 * n / max(hook, 1):6.2f}%  {s}")

    print("\nthe ten busiest innermost frames: their callers | what they called outside hotpath")
    for own, _ in innermost.most_common(10):
        print(f"  {own}")
        for c, n in chains[own].most_common(6):
            print(f"    {100.0 * n / max(hook, 1):6.2f}%  {c}")


if __name__ == "__main__":
    main()
