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


def parse_map(line):
    """A "map " line of /proc/self/maps as (low, high, file offset, path), or None."""
    parts = line[4:].split()
    if len(parts) < 6:
        return None
    lo, hi = (int(v, 16) for v in parts[0].split("-"))
    return (lo, hi, int(parts[2], 16), parts[5])


def module_offset(maps, starts, address, innermost):
    """(module, offset in it) of a sampled address (a return address but for the innermost frame:
    the call is before it), or None outside a file's mapping."""
    a = address if innermost else address - 1
    i = bisect.bisect_right(starts, a) - 1
    if i < 0 or a >= maps[i][1] or not maps[i][3].startswith("/"):
        return None
    return (maps[i][3], a - maps[i][0] + maps[i][2])


def names_of(keys):
    """Per (module, offset), its function names (addr2line -f -C -i: inlined frames first)."""
    wanted = collections.defaultdict(set)
    for k in keys:
        if k is not None:
            wanted[k[0]].add(k[1])
    names = {}
    for module, offs in wanted.items():
        offs = sorted(offs)
        short_name = module.rsplit("/", 1)[-1]
        try:
            out = subprocess.run(["addr2line", "-f", "-C", "-i", "-a", "-e", module] +
                                 [hex(o) for o in offs], capture_output=True, text=True,
                                 check=True).stdout.splitlines()
        except (OSError, subprocess.CalledProcessError):
            for o in offs:
                names[(module, o)] = [short_name + "+" + hex(o)]
            continue
        cur, i = None, 0
        while i < len(out):
            if out[i].startswith("0x"):
                cur = (module, int(out[i], 16))
                names[cur] = []
                i += 1
                continue
            names[cur].append(out[i] if out[i] != "??" else short_name + "+" + hex(cur[1]))
            i += 2  # the function, then file:line
    return names


def read_samples_file(path):
    """A sampler's file (sampler.h's write_samples): its memory map, sorted, and its other lines
    split into words."""
    maps, rest = [], []
    with open(path) as f:
        for line in f:
            if line.startswith("map "):
                m = parse_map(line)
                if m:
                    maps.append(m)
            else:
                rest.append(line.split())
    maps.sort()
    return maps, rest


def load(path):
    maps, rest = read_samples_file(path)
    return maps, [[int(a, 16) for a in w[1:]] for w in rest if w and w[0] == "sample"]


def symbolize(maps, samples):
    starts = [m[0] for m in maps]
    keyed = [[module_offset(maps, starts, a, k == 0) for k, a in enumerate(s)] for s in samples]
    names = names_of({key for s in keyed for key in s})
    return [[fn for key in s for fn in (names.get(key, ["?"]) if key else ["?"])]
            for s in keyed]


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
