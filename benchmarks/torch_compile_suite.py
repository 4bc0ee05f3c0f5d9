#!/usr/bin/env python3
"""The benchmark suite's workloads (benchmarks/bench_suite.cpp) in Python: eager, torch.compile
default and torch.compile mode="reduce-overhead", timed the way bench_suite times them.

The same workloads, shapes, dtypes and optimizer settings (defaults as bench_suite's). Per
workload and mode: the first call's seconds (compile), the steady median and IQR in ms per
iteration (CUDA events around each iteration, blocks of 10, after 10 warm-up iterations), the
speedup over Python eager, and the break-even iteration (the first n at which n compiled
iterations, the first call included, cost no more than n eager ones). A mode that fails (an
error, out of memory) gets its message as its status; the others go on.

  python3 benchmarks/torch_compile_suite.py [--workloads a,b] [--modes eager,default,reduce-overhead]
      [--iters 300] [--csv FILE] [--json FILE]
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
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--modes", default=",".join(WRAPS))
    p.add_argument("--iters", type=int, default=300)
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
        if n not in WORKLOADS:
            p.error(f"unknown workload '{n}' (known: {', '.join(WORKLOADS)})")
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
    for name in names:
        sizes, dtype, mode_name, make = WORKLOADS[name]()
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
                ms = timed(step, args.iters)
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
            print(f"{name:16s} {mode:16s} " + (
                f"first call {row['first_call_s']:.2f} s, median {row['median_ms']:.3f} ms"
                f" (IQR {row['iqr_ms']:.3f}), {row.get('speedup_over_python_eager', 0):.3f}x,"
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
