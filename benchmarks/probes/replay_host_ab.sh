#!/usr/bin/env bash
# Probe (issue "Launch-bound loops"): the host's time an op while replaying, the tree before
# (a worktree of it in .base; carry it) against this one, in turns on one machine.
# probe_replay_host from each tree, PROBE_RUNS turns (default 4), which tree goes first
# alternating; then this tree's test_replay and train_diff on PROBE_MODELS (default mlp,gpt,lm).
# PROBE_BASE_TESTS: a Catch2 test spec for test_replay that the tree before runs too (new tests
# copied into .base, to see whether they fail there).
#   git worktree add .base <rev>; source .device-deps/gpu-env.sh; bash benchmarks/probes/replay_host_ab.sh
set -uo pipefail
OUTD=${OUT:-$PWD/probe_out}
mkdir -p "$OUTD"
source "$(dirname "$0")/two_trees.sh"
base_targets="probe_replay_host"
[[ -n ${PROBE_BASE_TESTS:-} ]] && base_targets="$base_targets test_replay"
build_two_trees "probe_replay_host test_replay train_diff" "$base_targets" || exit 1
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
if [[ -n ${PROBE_BASE_TESTS:-} ]]; then
  "$(tree_bin base)/tests/test_replay" "$PROBE_BASE_TESTS" >"$OUTD/test_replay_base.txt" 2>&1
  echo "the tree before's test_replay \"$PROBE_BASE_TESTS\" rc=$?: $(tail -2 "$OUTD/test_replay_base.txt" | head -1)"
fi
"$(tree_bin new)/tests/train_diff" --device cuda --models "${PROBE_MODELS:-mlp,gpt,lm}" \
  --dtypes fp32 --optimizers adamw >"$OUTD/train_diff.txt" 2>&1
echo "train_diff rc=$?"
grep -E "PASS|FAIL|within|worst" "$OUTD/train_diff.txt" | tail -12
