#!/usr/bin/env bash
# The benchmark suite in parts, each a few minutes on one GPU; every part writes its rows (CSV,
# JSON) and its log under the output directory, and `plots` draws whatever rows are there.
#
#   benchmarks/run_suite.sh [--build DIR] [--out DIR] [PART ...]
#
# PARTs (default: all, in this order):
#   pieces            matmul_chain, mlp_training, mixed_ops, attention_block, rope
#   lm                transformer_lm (small, batch 4 x context 256, full AdamW step); HOTPATH_LM_CONFIGS
#                     runs others instead, ';' between them, e.g.
#                     "--lm-size small; --lm-size medium --lm-context 512 --lm-bf16"
#   op_bench          the op sweep (HOTPATH_OP_BENCH_ARGS: e.g. "--op-bench-dim 256,1024")
#   attention_memory  the attention memory sweep (HOTPATH_ATTN_MEM_ARGS: e.g. "--attn-mem-seqs
#                     256,32768")
#   torch_compile     the same pieces and LM in Python: eager, torch.compile default and
#                     reduce-overhead (HOTPATH_TORCH_COMPILE_ARGS, e.g. "--workloads op_bench
#                     --op-bench-dim 256,1024 --modes eager,default": the sweeps compile anew for
#                     every configuration)
#   plots             suite.csv (every part's rows) and the PNGs of plot_suite.py
# HOTPATH_SUITE_ARGS is added to every bench_suite call (e.g. "--iters 50").
# Needs a build with the benchmarks (bench_suite: CLI11, nlohmann-json), a GPU, and for
# torch_compile/plots Python with torch and matplotlib.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${BUILD_DIR:-$here/../build}
out=${OUT:-$PWD/suite_out}
parts=()
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    pieces|lm|op_bench|attention_memory|torch_compile|plots) parts+=("$1"); shift ;;
    *) echo "run_suite.sh: unknown part or option '$1' (--help lists them)" >&2; exit 2 ;;
  esac
done
((${#parts[@]})) || parts=(pieces lm op_bench attention_memory torch_compile plots)
suite=$build/benchmarks/bench_suite
mkdir -p "$out"
status=0

bench() {  # bench PART bench_suite-arguments...
  local part=$1; shift
  if [[ ! -x $suite ]]; then
    echo "run_suite.sh: no $suite (build the benchmarks first)" >&2
    return 2
  fi
  echo "== $part"
  # shellcheck disable=SC2086
  "$suite" "$@" ${HOTPATH_SUITE_ARGS:-} --csv "$out/$part.csv" --json "$out/$part.json" \
    2>&1 | tee "$out/$part.txt"
  return "${PIPESTATUS[0]}"
}

for part in "${parts[@]}"; do
  t0=$(date +%s)
  case $part in
    pieces) bench pieces --workloads matmul_chain,mlp_training,mixed_ops,attention_block,rope ;;
    lm)
      # One bench_suite call per configuration; their rows in lm.csv and lm.json.
      IFS=';' read -ra configs <<<"${HOTPATH_LM_CONFIGS:---lm-size small}"
      rc=0
      for k in "${!configs[@]}"; do
        # shellcheck disable=SC2086
        bench "lm_$k" --workloads transformer_lm ${configs[$k]} || rc=1
      done
      python3 - "$out" "${#configs[@]}" <<'PY' || rc=1
import csv, json, sys
out, n = sys.argv[1], int(sys.argv[2])
rows = []
for k in range(n):
    try:
        rows += list(csv.DictReader(open(f"{out}/lm_{k}.csv")))
    except FileNotFoundError:
        pass
if rows:
    with open(f"{out}/lm.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    json.dump(rows, open(f"{out}/lm.json", "w"), indent=1)
PY
      (exit $rc)
      ;;
    # shellcheck disable=SC2086
    op_bench) bench op_bench --workloads op_bench ${HOTPATH_OP_BENCH_ARGS:-} ;;
    # shellcheck disable=SC2086
    attention_memory) bench attention_memory --workloads attention_memory ${HOTPATH_ATTN_MEM_ARGS:-} ;;
    torch_compile)
      echo "== torch_compile"
      # shellcheck disable=SC2086
      python3 "$here/torch_compile_suite.py" ${HOTPATH_TORCH_COMPILE_ARGS:-} \
        --csv "$out/torch_compile.csv" --json "$out/torch_compile.json" 2>&1 |
        tee "$out/torch_compile.txt"
      ;;
    plots)
      echo "== plots"
      # Every part's rows in one table (one header).
      first=1
      : >"$out/suite.csv"
      for p in pieces lm op_bench attention_memory; do
        [[ -s $out/$p.csv ]] || continue
        if ((first)); then cat "$out/$p.csv"; else tail -n +2 "$out/$p.csv"; fi >>"$out/suite.csv"
        first=0
      done
      if ((first)); then
        echo "run_suite.sh: no rows to plot in $out (run a part first)" >&2
        false
      else
        tc=()
        [[ -s $out/torch_compile.csv ]] && tc=(--torch-compile "$out/torch_compile.csv")
        [[ -s $out/torch_compile.json ]] && tc+=(--torch-compile-json "$out/torch_compile.json")
        traces=()
        for j in "$out"/pieces.json "$out"/lm_*.json; do [[ -s $j ]] && traces+=("$j"); done
        ((${#traces[@]})) && tc+=(--traces "${traces[@]}")
        python3 "$here/plot_suite.py" --suite "$out/suite.csv" "${tc[@]}" --out "$out"
      fi
      ;;
  esac
  rc=$?
  echo "== $part: exit $rc, $(($(date +%s) - t0)) s"
  ((rc == 0)) || status=1
done
exit $status
