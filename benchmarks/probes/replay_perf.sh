#!/usr/bin/env bash
# Probe (issue "Launch-bound loops"): where a replayed op's host time goes inside the hook.
# probe_replay_host (bench_overhead's replayed row alone) under `perf record -g`, hotpath built
# with frame pointers so that the time of what the hook calls (malloc, atomics, LibTorch's
# tensor code) is counted to the hook's function that called it. perf comes from this machine in
# build-probe/perfkit (carry it; replay_profile.sh says how to fill it).
#   source .device-deps/gpu-env.sh; bash benchmarks/probes/replay_perf.sh
# Environment: PERF_STEPS (default 30000), PERF_DELAY_MS (default 5000: perf starts recording
# that long after the program, past its start: cuBLAS's first GEMMs took a tenth of the hook's
# samples in a run recorded from the start), PERF_BUILD (default /tmp/hbfp).
set -uo pipefail
OUTD=${OUT:-$PWD/probe_out}
mkdir -p "$OUTD"
KIT=$PWD/build-probe/perfkit
B=${PERF_BUILD:-/tmp/hbfp}
t0=$(date +%s)
if [[ ! -x $B/benchmarks/probe_replay_host ]]; then
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS=-fno-omit-frame-pointer \
    >"$OUTD/configure.log" 2>&1 || { tail -20 "$OUTD/configure.log"; exit 1; }
  cmake --build "$B" -j16 --target probe_replay_host >"$OUTD/build.log" 2>&1 ||
    { tail -30 "$OUTD/build.log"; exit 1; }
fi
echo "build: $(($(date +%s) - t0)) s"
STEPS=${PERF_STEPS:-30000}
"$B/benchmarks/probe_replay_host" --steps "$STEPS" | tee "$OUTD/plain_run.txt"
export LD_LIBRARY_PATH="$KIT:${LD_LIBRARY_PATH:-}"
"$KIT/perf" record -D "${PERF_DELAY_MS:-5000}" -F 4999 -g -o /tmp/replay_host.perf.data -- \
  "$B/benchmarks/probe_replay_host" --steps "$STEPS" --no-eager >"$OUTD/perf_run.txt" 2>"$OUTD/perf_record.txt" ||
  { tail -20 "$OUTD/perf_record.txt"; exit 1; }
cat "$OUTD/perf_run.txt"
R=("$KIT/perf" report -i /tmp/replay_host.perf.data --stdio)
"${R[@]}" --no-children --sort dso 2>/dev/null | grep "%" >"$OUTD/by_library.txt"
"${R[@]}" --no-children --sort dso,symbol -g none 2>/dev/null | grep "%" >"$OUTD/self.txt"
"${R[@]}" --children --sort symbol -g none 2>/dev/null | grep "%" | head -150 >"$OUTD/children.txt"
# The hook's samples folded: by hotpath function and what it calls (perf_fold.py).
"$KIT/perf" script -i /tmp/replay_host.perf.data -F comm,tid,ip,sym,dso 2>/dev/null |
  python3 "$(dirname "$0")/perf_fold.py" >"$OUTD/hook_fold.txt"
head -12 "$OUTD/by_library.txt"
cat "$OUTD/hook_fold.txt"
