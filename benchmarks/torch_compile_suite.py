#!/usr/bin/env python3
"""The benchmark suite's workloads (benchmarks/bench_suite.cpp) in Python: eager, torch.compile
default and torch.compile mode="reduce-overhead", timed the way bench_suite times them.

The same workloads, shapes, dtypes and optimizer settings (defaults as bench_suite's). Per
workload and mode: the first call's seconds (compile), the steady median and IQR in ms per
iteration (CUDA events around each iteration, blocks of 10, after 10 warm-up iterations), the
speedup over Python eager, and the break-even iteration (the first n at which n compiled
iterations, the first call included, cost no more than n eager ones). A mode that fails (an
error, out of memory) gets its message as its status; the others go on. The sweeps op_bench and
attention_memory (--workloads) add a row per configuration, as bench_suite's do (their grids
narrowed on the command line: each configuration compiles anew).

  python3 benchmarks/torch_compile_suite.py [--workloads a,b] [--modes eager,default,reduce-overhead]
      [--iters 300] [--sweep-iters 20] [--csv FILE] [--json FILE]
      [--op-bench-ops ...] [--op-bench-batch ...] [--op-bench-seq ...] [--op-bench-dim ...]
      [--attn-mem-batch 8] [--attn-mem-dims ...] [--attn-mem-seqs ...]
      [--lm-size small] [--lm-mode step] [--lm-batch 4] [--lm-context 256] [--lm-bf16]
"""
import argparse
import csv
import json
import math
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def forward_only(fwd, *inputs):
    """The `make` of a workload that runs `fwd(*inputs)` without autograd."""

    def make(wrap):
        f = wrap(fwd)

        @torch.no_grad()
        def step():
            return f(*inputs)

        return step

    return make


def matmul_chain(n=2048, layers=4):
    x = torch.randn(n, n, device="cuda")
    w = [torch.randn(n, n, device="cuda") / math.sqrt(n) for _ in range(layers)]
    b = [torch.randn(n, device="cuda") for _ in range(layers)]

    def fwd(x, w, b):
        h = x
        for wi, bi in zip(w, b):
            h = torch.relu(h @ wi + bi)
        return h

    return f"x[{n},{n}] x {layers} layers", "fp32", "forward", forward_only(fwd, x, w, b)


def mlp_training(batch=256, dim=1024, hidden=4096):
    def make(wrap):
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim)).cuda()
        opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
        fwd = wrap(net)
        opt_step = wrap(opt.step)
        x = torch.randn(batch, dim, device="cuda")
        y = torch.randn(batch, dim, device="cuda")

        def step():
            opt.zero_grad(set_to_none=True)
            F.mse_loss(fwd(x), y).backward()
            opt_step()

        return step

    return f"batch {batch}, {dim}->{hidden}->{dim}", "fp32", "full AdamW step", make


def mixed_ops(batch=32, seq=512, dim=768):
    x = torch.randn(batch, seq, dim, device="cuda")
    gamma = torch.randn(dim, device="cuda")
    beta = torch.randn(dim, device="cuda")
    labels = torch.randint(dim, (batch * seq,), device="cuda")
    target = torch.randn(batch, seq, dim, device="cuda")

    def fwd(x):
        h = F.layer_norm(x, (dim,), gamma, beta)
        h = F.gelu(h) + h * torch.sigmoid(h)
        h = h * 0.5 + x
        return F.cross_entropy(h.view(-1, dim), labels) + F.mse_loss(h, target)

    return f"x[{batch},{seq},{dim}]", "fp32", "forward", forward_only(fwd, x)


def attention_block(batch=8, seq=1024, dim=512, heads=8):
    hd = dim // heads

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(dim)
            self.qkv = nn.Linear(dim, 3 * dim)
            self.out = nn.Linear(dim, dim)

        def forward(self, x):
            qkv = self.qkv(self.norm(x)).view(batch, seq, 3, heads, hd)
            q, k, v = (qkv.select(2, i).transpose(1, 2) for i in range(3))
            att = torch.softmax((q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd)), -1)
            y = (att @ v).transpose(1, 2).reshape(batch, seq, dim)
            return self.out(y) + x

    def make(wrap):
        torch.manual_seed(0)
        block = Block().cuda()
        fwd = wrap(block)
        x = torch.randn(batch, seq, dim, device="cuda")
        g = torch.randn(batch, seq, dim, device="cuda")

        def step():
            for p in block.parameters():
                p.grad = None
            fwd(x).backward(g)

        return step

    return f"x[{batch},{seq},{dim}], {heads} heads", "fp32", "forward + backward", make


