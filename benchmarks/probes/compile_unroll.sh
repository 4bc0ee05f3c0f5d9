#!/usr/bin/env bash
# Probe (issue "An honest governor": break-even ≤ 20 steps after hot on an empty kernel cache):
# the tree before (a worktree of it in .base) and this one, side by side on one machine.
# - bench_fusion's chain and MLP cases of each tree in turns: the fused kernels' speed (the
#   64M-element chain against the copy of its bytes) and the NVRTC time of their programs;
# - bench_breakeven's fresh processes in turns: plain eager, then each tree on an empty cache
#   (cold), with the compile lines of its log;
# - then this tree's GPU tests of fused kernels and the differential harness on whole loops.
#   source .device-deps/gpu-env.sh; bash benchmarks/probes/compile_unroll.sh
# Environment: PROBE_RUNS (cold processes a tree, default 5), PROBE_FUSION_RUNS (default 2),
# PROBE_TESTS (1: run the tests after the benchmarks, default 1).
set -uo pipefail
OUTD=${OUT:-$PWD/probe_out}
mkdir -p "$OUTD"
RUNS=${PROBE_RUNS:-5}
t0=$(date +%s)
source "$(dirname "$0")/two_trees.sh"
build_two_trees "bench_breakeven bench_fusion train_diff test_fusion test_gpu" \
  "bench_breakeven bench_fusion" || exit 1

for i in $(seq "${PROBE_FUSION_RUNS:-2}"); do
  for t in base new; do
    bin=$(tree_bin $t)
    rm -rf "/tmp/bf_$t"
    HOTPATH_LOG_LEVEL=info timeout 120 $bin/benchmarks/bench_fusion --only chain --iters 200 \
      --cache "/tmp/bf_$t" >"$OUTD/fusion_chain_${t}_$i.txt" 2>&1
    HOTPATH_LOG_LEVEL=info timeout 120 $bin/benchmarks/bench_fusion --only mlp --iters 200 \
      --cache "/tmp/bf_$t" >"$OUTD/fusion_mlp_${t}_$i.txt" 2>&1
    echo "== $t $i"
    grep -vh "^hotpath" "$OUTD/fusion_chain_${t}_$i.txt" "$OUTD/fusion_mlp_${t}_$i.txt" | grep -v "^$" | tail -12 | cut -c1-200
    grep -hE "ready in" "$OUTD/fusion_chain_${t}_$i.txt" "$OUTD/fusion_mlp_${t}_$i.txt" | grep -v interpreter | cut -c1-200
  done
done
echo "fusion: $(($(date +%s) - t0)) s"

for i in $(seq "$RUNS"); do
  timeout 60 build-gpu/benchmarks/bench_breakeven --mode eager --json "$OUTD/be_eager_$i.json" >/dev/null 2>&1
  for t in base new; do
    bin=$(tree_bin $t)
    rm -rf "/tmp/pc_$t"
    HOTPATH_LOG_LEVEL=info timeout 60 $bin/benchmarks/bench_breakeven --label "$t-cold" --cache "/tmp/pc_$t" \
      --json "$OUTD/be_${t}_cold_$i.json" >"$OUTD/be_${t}_cold_$i.txt" 2>&1
  done
done
python3 benchmarks/breakeven_summary.py --show 40 "$OUTD"/be_*.json >"$OUTD/breakeven.txt" 2>&1
tail -8 "$OUTD/breakeven.txt"
for t in base new; do
  echo "$t cold compiles:"
  grep -h "kernel(s) ready in" "$OUTD"/be_${t}_cold_*.txt | sed 's/.*ready in/  ready in/' | cut -c1-160
done
echo "breakeven: $(($(date +%s) - t0)) s"

if [[ ${PROBE_TESTS:-1} == 1 ]]; then
  timeout 200 build-gpu/tests/test_gpu >"$OUTD/test_gpu.txt" 2>&1
  echo "test_gpu: exit $?"
  tail -3 "$OUTD/test_gpu.txt"
  timeout 100 build-gpu/tests/test_fusion >"$OUTD/test_fusion.txt" 2>&1
  echo "test_fusion: exit $?"
  tail -3 "$OUTD/test_fusion.txt"
  timeout 200 build-gpu/tests/train_diff --device cuda --models gpt,mlp,lm --variants plain \
    --dtypes fp32,bf16 --optimizers adamw >"$OUTD/train_diff.txt" 2>&1
  echo "train_diff: exit $?"
  grep -E "pass|FAIL" "$OUTD/train_diff.txt" | tail -8
fi
echo "total: $(($(date +%s) - t0)) s"
cd "$OUTD" && tar czf probe.tgz ./*.txt ./*.json && rm -f be_* fusion_*
