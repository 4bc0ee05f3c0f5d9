#!/usr/bin/env python3
"""Names the functions in probe_host_samples' stacks (addr2line, with inlined frames) and prints
where the samples inside hotpath's op hook went: each function's inclusive share (counted once
a sample) and its own (the stack's innermost frame).
  python3 host_samples.py samples.txt [--steps N --ops N --period-us US] [--top K]
With --steps, --ops (ops a step) and --period-us, shares are also given as microseconds an op."""
import argparse
import bisect
import collections
import subprocess


def load(path):
    maps, samples = [], []
    with open(path) as f:
        for line in f:
            if line.startswith("map "):
                parts = line[4:].split()
                if len(parts) < 6:
                    continue
                lo, hi = (int(v, 16) for v in parts[0].split("-"))
                maps.append((lo, hi, int(parts[2], 16), parts[5]))
            elif line.startswith("sample"):
                samples.append([int(a, 16) for a in line.split()[1:]])
    maps.sort()
    return maps, samples


def symbolize(maps, samples):
    starts = [m[0] for m in maps]
    wanted = collections.defaultdict(set)  # module -> offsets
    where = {}
    for s in samples:
        for k, a in enumerate(s):
            a = a - 1 if k > 0 else a  # a return address: the call is before it
            i = bisect.bisect_right(starts, a) - 1
            if i < 0 or a >= maps[i][1] or not maps[i][3].startswith("/"):
                where[(k > 0, s[k])] = None
                continue
            off = a - maps[i][0] + maps[i][2]
            wanted[maps[i][3]].add(off)
            where[(k > 0, s[k])] = (maps[i][3], off)
    names = {}
    for module, offs in wanted.items():
        offs = sorted(offs)
        try:
            out = subprocess.run(["addr2line", "-f", "-C", "-i", "-a", "-e", module] +
                                 [hex(o) for o in offs], capture_output=True, text=True,
                                 check=True).stdout.splitlines()
        except (OSError, subprocess.CalledProcessError):
            for o in offs:
                names[(module, o)] = [module.rsplit("/", 1)[-1] + "+" + hex(o)]
            continue
        cur = None
        i = 0
        while i < len(out):
            line = out[i]
            if line.startswith("0x"):
                cur = (module, int(line, 16))
                names[cur] = []
                i += 1
                continue
            fn = line
            i += 2  # function, then file:line
            if fn == "??":
                fn = module.rsplit("/", 1)[-1] + "+" + hex(cur[1])
            names[cur].append(fn)
    frames = []
    for s in samples:
        chain = []  # innermost first, inlined frames expanded
        for k, a in enumerate(s):
            w = where.get((k > 0, a))
            chain.extend(names.get(w, ["?"]) if w else ["?"])
        frames.append(chain)
    return frames


def short(name, width=110):
    return name if len(name) <= width else name[: width - 3] + "..."


def main():
    p = argparse.ArgumentParser()
    p.add_argument("samples")
    p.add_argument("--steps", type=int, default=0)
    p.add_argument("--ops", type=int, default=0)
    p.add_argument("--period-us", type=float, default=0)
    p.add_argument("--top", type=int, default=40)
    p.add_argument("--root", default="hotpath_fallback",
                   help="the function whose callees are shared out (default: the op hook)")
    p.add_argument("--wait", default="cudaStreamSynchronize",
                   help="samples with this function are the host waiting for the GPU (item()): "
                        "counted apart, not shared out")
    a = p.parse_args()
    maps, samples = load(a.samples)
    frames = symbolize(maps, samples)
    under = []
    waiting = 0
    for chain in frames:
        idx = next((i for i, fn in enumerate(chain) if a.root in fn), None)
        if idx is None:
            continue
        if a.wait and any(a.wait in fn for fn in chain[:idx]):
            waiting += 1
            continue
        under.append(chain[:idx + 1])
    n = len(under)
    per_op = a.period_us / (a.steps * a.ops) if a.steps and a.ops and a.period_us else 0
    scale = " (%.3f us an op)" % (n * per_op) if per_op else ""
    print("%d samples; in %s: %d%s, and %d more waiting in %s%s" %
          (len(samples), a.root, n, scale, waiting, a.wait,
           " (%.1f us a step)" % (waiting * a.period_us / a.steps) if per_op else ""))
    if n == 0:
        return
    incl = collections.Counter()
    own = collections.Counter()
    for chain in under:
        for fn in set(chain):
            incl[fn] += 1
        own[chain[0]] += 1

    def row(fn, c):
        us = "  %6.3f us" % (c * per_op) if per_op else ""
        return "  %5.1f%%%s  %s" % (100.0 * c / n, us, short(fn))

    print("inclusive (a function and what it calls, once a sample):")
    for fn, c in incl.most_common(a.top):
        print(row(fn, c))
    print("own (the innermost frame):")
    for fn, c in own.most_common(a.top):
        print(row(fn, c))


if __name__ == "__main__":
    main()
