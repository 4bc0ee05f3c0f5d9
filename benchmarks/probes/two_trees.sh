# shellcheck shell=bash
# Sourced by the probes that run the tree before (a worktree of it in .base) beside this one on
# one machine: both trees built at once, and the build directory of each.
#   build_two_trees "this tree's targets" "the tree before's targets" || exit 1
#   "$(tree_bin base)"/benchmarks/bench_breakeven ...      (base: the tree before; new: this one)
build_tree() {  # build_tree TREE BUILD-DIR TARGET...
  local tree=$1 dir=$2
  shift 2
  if ! cmake -S "$tree" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$dir.configure.log" 2>&1; then
    tail -20 "$dir.configure.log"
    return 1
  fi
  if ! cmake --build "$dir" -j8 --target "$@" >"$dir.build.log" 2>&1; then
    tail -20 "$dir.build.log"
    return 1
  fi
}
build_two_trees() {
  local t0 a b
  t0=$(date +%s)
  # shellcheck disable=SC2086 # each argument is a list of targets
  build_tree . "$PWD/build-gpu" $1 &
  a=$!
  # shellcheck disable=SC2086
  build_tree .base "$PWD/build-base" $2 &
  b=$!
  wait $a || return 1
  wait $b || return 1
  echo "build: $(($(date +%s) - t0)) s"
}
tree_bin() { [[ $1 == base ]] && echo build-base || echo build-gpu; }
