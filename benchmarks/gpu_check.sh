#!/usr/bin/env bash
# One call on the GPU machine: build, test, the differential harness, the example and the
# benchmarks; results under $OUT (or ./gpu_out). Run through the device tool as:
#   source .device-deps/gpu-env.sh; HOTPATH_COMMIT=<commit> bash benchmarks/gpu_check.sh
# after `EXTRA_DEBS="libcli11-dev nlohmann-json3-dev libgloo-dev" bash ../shared/device/prepare.sh`
# here (the build needs CLI11 and nlohmann-json for bench_suite, gloo's headers for ddp_training;
# the machine has none of them).
# HOTPATH_GPU_PARTS picks what runs after the build (default: all of them):
#   ctest diff verify fuzz faults programs example replay overhead fusion breakdown
# and, when asked for, cold (a fresh machine's first process, run first), resync, remember,
# verdicts, figure, breakeven, suite, compare, lm and ddp (see below).
# HOTPATH_GPU_TARGETS (e.g. "train_diff fuzz_programs") builds only those targets, where the parts
# asked for need no others (a fresh machine builds everything in about five minutes).
# A program that dies of a signal is run again under cuda-gdb (the machine has no gdb) and the
# backtraces of all threads are written next to its output.
set -uo pipefail
# Everything goes to $RES; the device tool returns at most 8 files, so $OUT gets the summaries
# and one archive of all of it.
FINAL=${OUT:-$PWD/gpu_out}
RES=/tmp/hotpath-gpu-results
rm -rf "$RES"; mkdir -p "$RES" "$FINAL"
OUT=$RES
trap 'tar -C "$RES" -czf "$FINAL/all_results.tgz" . ; cp "$RES"/env.txt "$RES"/train_diff.txt "$RES"/train_diff.csv "$RES"/programs.txt "$RES"/fuzz.txt "$RES"/ctest.log "$RES"/breakdown.txt "$RES"/compare.txt "$RES"/lm.txt "$RES"/verdicts.txt "$RES"/figure.txt "$RES"/breakeven.txt "$RES"/ddp.txt "$RES"/replay.txt "$RES"/remember.txt "$RES"/suite.csv "$RES"/suite.json "$FINAL"/ 2>/dev/null' EXIT
# What has been written so far goes back even if the call is cut short: the archive is made
# again after every program.
save() { tar -C "$RES" -czf "$FINAL/all_results.tgz" . 2>/dev/null; }
PARTS=${HOTPATH_GPU_PARTS:-ctest diff verify fuzz faults programs example replay overhead fusion breakdown}
want() { [[ " $PARTS " == *" $1 "* ]]; }
BUILD=${BUILD_DIR:-/tmp/hotpath-build}
{
  echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "device: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"
  echo "torch: $(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null)"
  # The device copy's git metadata can be stale: the caller may name the commit (HOTPATH_COMMIT).
  echo "git: ${HOTPATH_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null) (HEAD of the device copy)}"
} | tee "$OUT/env.txt"

