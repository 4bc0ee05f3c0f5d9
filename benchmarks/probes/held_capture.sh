#!/usr/bin/env bash
# Probe (issue "An honest governor": break-even after hot with a warm cache): the tree before
# (a worktree of it in .base) and this one, side by side on one machine. bench_breakeven's fresh
# processes in turns (plain eager; each tree cold on an empty cache, then warm on the cache its
# cold run left), the MLP suite row of each tree, and this tree's replay tests on the GPU.
#   source .device-deps/gpu-env.sh; bash benchmarks/probes/held_capture.sh
set -uo pipefail
OUTD=${OUT:-$PWD/probe_out}; mkdir -p "$OUTD"
RUNS=${PROBE_RUNS:-5}
source "$(dirname "$0")/two_trees.sh"
build_two_trees "bench_breakeven bench_suite test_replay train_diff mlp_training" \
  "bench_breakeven bench_suite" || exit 1
if [[ ${PROBE_TESTS:-1} == 1 ]]; then
  timeout 240 build-gpu/tests/test_replay "[replay]" >"$OUTD/test_replay.txt" 2>&1; echo "test_replay: exit $?"; tail -3 "$OUTD/test_replay.txt"
fi
for i in $(seq "$RUNS"); do
  timeout 60 build-gpu/benchmarks/bench_breakeven --mode eager --json "$OUTD/be_eager_$i.json" >/dev/null 2>&1
  for t in base new; do
    bin=$(tree_bin $t)
    rm -rf "/tmp/pc_$t"
    timeout 60 $bin/benchmarks/bench_breakeven --label "$t-cold" --cache "/tmp/pc_$t" --json "$OUTD/be_${t}_cold_$i.json" >/dev/null 2>&1
    HOTPATH_LOG_LEVEL=info timeout 60 $bin/benchmarks/bench_breakeven --label "$t-warm" --cache "/tmp/pc_$t" --json "$OUTD/be_${t}_warm_$i.json" >"$OUTD/be_${t}_warm_$i.txt" 2>&1
  done
done
python3 benchmarks/breakeven_summary.py --show 24 "$OUTD"/be_*.json > "$OUTD/breakeven.txt" 2>&1
tail -6 "$OUTD/breakeven.txt"
grep -h "goes ahead" "$OUTD"/be_new_warm_*.txt | head -5
# The MLP example of this tree, on an empty cache and then on the cache it left (a known winner):
# its report's break-even.
rm -rf /tmp/pc_example
for n in cold warm; do
  HOTPATH_CACHE_DIR=/tmp/pc_example timeout 120 build-gpu/examples/mlp_training --iterations 600 >"$OUTD/example_$n.txt" 2>&1
  echo "example $n: $(grep -E 'goes ahead|break-even projected|^cross-check' "$OUTD/example_$n.txt" | cut -c1-220)"
done
for i in $(seq "${PROBE_SUITE_RUNS:-2}"); do
  for t in base new; do
    bin=$(tree_bin $t)
    rm -rf /tmp/ps; timeout 120 $bin/benchmarks/bench_suite --workloads mlp_training --iters 300 --cache /tmp/ps \
      --json "$OUTD/suite_${t}_$i.json" >"$OUTD/suite_${t}_$i.txt" 2>&1
    echo "$t: $(grep -E 'x measured' "$OUTD/suite_${t}_$i.txt")"
  done
done
if [[ ${PROBE_TESTS:-1} == 1 ]]; then
  timeout 150 build-gpu/tests/train_diff --device cuda --models gpt,mlp --variants plain --dtypes fp32 \
    --optimizers adamw >"$OUTD/train_diff.txt" 2>&1
  echo "train_diff: exit $?"; grep -E "pass|FAIL" "$OUTD/train_diff.txt" | tail -4
fi
cd "$OUTD" && tar czf probe.tgz be_* example_* $(ls suite_* test_replay.txt train_diff.txt 2>/dev/null) && rm -f be_* suite_*