def rope(batch=8, seq=2048, heads=16, head_dim=128):
    half = head_dim // 2
    q = torch.randn(batch, seq, heads, head_dim, device="cuda", dtype=torch.bfloat16)
    pos = torch.arange(seq, device="cuda", dtype=torch.float32).unsqueeze(1)
    freq = torch.pow(10000.0, -torch.arange(half, device="cuda", dtype=torch.float32) / half)
    angle = (pos * freq).view(1, seq, 1, half)
    cos, sin = angle.cos().bfloat16(), angle.sin().bfloat16()

    def fwd(q):
        even, odd = q[..., 0::2], q[..., 1::2]
        return torch.stack((even * cos - odd * sin, even * sin + odd * cos), -1).flatten(-2)

    return f"q[{batch},{seq},{heads},{head_dim}]", "bf16", "forward", forward_only(fwd, q)


def op_row(op, batch, seq, dim):
    """One row of the op_bench sweep (bench_suite's suite_sweeps.cpp): `op` over x[b, t, d]."""
    x = torch.randn(batch, seq, dim, device="cuda")
    shape = f"x[{batch},{seq},{dim}]"
    if op == "layer_norm":
        w, b = torch.randn(dim, device="cuda"), torch.randn(dim, device="cuda")
        return f"{op} {shape}", forward_only(lambda x: F.layer_norm(x, (dim,), w, b), x)
    if op == "gelu":
        return f"{op} {shape}", forward_only(F.gelu, x)
    if op == "swish":
        return f"swish (x * sigmoid(x)) {shape}", forward_only(lambda x: x * torch.sigmoid(x), x)
    if op == "mse":
        return f"{op} {shape}", forward_only(F.mse_loss, x, torch.randn_like(x))
    labels = torch.randint(dim, (batch * seq,), device="cuda")
    return f"{op} {shape}", forward_only(lambda x, t: F.cross_entropy(x.view(-1, dim), t), x,
                                         labels)


def attention_row(batch, seq, dim):
    """One row of the attention_memory sweep: naive attention, forward and backward."""
    q, k, v = (torch.randn(batch, seq, dim, device="cuda", requires_grad=True) for _ in range(3))
    g = torch.randn(batch, seq, dim, device="cuda")
    scale = 1.0 / math.sqrt(dim)

    def attend(q, k, v):
        return torch.softmax(q @ k.transpose(1, 2) * scale, -1) @ v

    def make(wrap):
        f = wrap(attend)

        def step():
            for t in (q, k, v):
                t.grad = None
            f(q, k, v).backward(g)

        return step

    return f"q,k,v[{batch},{seq},{dim}]", make


SWEEP = {  # bench_suite's defaults; the command line narrows them
    "op_bench_ops": ["layer_norm", "gelu", "swish", "mse", "cross_entropy"],
    "op_bench_batch": [16, 32, 64, 128], "op_bench_seq": [256, 512, 1024, 2048],
    "op_bench_dim": [64, 128, 256, 512, 1024],
    "attn_mem_batch": [8], "attn_mem_dims": [16, 32, 64, 128],
    "attn_mem_seqs": [256, 1024, 4096, 8192, 16384],
}


def sweep_rows(name):
    """Per row of a sweep, a function that makes it: (sizes, dtype, mode, make)."""
    def op_bench(op, b, t, d):
        sizes, make = op_row(op, b, t, d)
        return sizes, "fp32", "forward", make

    def attention(b, t, d):
        sizes, make = attention_row(b, t, d)
        return sizes, "fp32", "forward + backward", make

    if name == "op_bench":
        return [lambda op=op, b=b, t=t, d=d: op_bench(op, b, t, d)
                for op in SWEEP["op_bench_ops"] for b in SWEEP["op_bench_batch"]
                for t in SWEEP["op_bench_seq"] for d in SWEEP["op_bench_dim"]]
    b = SWEEP["attn_mem_batch"][0]
    return [lambda t=t, d=d: attention(b, t, d)
            for d in SWEEP["attn_mem_dims"] for t in SWEEP["attn_mem_seqs"]]