t0=$(date +%s)
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
# shellcheck disable=SC2086 # HOTPATH_GPU_TARGETS: a list of targets, split
cmake --build "$BUILD" -j"$(nproc)" ${HOTPATH_GPU_TARGETS:+--target $HOTPATH_GPU_TARGETS} \
  >"$OUT/build.log" 2>&1 || { grep -m20 -A5 'error' "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
save

# run NAME CMD...: output to $OUT/NAME.txt, at most HOTPATH_RUN_LIMIT seconds (default 300); on a
# signal, backtraces to $OUT/NAME.crash.txt.
run() {
  local name=$1; shift
  timeout "${HOTPATH_RUN_LIMIT:-300}" "$@" >"$OUT/$name.txt" 2>&1
  local rc=$?
  echo "$name: exit $rc"
  save
  if (( rc > 128 )); then
    tail -5 "$OUT/$name.txt"
    timeout 300 cuda-gdb -q -batch -ex "set pagination off" -ex run -ex "thread apply all bt 25" \
      --args "$@" >"$OUT/$name.crash.txt" 2>&1
    grep -m1 -B2 -A25 "received signal" "$OUT/$name.crash.txt"
  fi
  return 0
}

# The cold start (issue "An honest governor"): what a fresh machine's first hotpath process pays.
# First after the build: the MLP example on an empty cache in a first and a second process, and a
# third after a pause, each with its NVRTC compiles' CPU time, system time and page faults (debug
# lines) and the process's own (rusage of the child).
# HOTPATH_COLD_PRETOUCH_GB=N first writes N GiB of fresh memory in a process of its own (does a
# machine's first touch of its memory, not NVRTC, make the first process's compile slow?).
if want cold; then
  export HOTPATH_CACHE_DIR=/tmp/hotpath-cold-cache
  if [[ -n ${HOTPATH_COLD_PRETOUCH_GB:-} ]]; then
    python3 -c '
import sys, time, numpy
t = time.time()
a = numpy.ones(int(float(sys.argv[1]) * (1 << 30)) // 8)
print("pretouch: %.1f GiB written in %.2f s" % (a.nbytes / (1 << 30), time.time() - t))' \
      "$HOTPATH_COLD_PRETOUCH_GB" 2>&1 | tee "$OUT/cold_pretouch.txt"
  fi
  for n in first second third; do
    [[ $n == third ]] && sleep 30
    rm -rf "$HOTPATH_CACHE_DIR"
    HOTPATH_LOG_LEVEL=debug python3 -c '
import resource, subprocess, sys, time
t = time.time()
subprocess.run(sys.argv[1:])
u = resource.getrusage(resource.RUSAGE_CHILDREN)
print("process: wall %.2f s, user %.2f s, system %.2f s, %d page faults, %d from disk"
      % (time.time() - t, u.ru_utime, u.ru_stime, u.ru_minflt, u.ru_majflt))' \
      "$BUILD"/examples/mlp_training --iterations 600 ${HOTPATH_COLD_ARGS:-} >"$OUT/cold_mlp_$n.txt" 2>&1
    echo "cold_mlp_$n: exit $?"
    grep -E "paged in|NVRTC compiled|kernel\(s\) ready|graph\(s\) in|cross-check|VERDICT|^process:" "$OUT/cold_mlp_$n.txt"
    save
  done
  unset HOTPATH_CACHE_DIR
fi

if want ctest; then
  # The CPU-only programs (the harness on CPU plans, the small examples) are CI's; here they
  # would only compete with the GPU tests for the cores.
  ctest --test-dir "$BUILD" --output-on-failure -j4 -E "_cpu$" --timeout 300 >"$OUT/ctest.log" 2>&1
  echo "ctest: exit $?  $(grep -E 'tests passed|tests failed' "$OUT/ctest.log")"
  grep -E "^[0-9]+/[0-9]+ Test.*(Failed|Timeout)" "$OUT/ctest.log" | head -20
  save
fi


# The differential harness: every model, variant, dtype and optimizer, eager and hotpath in one
# process against the noise floor measured there, every launch verified (HOTPATH_DIFF_ARGS adds
# or overrides arguments).
if want diff; then
  run train_diff "$BUILD"/tests/train_diff --device cuda --csv "$OUT/train_diff.csv" \
    --trace "$OUT/train_diff_trace.csv" ${HOTPATH_DIFF_ARGS:-}
  tail -60 "$OUT/train_diff.txt"
fi
# ... on request (resync), every step of every trainer started from eager's state: each step's
# own deviation, which a model whose training branches (MNIST) cannot show in a free run.
if want resync; then
  run train_diff_resync "$BUILD"/tests/train_diff --device cuda --resync \
    --csv "$OUT/train_diff_resync.csv" ${HOTPATH_DIFF_ARGS:-}
  tail -40 "$OUT/train_diff_resync.txt"
fi
# ... on request (remember), twice on one cache with --remember: the second run trains every model
# with its plans as known winners (hot at first sight, GPU plans built before their signatures are
# seen from the traces the first run kept, replay captured sooner), against eager as always.
if want remember; then
  rm -rf /tmp/hotpath-remember-cache
  for pass in first second; do
    run "train_diff_remember_$pass" "$BUILD"/tests/train_diff --device cuda \
      --cache /tmp/hotpath-remember-cache --remember ${HOTPATH_DIFF_ARGS:-}
    grep -E "^[a-z]+ +[a-z_]+ +(fp32|bf16)|remembered from|run\(s\):" \
      "$OUT/train_diff_remember_$pass.txt"
  done | tee "$OUT/remember.txt"
fi
# ... and the GPT's variants with every kernel launch checked against eager on its inputs.
if want verify; then
  run train_diff_verify "$BUILD"/tests/train_diff --device cuda --models gpt --optimizers adamw \
    --steps 60 --verify --csv "$OUT/train_diff_verify.csv"
  tail -20 "$OUT/train_diff_verify.txt"
fi
# Random programs against eager (HOTPATH_FUZZ_SECONDS, default 240), the regressions first.
# HOTPATH_FUZZ_SHARDS processes (default 8) share the GPU, each on seeds of its own (shard k from
# 1 + k * 10^7), the first replaying the regressions: one process runs about 5 programs a second
# (the host, not the GPU, is the limit), so a call reaches 10,000 programs. Their counts are added
# up in fuzz.csv and the last line of fuzz.txt. HOTPATH_FUZZ_ITERATIONS (default 6): iterations a
# program; 30 or more and its plan is replayed as CUDA graphs for the last ones. Shards 1, 4, 7,
# ... run with --stand-ins (no group kernels: the interpreter and eager ops stand in for them, as
# in a cold start's first iterations) unless HOTPATH_FUZZ_STAND_INS=0; shards 2, 5, 8, ... with
# --handover (the kernels held back, then let in part-way through, as a cold start gets them)
# unless HOTPATH_FUZZ_HANDOVER=0; shards 3, 6, ... with --actions (the governor's
# reconfigurations asked at random points) unless HOTPATH_FUZZ_ACTIONS=0; the odd shards also with
# --layers (a layer norm or cross entropy, then an rms norm or linear layer appended to each
# program) unless HOTPATH_FUZZ_LAYERS=0; the even shards but the first also with --layouts (a value
# transposed or resized in place, then read by fused ops) unless HOTPATH_FUZZ_LAYOUTS=0.
if want fuzz; then
  shards=${HOTPATH_FUZZ_SHARDS:-8}
  pids=()
  for ((k = 0; k < shards; k++)); do
    extra=()
    if ((k == 0)); then extra=(--replay tests/fuzz/regressions.txt); fi
    if ((k % 3 == 1)) && [[ ${HOTPATH_FUZZ_STAND_INS:-1} != 0 ]]; then extra+=(--stand-ins); fi
    if ((k % 3 == 2)) && [[ ${HOTPATH_FUZZ_HANDOVER:-1} != 0 ]]; then extra+=(--handover); fi
    if ((k > 0 && k % 3 == 0)) && [[ ${HOTPATH_FUZZ_ACTIONS:-1} != 0 ]]; then extra+=(--actions); fi
    if ((k % 2 == 1)) && [[ ${HOTPATH_FUZZ_LAYERS:-1} != 0 ]]; then extra+=(--layers); fi
    if ((k > 0 && k % 2 == 0)) && [[ ${HOTPATH_FUZZ_LAYOUTS:-1} != 0 ]]; then extra+=(--layouts); fi
    timeout $((${HOTPATH_FUZZ_SECONDS:-240} + 120)) "$BUILD"/tests/fuzz_programs --device cuda \
      --seed $((1 + k * 10000000)) --programs 10000000 --seconds "${HOTPATH_FUZZ_SECONDS:-240}" \
      --iterations "${HOTPATH_FUZZ_ITERATIONS:-6}" "${extra[@]}" --csv "$OUT/fuzz_$k.csv" \
      >"$OUT/fuzz_$k.txt" 2>&1 &
    pids+=($!)
  done
  rc=0
  for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
  {
    cat "$OUT"/fuzz_[0-9]*.txt | grep -vE "^fuzz_programs:"
    awk -F, 'FNR == 1 { header = $0; next }
             { n++; for (i = 2; i <= 10; i++) t[i] += $i; t[12] += $12; t[13] += $13; t[14] += $14; t[15] += $15; d = $1; it = $11 }
             END { printf "fuzz_programs: %d shard(s) on %s: %d program(s) (%d from the regressions file, %d with stand-ins for kernels, %d with kernels handed over, %d of them from a stand-in to a kernel, %d with governor actions), %d iterations each, %d with fused iterations, %d with iterations replayed as CUDA graphs, %d disagreement(s), %d within their noise floor only, %d group(s) codegen refused, %.1f s each\n", n, d, t[2], t[3], t[12], t[13], t[14], t[15], it, t[4], t[10], t[5], t[9], t[6], t[8] / (n ? n : 1) }' \
      "$OUT"/fuzz_[0-9]*.csv
  } >"$OUT/fuzz.txt"
  awk -F, 'FNR == 1 { if (NR == 1) print; next }
           { for (i = 2; i <= 10; i++) t[i] += $i; t[12] += $12; t[13] += $13; t[14] += $14; t[15] += $15; d = $1; it = $11; n++ }
           END { printf "%s,%d,%d,%d,%d,%d,%d,%.1f,%d,%d,%d,%d,%d,%d,%d\n", d, t[2], t[3], t[4], t[5], t[6], t[7], t[8] / (n ? n : 1), t[9], t[10], it, t[12], t[13], t[14], t[15] }' \
    "$OUT"/fuzz_[0-9]*.csv >"$OUT/fuzz.csv"
  echo "fuzz: exit $rc"
  save
  grep -E "DISAGREES|shrunk|within its noise|fuzz_programs:" "$OUT/fuzz.txt" | tail -16
fi
# Injected faults (NVRTC, launches) and 10,000 steps' memory, with their output.
if want faults; then
  run faults "$BUILD"/tests/test_gpu "[faults],[memory]" -s
  grep -E "memory over steps|test cases|assertions" "$OUT/faults.txt"
fi
# The example programs, full size, each with its cross-check against plain eager.
if want programs; then
  export HOTPATH_CACHE_DIR=/tmp/hotpath-programs-cache
  for p in mlp_training convnet_classifier dcgan transformer_lm; do
    run "program_$p" "$BUILD"/examples/$p
    grep -E "summary|cross-check|standing aside|VERDICT|replay:" "$OUT/program_$p.txt" | tail -7
  done | tee "$OUT/programs.txt"
  unset HOTPATH_CACHE_DIR
fi

# Data-parallel training (issue "Beyond one GPU"): two ranks started by ddp_launch.sh, NCCL where
# each has a GPU of its own, gloo where they share the one GPU (correctness only: their timings
# share it too). --verify checks the parameters between ranks, against eager data-parallel and
# against the same steps in one process, within 10x a noise floor measured in the same run; the
# training runs cross-check hotpath against plain eager data-parallel on every rank.
# HOTPATH_DDP_ARGS adds arguments to every run, HOTPATH_DDP_MODELS picks the models (default: mlp
# lm). (gloo needs libgloo-dev among EXTRA_DEBS.)
if want ddp; then
  gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
  backend=$([ "$gpus" -ge 2 ] && echo nccl || echo gloo)
  # shellcheck disable=SC2206 # HOTPATH_DDP_ARGS is a list of arguments
  ddp=(bash examples/ddp_launch.sh --nproc 2 -- "$BUILD"/examples/ddp_training --backend "$backend")
  more=(${HOTPATH_DDP_ARGS:-})
  {
    echo "ddp: $gpus GPU(s), backend $backend"
    for m in ${HOTPATH_DDP_MODELS:-mlp lm}; do
      run "ddp_verify_$m" "${ddp[@]}" --model "$m" --verify --steps 150 --diverge-step 60 "${more[@]}"
      grep -E "ddp verify|rank [0-9]:|step +floor| (ok|OUTSIDE the tolerance)$" "$OUT/ddp_verify_$m.txt"
      run "ddp_train_$m" "${ddp[@]}" --model "$m" --steps 200 --cross-check 100 "${more[@]}"
      grep -E "^\[0\] +[0-9]+ |ddp summary" "$OUT/ddp_train_$m.txt"
    done
  } | tee "$OUT/ddp.txt"
fi

# The governor on whole programs (issue "An honest governor"): a plan made slower on purpose
# (HOTPATH_FAULTS=slow:<ms>, common/faults.h) is reverted on the LM and loses its slow group on the
# MLP (HOTPATH_VERDICTS_SLOW=0 leaves these out); the MLP example's break-even after hot, three
# runs with a cold cache and three warm and one bare (below), each with the governor's judged
# speedup beside its cross-check.
if want verdicts; then
  export HOTPATH_CACHE_DIR=/tmp/hotpath-verdicts-cache
  rm -rf "$HOTPATH_CACHE_DIR"
  if [[ ${HOTPATH_VERDICTS_SLOW:-1} == 1 ]]; then
    HOTPATH_FAULTS=slow:${HOTPATH_SLOW_LM_MS:-60} HOTPATH_LOG_LEVEL=info run verdict_lm_slow \
      "$BUILD"/examples/transformer_lm --steps 150 --cross-check 0
    HOTPATH_FAULTS=slow:3 HOTPATH_LOG_LEVEL=info run verdict_mlp_slow \
      "$BUILD"/examples/mlp_training --iterations 300
  fi
  rm -rf "$HOTPATH_CACHE_DIR"
  # The iterations around the switch, cold then warm (per-iteration times in the debug log).
  HOTPATH_LOG_LEVEL=debug run switch_cold "$BUILD"/examples/mlp_training --iterations 200
  HOTPATH_LOG_LEVEL=debug run switch_warm "$BUILD"/examples/mlp_training --iterations 200
  rm -rf "$HOTPATH_CACHE_DIR"
  # bare: cold, and without the interpreter kernel prebuilt at build time (its directory moved
  # aside for the run), as on a device whose architecture the build did not compile it for.
  kernels="$BUILD/share/hotpath/kernels"
  for r in cold1 warm1 cold2 warm2 cold3 warm3 bare; do
    [[ $r == cold* || $r == bare ]] && rm -rf "$HOTPATH_CACHE_DIR"
    [[ $r == bare ]] && mv "$kernels" "$kernels.aside"
    HOTPATH_LOG_LEVEL=info run "breakeven_$r" "$BUILD"/examples/mlp_training --iterations 300
    [[ $r == bare ]] && mv "$kernels.aside" "$kernels"
  done
  {
    for f in verdict_lm_slow verdict_mlp_slow; do
      [[ -f "$OUT/$f.txt" ]] || continue
      echo "== $f"
      grep -E "loses|back to eager|reverted|plain eager .* per iteration|VERDICT|fused median .* vs" "$OUT/$f.txt" | head -12
    done
    for f in switch_cold switch_warm; do
      echo "== $f"
      grep -E "stand-in|standing in|kernel\(s\) ready|running from|iteration [0-9]+: |^VERDICT|reached at" "$OUT/$f.txt" | head -40
    done
    echo "== break-even of the MLP example (300 iterations), cold and warm cache"
    for r in cold1 warm1 cold2 warm2 cold3 warm3 bare; do
      echo "$r: $(grep -m1 -oE 'interpreter kernel for device 0 ready in [0-9.]+ ms' "$OUT/breakeven_$r.txt") | $(grep -m1 -oE 'hot at iteration [0-9]+, fused from iteration [0-9]+' "$OUT/breakeven_$r.txt") | $(grep -m1 -oE 'reached at iteration [0-9]+ \([0-9]+ after hot\)' "$OUT/breakeven_$r.txt") | $(grep -m1 -E '^VERDICT' "$OUT/breakeven_$r.txt") | cross-check $(grep -m1 -oE 'per iteration: [0-9.]+x' "$OUT/breakeven_$r.txt") | $(grep -m1 -oE 'replay: .*' "$OUT/breakeven_$r.txt")"
    done
  } | tee "$OUT/verdicts.txt"
  unset HOTPATH_CACHE_DIR
fi

# The governor's figure against the side-by-side, HOTPATH_FIGURE_RUNS processes in a row
# (default 10) of bench_suite on the host-bound MLP step and the GPU-bound mixed ops: one run says
# little on these hosts (the MLP's figure moved -10.6%..+24.3% between runs of one binary,
# benchmarks/results/2026-11-25-governor-trial.md). figure.txt: every row, then per workload how
# many runs were within 5%, the median difference and how often the interval covered the measured.
if want figure; then
  # Each run's JSON keeps every iteration of both sides (in the archive), so that a gap can be
  # traced to the iterations it comes from; HOTPATH_FIGURE_LOG=debug adds the governor's rounds.
  for i in $(seq "${HOTPATH_FIGURE_RUNS:-10}"); do
    HOTPATH_LOG_LEVEL=${HOTPATH_FIGURE_LOG:-warn} run "figure_$i" "$BUILD"/benchmarks/bench_suite \
      --workloads "${HOTPATH_FIGURE_WORKLOADS:-mlp_training,mixed_ops}" --iters 300 \
      --json "$OUT/figure_$i.json"
  done
  cat "$OUT"/figure_*.txt 2>/dev/null | grep -E "x measured; the governor judged" |
    python3 benchmarks/figure_summary.py --json "$OUT"/figure_*.json | tee "$OUT/figure.txt"
fi

# Break-even measured outside hotpath (bench_breakeven, breakeven_summary.py): fresh processes in
# turns, HOTPATH_BREAKEVEN_RUNS (default 6) of each: plain eager, hotpath on an empty cache (cold)
# and on the cache the cold one left (warm), each step timed from the process's first.
if want breakeven; then
  be_cache=/tmp/hotpath-breakeven-ab
  for i in $(seq "${HOTPATH_BREAKEVEN_RUNS:-6}"); do
    run "be_eager_$i" "$BUILD"/benchmarks/bench_breakeven --mode eager --json "$OUT/be_eager_$i.json"
    rm -rf "$be_cache"
    run "be_cold_$i" "$BUILD"/benchmarks/bench_breakeven --label cold --cache "$be_cache" \
      --json "$OUT/be_cold_$i.json"
    run "be_warm_$i" "$BUILD"/benchmarks/bench_breakeven --label warm --cache "$be_cache" \
      --json "$OUT/be_warm_$i.json"
  done
  # Once more each with --trace (labels of their own: the timed runs stay untouched): what hotpath
  # did in each step.
  rm -rf "$be_cache"
  HOTPATH_LOG_LEVEL=info HOTPATH_LOG_TIME=1 run be_cold_traced "$BUILD"/benchmarks/bench_breakeven --label cold-traced --cache "$be_cache" \
    --trace --json "$OUT/be_cold_traced.json"
  HOTPATH_LOG_LEVEL=info HOTPATH_LOG_TIME=1 run be_warm_traced "$BUILD"/benchmarks/bench_breakeven --label warm-traced --cache "$be_cache" \
    --trace --json "$OUT/be_warm_traced.json"
  python3 benchmarks/breakeven_summary.py --show "${HOTPATH_BREAKEVEN_SHOW:-30}" "$OUT"/be_*.json |
    tee "$OUT/breakeven.txt"
fi

# The benchmark suite (benchmarks/run_suite.sh) in the parts HOTPATH_SUITE_PARTS names (default:
# pieces lm torch_compile plots; also op_bench, attention_memory); its rows and plots under
# $OUT/suite/, suite.csv and suite.json (every bench_suite row) beside the summaries. The machine
# needs CLI11 and nlohmann-json: prepare with
# EXTRA_DEBS="libcli11-dev nlohmann-json3-dev" bash ../shared/device/prepare.sh.
if want suite; then
  # shellcheck disable=SC2086
  run suite env BUILD_DIR="$BUILD" bash benchmarks/run_suite.sh --out "$OUT/suite" \
    ${HOTPATH_SUITE_PARTS:-pieces lm torch_compile plots}
  grep -E "^== |x measured|out of memory|smallest|error" "$OUT/suite.txt" | head -80
  cp "$OUT/suite/suite.csv" "$OUT/suite.csv" 2>/dev/null
  python3 -c 'import csv, json, sys; json.dump(list(csv.DictReader(open(sys.argv[1]))), open(sys.argv[2], "w"), indent=1)' \
    "$OUT/suite.csv" "$OUT/suite.json" 2>/dev/null
fi

if want example; then
  # Twice: the first run compiles and records its verdict in the cache directory; the second
  # compiles the known winner at first sight from the cache.
  export HOTPATH_CACHE_DIR=/tmp/hotpath-example-cache
  rm -rf "$HOTPATH_CACHE_DIR"
  run mlp_training "$BUILD"/examples/mlp_training --iterations 1000
  cat "$OUT/mlp_training.txt"
  run mlp_training_second "$BUILD"/examples/mlp_training --iterations 1000
  sed -n '/hotpath report/,$p' "$OUT/mlp_training_second.txt"
  unset HOTPATH_CACHE_DIR
fi
# CUDA graph replay (issue "Launch-bound loops"): its tests on whole loops, then the MLP example
# with replay off and on, each cross-checked against plain eager in its process.
if want replay; then
  run replay_tests "$BUILD"/tests/test_replay -s
  grep -E "FAILED|failed|passed|test cases|assertions" "$OUT/replay_tests.txt" | tail -12
  export HOTPATH_CACHE_DIR=/tmp/hotpath-replay-cache
  # Each without and with a host sync per step (--sync: the loop reads its loss each step):
  # replay off, then on with each count of ops per graph in HOTPATH_REPLAY_GRAPH_SWEEP (default:
  # the default count; 0: one graph per stretch).
  for sync in "" --sync; do
    for g in off ${HOTPATH_REPLAY_GRAPH_SWEEP:-16}; do
      if [[ $g == off ]]; then
        name="replay_mlp_0${sync:+_sync}" r=0 g=16
      else
        name="replay_mlp_g$g${sync:+_sync}" r=1
      fi
      HOTPATH_REPLAY=$r HOTPATH_REPLAY_GRAPH_OPS=$g run "$name" "$BUILD"/examples/mlp_training \
        --iterations ${HOTPATH_REPLAY_ITERS:-600} $sync
      echo "HOTPATH_REPLAY=$r HOTPATH_REPLAY_GRAPH_OPS=$g $sync"
      grep -E "replay|cross-check|VERDICT|steady" "$OUT/$name.txt" | tail -8
    done
  done | tee "$OUT/replay.txt"
  unset HOTPATH_CACHE_DIR
fi
if want overhead; then
  run overhead_cuda "$BUILD"/benchmarks/bench_overhead --device cuda --csv "$OUT/overhead_cuda.csv"
  tail -6 "$OUT/overhead_cuda.txt"
  run overhead_cpu "$BUILD"/benchmarks/bench_overhead --device cpu --csv "$OUT/overhead_cpu.csv"
  tail -4 "$OUT/overhead_cpu.txt"
fi
if want fusion; then
  HOTPATH_LOG_LEVEL=info run fusion "$BUILD"/benchmarks/bench_fusion --iters 200 --csv "$OUT/fusion.csv"
  cat "$OUT/fusion.txt"
  # A second run finds every kernel in the on-disk cache.
  run fusion_second_run "$BUILD"/benchmarks/bench_fusion --iters 50
  grep -E "^mlp|^chain|compile" "$OUT/fusion_second_run.txt" | head -8
  # The MLP side by side again, three times (kernels cached): how much the speedup moves between runs.
  for k in 1 2 3; do
    run mlp_repeat_$k "$BUILD"/benchmarks/bench_fusion --only mlp --iters 300
    grep -E "^mlp|per-block|host time|interpreter only|divergences" "$OUT/mlp_repeat_$k.txt"
  done
fi
if want breakdown; then
  # Where the MLP step's time goes: GPU time with the host out of the way, host time, and the
  # kernels of one iteration from the CUDA profiler, eager and hotpath.
  run breakdown "$BUILD"/benchmarks/bench_fusion --only breakdown --iters 100
  grep -E "GPU-bound|host time|kernels," "$OUT/breakdown.txt"
fi
if want compare; then
  # Side by side with another commit: HOTPATH_COMPARE_SRC is its source tree (e.g. a git worktree
  # carried to the machine), HOTPATH_COMPARE_NAME its name. Both builds' examples (the MLP and the
  # LM, each with its cross-check against plain eager in its own process) run alternately,
  # HOTPATH_COMPARE_ROUNDS times (default 2), then the host-memory test of both, alone, twice.
  old=${BUILD}-compare
  name=${HOTPATH_COMPARE_NAME:-compare}
  t1=$(date +%s)
  { cmake -S "$HOTPATH_COMPARE_SRC" -B "$old" -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$OUT/compare_configure.log" 2>&1 &&
    cmake --build "$old" -j"$(nproc)" --target mlp_training transformer_lm test_fusion \
      >"$OUT/compare_build.log" 2>&1; } || { grep -m20 -A5 'error' "$OUT/compare_build.log"; exit 1; }
  echo "compare build ($name): $(( $(date +%s) - t1 )) s"
  export HOTPATH_CACHE_DIR=/tmp/hotpath-compare-cache
  for r in $(seq "${HOTPATH_COMPARE_ROUNDS:-2}"); do
    for p in mlp_training transformer_lm; do
      run "compare_${p}_${name}_$r" "$old"/examples/$p
      run "compare_${p}_new_$r" "$BUILD"/examples/$p
      for who in "$name" new; do
        echo "$p round $r $who: $(grep -E '^cross-check' "$OUT/compare_${p}_${who}_$r.txt" | sed 's/.*a side: //')"
      done
    done
  done | tee "$OUT/compare.txt"
  unset HOTPATH_CACHE_DIR
  for r in 1 2; do
    for who in "$name" new; do
      dir=$BUILD; [ "$who" = new ] || dir=$old
      "$dir"/tests/test_fusion "a long run keeps its host memory" -s 2>&1 |
        grep -E "before :=|after :=|test cases" | tr -s ' \n' ' ' | sed "s/^/memory $who $r: /"
      echo
    done
  done | tee -a "$OUT/compare.txt"
  save
fi
if want lm; then
  # The transformer issue's LM: C++ eager against hotpath (bench_lm: detection with and without
  # step(), steady side by side, GPU-bound and host time, kernels), then the same model in Python,
  # eager against torch.compile (benchmarks/torch_compile_lm.py), at each context of
  # HOTPATH_LM_CONTEXTS (default 256 1024); HOTPATH_LM_ARGS adds arguments to both (--bf16, sizes),
  # HOTPATH_LM_TAG to the result files' names (one call may run several sizes);
  # HOTPATH_LM_TORCH_COMPILE=0 leaves the Python side out.
  export HOTPATH_CACHE_DIR=/tmp/hotpath-lm-cache
  for t in ${HOTPATH_LM_CONTEXTS:-256 1024}; do
    tag="T$t${HOTPATH_LM_TAG:-}"
    echo "== lm $tag: ${HOTPATH_LM_ARGS:-(default sizes)}"
    run "lm_hotpath_$tag" "$BUILD"/benchmarks/bench_lm --context "$t" ${HOTPATH_LM_ARGS:-} \
      --csv "$OUT/lm_hotpath_$tag.csv" --kernels-csv "$OUT/lm_hotpath_kernels_$tag.csv"
    grep -E "^detection|^steady|governor:|GPU-bound|host time|^kernels per step" "$OUT/lm_hotpath_$tag.txt"
    [[ "${HOTPATH_LM_TORCH_COMPILE:-1}" == 0 ]] && continue
    run "lm_torch_compile_$tag" python3 benchmarks/torch_compile_lm.py --context "$t" \
      ${HOTPATH_LM_ARGS:-} --csv "$OUT/lm_torch_compile_$tag.csv" \
      --kernels-csv "$OUT/lm_torch_compile_kernels_$tag.csv"
    grep -E "^(eager|compile|torch.compile)" "$OUT/lm_torch_compile_$tag.txt"
  done | tee -a "$OUT/lm.txt"
  unset HOTPATH_CACHE_DIR
fi
