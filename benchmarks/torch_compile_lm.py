#!/usr/bin/env python3
"""The LM of benchmarks/bench_lm.cpp in Python: eager against torch.compile, timed the same way.

The same model (examples/models/transformer_lm.h: token and learned position embeddings,
pre-LayerNorm blocks of causal softmax attention with masked_fill(-inf) and a GELU MLP, a final
LayerNorm, a linear head), the same step (token batches drawn on the GPU, cross-entropy,
AdamW(1e-4)), the same shapes. For Python eager and for torch.compile (default mode; the model and
the optimizer step compiled):
  first-call seconds (compile), steady median ms per step with a host synchronisation per step
  (CUDA events), GPU-bound ms per step (steps queued behind a sleep kernel), and the kernels of
  one step from torch.profiler (top N; all of them with --kernels-csv).

  python3 benchmarks/torch_compile_lm.py [--batch 4] [--context 256] [--dim 768] [--layers 12]
      [--heads 12] [--ff 3072] [--vocab 10000] [--bf16] [--iters 60] [--top 30]
      [--kernels-csv FILE] [--csv FILE] [--modes eager,compile]
"""
import argparse
import csv
import math
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, dim, heads, ff):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.ln2 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.fc = nn.Linear(dim, ff)
        self.out = nn.Linear(ff, dim)

    def forward(self, x, mask):
        B, T, C = x.shape
        hd = C // self.heads
        q, k, v = self.qkv(self.ln1(x)).split(C, -1)
        q = q.view(B, T, self.heads, hd).transpose(1, 2)
        k = k.view(B, T, self.heads, hd).transpose(1, 2)
        v = v.view(B, T, self.heads, hd).transpose(1, 2)
        att = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = torch.softmax(att.masked_fill(mask, float("-inf")), -1)
        y = torch.matmul(att, v).transpose(1, 2).contiguous().view(B, T, C)
        h = x + self.proj(y)
        return h + self.out(F.gelu(self.fc(self.ln2(h))))


class Lm(nn.Module):
    def __init__(self, vocab, dim, layers, heads, ff, context):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(context, dim)
        self.blocks = nn.ModuleList([Block(dim, heads, ff) for _ in range(layers)])
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)
        self.register_buffer("mask", torch.ones(context, context, dtype=torch.bool).triu(1))

    def forward(self, idx):
        T = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))
        m = self.mask[:T, :T]
        for b in self.blocks:
            x = b(x, m)
        return self.head(self.ln(x))


def make_step(args, compiled):
    torch.manual_seed(0)
    model = Lm(args.vocab, args.dim, args.layers, args.heads, args.ff, args.context).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    forward = torch.compile(model) if compiled else model
    opt_step = torch.compile(opt.step) if compiled else opt.step

    def step():
        x = torch.randint(args.vocab, (args.batch, args.context), device="cuda")
        y = torch.randint(args.vocab, (args.batch, args.context), device="cuda")
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.bf16):
            logits = forward(x)
            loss = F.cross_entropy(logits.view(-1, args.vocab), y.view(-1))
        loss.backward()
        opt_step()

    return step


def timed(step, n):
    """Per-step ms from CUDA events, a host synchronisation after each step."""
    out = []
    for _ in range(n):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        step()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b))
    return out


def gpu_bound(step, n, host_ms):
    """Per-step GPU ms with the host out of the way: n steps queued behind a sleep kernel."""
    torch.cuda.synchronize()
    torch.cuda._sleep(int(host_ms * n * 1.5 * 2.0e6))
    events = [torch.cuda.Event(enable_timing=True) for _ in range(n + 1)]
    events[0].record()
    for i in range(n):
        step()
        events[i + 1].record()
    torch.cuda.synchronize()
    return [events[i].elapsed_time(events[i + 1]) for i in range(n)]


