#!/usr/bin/env bash
# Probe (issue "Launch-bound loops"): the host's time an op while replaying, the tree before
# (a worktree of it in .base; carry it) against this one, in turns on one machine.
# probe_replay_host from each tree, PROBE_RUNS turns (default 4), which tree goes first
# alternating; then this tree's test_replay and train_diff on PROBE_MODELS (default mlp,gpt,lm).
#   git worktree add .base <rev>; source .device-deps/gpu-env.sh; bash benchmarks/probes/replay_host_ab.sh
set -uo pipefail
OUTD=${OUT:-$PWD/probe_out}
mkdir -p "$OUTD"
source "$(dirname "$0")/two_trees.sh"
build_two_trees "probe_replay_host test_replay train_diff" "probe_replay_host" || exit 1
RUNS=${PROBE_RUNS:-4}
STEPS=${PROBE_STEPS:-8000}
for ((i = 0; i < RUNS; ++i)); do
  order="base new"
  ((i % 2)) && order="new base"
  for t in $order; do
    echo -n "turn $i $t: "
    "$(tree_bin "$t")/benchmarks/probe_replay_host" --steps "$STEPS" 2>/dev/null | grep "^probe_replay_host" |
      tee -a "$OUTD/ab_$t.txt"
  done
done
"$(tree_bin new)/tests/test_replay" >"$OUTD/test_replay.txt" 2>&1
echo "test_replay rc=$?: $(tail -2 "$OUTD/test_replay.txt" | head -1)"
"$(tree_bin new)/tests/train_diff" --device cuda --models "${PROBE_MODELS:-mlp,gpt,lm}" \
  --dtypes fp32 --optimizers adamw >"$OUTD/train_diff.txt" 2>&1
echo "train_diff rc=$?"
grep -E "PASS|FAIL|within|worst" "$OUTD/train_diff.txt" | tail -12
