#!/usr/bin/env bash
# Starts the ranks of a data-parallel job on this machine, as torchrun does: each process gets
# RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT, and
# OMP_NUM_THREADS=1 unless set (N ranks share the cores). Every line a rank prints is prefixed
# with its rank. When a rank fails the others are stopped (none is left waiting in a collective)
# and the launcher exits with the failed rank's status.
#
#   ddp_launch.sh [--nproc N] [--nnodes M --node-rank K] [--master-addr A] [--master-port P]
#                 -- PROGRAM [ARGS...]
#
# Across machines: run it on each of M machines with the same --nnodes M, --master-addr (machine
# 0's address, reachable from all) and --master-port, and --node-rank 0..M-1; ranks are
# K * N + local rank. The default port is a free one on this machine (a single machine's job).
set -euo pipefail
# usage [STATUS]: the comment above, on stdout for --help (status 0), else on stderr (status 2).
usage() {
  local text
  text=$(sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//')
  if [[ ${1:-2} == 0 ]]; then echo "$text"; else echo "$text" >&2; fi
  exit "${1:-2}"
}
nproc=2 nnodes=1 node_rank=0 addr=127.0.0.1 port=
while (($#)); do
  case $1 in
    --nproc) nproc=${2:-}; shift 2 ;;
    --nnodes) nnodes=${2:-}; shift 2 ;;
    --node-rank) node_rank=${2:-}; shift 2 ;;
    --master-addr) addr=${2:-}; shift 2 ;;
    --master-port) port=${2:-}; shift 2 ;;
    --) shift; break ;;
    -h|--help) usage 0 ;;
    *) echo "ddp_launch.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
(($#)) || { echo "ddp_launch.sh: no program after --" >&2; usage; }
for v in nproc nnodes; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "ddp_launch.sh: --$v must be a positive integer, got '${!v}'" >&2; exit 2; }
done
[[ $node_rank =~ ^[0-9]+$ ]] && ((node_rank < nnodes)) ||
  { echo "ddp_launch.sh: --node-rank must be in [0, $nnodes), got '$node_rank'" >&2; exit 2; }
if [[ -z $port ]]; then
  ((nnodes == 1)) || { echo "ddp_launch.sh: --master-port is needed with --nnodes > 1" >&2; exit 2; }
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
fi
[[ $port =~ ^[0-9]+$ ]] && ((port > 0 && port < 65536)) ||
  { echo "ddp_launch.sh: --master-port must be a port number, got '$port'" >&2; exit 2; }

world=$((nproc * nnodes))
pids=()
stop() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap 'stop; exit 130' INT TERM
for ((l = 0; l < nproc; ++l)); do
  r=$((node_rank * nproc + l))
  RANK=$r LOCAL_RANK=$l WORLD_SIZE=$world LOCAL_WORLD_SIZE=$nproc MASTER_ADDR=$addr \
    MASTER_PORT=$port OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} \
    "$@" > >(sed -u "s/^/[$r] /") 2>&1 &
  pids+=($!)
done
# Waits for every rank; the first that fails stops the rest.
status=0
running=("${pids[@]}")
while ((${#running[@]})); do
  still=()
  for p in "${running[@]}"; do
    if kill -0 "$p" 2>/dev/null; then
      still+=("$p")
      continue
    fi
    rc=0
    wait "$p" || rc=$?
    if ((rc != 0 && status == 0)); then
      echo "ddp_launch.sh: a rank exited with status $rc; stopping the others" >&2
      status=$rc
      stop
    fi
  done
  running=("${still[@]}")
  ((${#running[@]})) && sleep 0.2
done
exit "$status"