def kernels(step, n):
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            step()
        torch.cuda.synchronize()
    lines = {}
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        k = lines.setdefault(e.name, [0.0, 0.0])
        k[0] += e.device_time / n  # us
        k[1] += 1.0 / n
    return sorted(((us, calls, name) for name, (us, calls) in lines.items()), reverse=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--context", type=int, default=256)
    p.add_argument("--vocab", type=int, default=10000)
    p.add_argument("--dim", type=int, default=768)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--ff", type=int, default=3072)
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--iters", type=int, default=60)
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--modes", default="eager,compile")
    p.add_argument("--csv")
    p.add_argument("--kernels-csv")
    args = p.parse_args()
    for name in ("batch", "context", "vocab", "dim", "layers", "heads", "ff", "iters", "top"):
        if getattr(args, name) <= 0:
            p.error(f"--{name} takes a positive integer")
    if args.dim % args.heads:
        p.error(f"--dim {args.dim} is not a multiple of --heads {args.heads}")
    modes = args.modes.split(",")
    if any(m not in ("eager", "compile") for m in modes):
        p.error("--modes takes eager and/or compile")
    if not torch.cuda.is_available():
        print("torch_compile_lm needs a CUDA device", file=sys.stderr)
        return 1
    print(f"torch_compile_lm: torch {torch.__version__}, {torch.cuda.get_device_name()}, vocab "
          f"{args.vocab}, {args.layers} layers of width {args.dim} ({args.heads} heads, ff "
          f"{args.ff}), batch {args.batch} x context {args.context}, "
          f"{'bf16 autocast' if args.bf16 else 'fp32'}", flush=True)
    rows, kernel_rows = [], []
    for mode in modes:
        step = make_step(args, mode == "compile")
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        first_s = time.perf_counter() - t0
        timed(step, 5)  # warm-up (a recompile for the second call shows here, not in the median)
        ms = timed(step, args.iters)
        host = []
        for _ in range(5):
            torch.cuda.synchronize()
            t = time.perf_counter()
            step()
            host.append((time.perf_counter() - t) * 1e3)
            torch.cuda.synchronize()
        gb = gpu_bound(step, 10, max(statistics.median(host), 1.0))
        ks = kernels(step, 3)
        total_us = sum(k[0] for k in ks)
        n_kernels = sum(k[1] for k in ks)
        print(f"{mode}: first call {first_s:.1f} s; steady {statistics.median(ms):.3f} ms "
              f"(p10 {statistics.quantiles(ms, n=10)[0]:.3f}, p90 "
              f"{statistics.quantiles(ms, n=10)[-1]:.3f}); GPU-bound "
              f"{statistics.median(gb):.3f} ms; host {statistics.median(host):.3f} ms; "
              f"{n_kernels:.0f} kernels per step, {total_us / 1e3:.1f} ms of kernel time",
              flush=True)
        for us, calls, name in ks[: args.top]:
            short = name if len(name) <= 90 else name[:87] + "..."
            print(f"    {us:9.1f} us  {calls:5.1f} x  {short}")
        rows.append([mode, f"{first_s:.2f}", f"{statistics.median(ms):.4f}",
                     f"{statistics.median(gb):.4f}", f"{statistics.median(host):.4f}",
                     f"{n_kernels:.0f}", f"{total_us / 1e3:.3f}"])
        kernel_rows += [[mode, f"{us:.2f}", f"{calls:.2f}", name] for us, calls, name in ks]
    if len(rows) == 2:
        print(f"torch.compile over Python eager: steady {float(rows[0][2]) / float(rows[1][2]):.3f}x,"
              f" GPU-bound {float(rows[0][3]) / float(rows[1][3]):.3f}x")
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["mode", "first_call_s", "steady_ms", "gpu_bound_ms", "host_ms",
                        "kernels_per_step", "kernel_ms_per_step"])
            w.writerows(rows)
    if args.kernels_csv:
        with open(args.kernels_csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["mode", "us_per_step", "calls_per_step", "kernel"])
            w.writerows(kernel_rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