LM_SIZES = {  # width, layers, heads, feed-forward width (bench_suite's kLmSizes)
    "small": (768, 12, 12, 3072),
    "medium": (1024, 24, 16, 4096),
    "large": (1280, 36, 20, 5120),
    "xl": (1600, 48, 25, 6400),
    "2.7b": (2560, 32, 32, 10240),
}
LM = {"size": "small", "mode": "step", "batch": 4, "context": 256, "bf16": False}


def transformer_lm():
    from torch_compile_lm import Lm  # the same model as examples/models/transformer_lm.h

    dim, layers, heads, ff = LM_SIZES[LM["size"]]
    batch, context, vocab = LM["batch"], LM["context"], 10000
    backward, step_too = LM["mode"] != "forward", LM["mode"] == "step"

    def make(wrap):
        torch.manual_seed(0)
        model = Lm(vocab, dim, layers, heads, ff, context).cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        fwd = wrap(model)
        opt_step = wrap(opt.step)

        def step():
            x = torch.randint(vocab, (batch, context), device="cuda")
            y = torch.randint(vocab, (batch, context), device="cuda")
            opt.zero_grad(set_to_none=True)
            with torch.set_grad_enabled(backward), torch.autocast(
                    "cuda", dtype=torch.bfloat16, enabled=LM["bf16"]):
                loss = F.cross_entropy(fwd(x).view(-1, vocab), y.view(-1))
            if backward:
                loss.backward()
            if step_too:
                opt_step()

        return step

    mode = {"forward": "forward", "backward": "forward + backward", "step": "full AdamW step"}
    return (f"{LM['size']} ({dim}/{layers}/{heads}/{ff}), batch {batch} x context {context}",
            "bf16 autocast" if LM["bf16"] else "fp32", mode[LM["mode"]], make)


WORKLOADS = {
    "matmul_chain": matmul_chain,
    "mlp_training": mlp_training,
    "mixed_ops": mixed_ops,
    "attention_block": attention_block,
    "rope": rope,
    "transformer_lm": transformer_lm,
}
WRAPS = {
    "eager": lambda f: f,
    "default": lambda f: torch.compile(f),
    "reduce-overhead": lambda f: torch.compile(f, mode="reduce-overhead"),
}


def timed(step, n):
    """Per-iteration ms from CUDA events, in blocks of 10 with a synchronisation after each."""
    out = []
    for _ in range(0, n, 10):
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(10)]
        for a, b in ev:
            a.record()
            step()
            b.record()
        torch.cuda.synchronize()
        out += [a.elapsed_time(b) for a, b in ev]
    return out


