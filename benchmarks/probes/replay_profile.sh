#!/usr/bin/env bash
# Probe (issue "Launch-bound loops": where a replayed op's host time goes): the MLP example with a
# host sync per step, replayed for most of its steps, under `perf record` on the GPU machine, and
# perf's report by function (self time) with the annotation of hotpath's busiest functions.
# perf is not on that machine: build-probe/perfkit holds this machine's /usr/bin/perf and the
# shared libraries it needs beyond glibc and libstdc++ (carry it):
#   mkdir -p build-probe/perfkit; cp /usr/bin/perf build-probe/perfkit/
#   for l in $(ldd /usr/bin/perf | awk '/=>/ {print $3}'); do cp -L "$l" build-probe/perfkit/; done
#   (then remove libc, libm, libstdc++ and libgcc_s from it)
#   source .device-deps/gpu-env.sh; bash benchmarks/probes/replay_profile.sh
# Environment: PROFILE_STEPS (the example's --iterations, default 3000), PROFILE_BUILD (build dir,
# default build-gpu; built here when its example is missing); PROFILE_EXAMPLE and PROFILE_ARGS
# (another example and its arguments, e.g. convnet_classifier and "--epochs 1"; hotpath's
# environment variables pass through).
set -uo pipefail
OUTD=${OUT:-$PWD/probe_out}
mkdir -p "$OUTD"
KIT=$PWD/build-probe/perfkit
B=${PROFILE_BUILD:-$PWD/build-gpu}
EXAMPLE=${PROFILE_EXAMPLE:-mlp_training}
ARGS=${PROFILE_ARGS:---sync --iterations ${PROFILE_STEPS:-3000}}
if [[ ! -x $B/examples/$EXAMPLE ]]; then
  source "$(dirname "$0")/two_trees.sh"  # build_tree
  t0=$(date +%s)
  build_tree . "$B" "$EXAMPLE" || exit 1
  echo "build: $(($(date +%s) - t0)) s"
fi
export LD_LIBRARY_PATH="$KIT:${LD_LIBRARY_PATH:-}"
echo "perf_event_paranoid: $(cat /proc/sys/kernel/perf_event_paranoid)"
"$KIT/perf" --version || exit 1
# shellcheck disable=SC2086 # ARGS: the example's arguments, split
"$KIT/perf" record -F 2999 -o /tmp/replay.perf.data -- \
  "$B/examples/$EXAMPLE" $ARGS >"$OUTD/$EXAMPLE.txt" 2>"$OUTD/perf_record.txt" || {
  tail -20 "$OUTD/perf_record.txt"
  exit 1
}
grep -E "VERDICT|cross-check against|  host: " "$OUTD/$EXAMPLE.txt" | tail -5
"$KIT/perf" report -i /tmp/replay.perf.data --no-children --sort dso,symbol 2>/dev/null |
  grep "%" >"$OUTD/by_symbol.txt"
"$KIT/perf" report -i /tmp/replay.perf.data --no-children --sort dso 2>/dev/null |
  grep "%" >"$OUTD/by_library.txt"
head -15 "$OUTD/by_library.txt"
grep hotpath "$OUTD/by_symbol.txt" | head -40
# The annotation of hotpath's ten busiest functions.
grep libhotpath "$OUTD/by_symbol.txt" | head -10 | sed -E 's/.*\[\.\] //; s/[[:space:]]+-[[:space:]]+-[[:space:]]*$//; s/[[:space:]]+$//' |
  while IFS= read -r sym; do
    echo "=== $sym"
    "$KIT/perf" annotate -i /tmp/replay.perf.data --stdio -s "$sym" 2>/dev/null |
      grep -B8 -E '^ *([1-9]|[1-9][0-9])\.[0-9]+ :' | grep -vE '^ *0\.[0-9]+ :' | cut -c1-200 | head -150
  done >"$OUTD/annotate.txt"