def quantile(v, q):
    s = sorted(v)
    return s[int(q * (len(s) - 1) + 0.5)]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--workloads", default=",".join(WORKLOADS),
                   help="workloads, also the sweeps op_bench and attention_memory")
    p.add_argument("--modes", default=",".join(WRAPS))
    p.add_argument("--iters", type=int, default=300)
    p.add_argument("--sweep-iters", type=int, default=20, help="timed iterations of a sweep's row")
    for key, default in SWEEP.items():
        p.add_argument("--" + key.replace("_", "-"), default=",".join(map(str, default)),
                       help=f"the sweep's {key.split('_', 2)[-1]} (comma-separated)")
    p.add_argument("--lm-size", choices=list(LM_SIZES), default=LM["size"])
    p.add_argument("--lm-mode", choices=["forward", "backward", "step"], default=LM["mode"])
    p.add_argument("--lm-batch", type=int, default=LM["batch"])
    p.add_argument("--lm-context", type=int, default=LM["context"])
    p.add_argument("--lm-bf16", action="store_true")
    p.add_argument("--csv")
    p.add_argument("--json")
    args = p.parse_args()
    names = args.workloads.split(",")
    for n in names:
        if n not in WORKLOADS and n not in ("op_bench", "attention_memory"):
            p.error(f"unknown workload '{n}' (known: {', '.join(WORKLOADS)}, op_bench, "
                    "attention_memory)")
    for key in SWEEP:
        text = getattr(args, key)
        if key == "op_bench_ops":
            SWEEP[key] = text.split(",")
            for op in SWEEP[key]:
                if op not in ("layer_norm", "gelu", "swish", "mse", "cross_entropy"):
                    p.error(f"--op-bench-ops: unknown op '{op}'")
            continue
        try:
            SWEEP[key] = [int(v) for v in text.split(",")]
        except ValueError:
            p.error(f"--{key.replace('_', '-')} takes comma-separated integers")
        if any(v <= 0 for v in SWEEP[key]):
            p.error(f"--{key.replace('_', '-')} takes positive integers")
    modes = args.modes.split(",")
    for m in modes:
        if m not in WRAPS:
            p.error(f"unknown mode '{m}' (known: {', '.join(WRAPS)})")
    if args.iters < 10:
        p.error("--iters takes at least 10")
    if args.lm_batch <= 0 or args.lm_context <= 0:
        p.error("--lm-batch and --lm-context take positive integers")
    LM.update(size=args.lm_size, mode=args.lm_mode, batch=args.lm_batch,
              context=args.lm_context, bf16=args.lm_bf16)
    if not torch.cuda.is_available():
        print("torch_compile_suite needs a CUDA device", file=sys.stderr)
        return 1
    print(f"torch_compile_suite: torch {torch.__version__}, {torch.cuda.get_device_name()}",
          flush=True)
    rows = []
    # (workload, a function that makes the row, timed iterations): a workload's one, a sweep's
    # many, made one at a time.
    jobs = []
    for name in names:
        if name in WORKLOADS:
            jobs.append((name, WORKLOADS[name], args.iters))
        else:
            jobs += [(name, row, args.sweep_iters) for row in sweep_rows(name)]
    for k, (name, make_row, iters) in enumerate(jobs):
        try:
            sizes, dtype, mode_name, make = make_row()
        except torch.cuda.OutOfMemoryError as e:  # the inputs alone
            rows.append({"workload": name, "sizes": "", "compiler": "eager",
                         "status": f"OutOfMemoryError: {str(e).splitlines()[0][:200]}"})
            torch.cuda.empty_cache()
            continue
        if len(jobs) > 1:
            print(f"[{k + 1}/{len(jobs)}] {name} {sizes}", flush=True)
        eager_ms, eager_first = None, None
        for mode in modes:
            row = {"workload": name, "sizes": sizes, "dtype": dtype, "mode": mode_name,
                   "compiler": mode, "status": "ok"}
            try:
                torch._dynamo.reset()
                step = make(WRAPS[mode])
                t0 = time.perf_counter()
                step()
                torch.cuda.synchronize()
                first_s = time.perf_counter() - t0
                warm = timed(step, 10)
                ms = timed(step, iters)
                med = statistics.median(ms)
                row.update(first_call_s=first_s, median_ms=med,
                           iqr_ms=quantile(ms, 0.75) - quantile(ms, 0.25),
                           trace_ms=[first_s * 1000] + warm + ms)  # JSON only: the warm-up plot
                if mode == "eager":
                    eager_ms, eager_first = med, first_s
                if eager_ms:
                    row["speedup_over_python_eager"] = eager_ms / med
                    # n compiled iterations (the first call's seconds included) against n eager.
                    saving = eager_ms - med
                    extra = (first_s - (eager_first or 0)) * 1000
                    row["break_even_iteration"] = (
                        max(1, math.ceil(extra / saving)) if saving > 0 else -1)
            except Exception as e:  # an error or out of memory: a status, not a crash
                row["status"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
                torch.cuda.empty_cache()
            rows.append(row)
            speedup = (f"{row['speedup_over_python_eager']:.3f}x"
                       if "speedup_over_python_eager" in row else "no speedup (eager did not run)")
            print(f"{name:16s} {mode:16s} " + (
                f"first call {row['first_call_s']:.2f} s, median {row['median_ms']:.3f} ms"
                f" (IQR {row['iqr_ms']:.3f}), {speedup},"
                f" break-even {row.get('break_even_iteration', -1)}"
                if row["status"] == "ok" else row["status"]), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    if args.csv:
        cols = ["workload", "sizes", "dtype", "mode", "compiler", "first_call_s", "median_ms",
                "iqr_ms", "speedup_over_python_eager", "break_even_iteration", "status"]
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=cols)
            w.writeheader()
            for r in rows:
                w.writerow({c: r.get(c, "") for c in cols})
    return 0


if __name__ == "__main__":
    sys.exit(main())
