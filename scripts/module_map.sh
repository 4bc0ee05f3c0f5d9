#!/usr/bin/env bash
# The module map: which module under src/ includes which (from the `#include "<module>/...` lines
# of its files), and whether it keeps to the flow (docs/design.md, "Modules"):
#   common → dispatch → trace → ir → fusion → codegen → compile → driver → exec → policy →
#   session → api
# A module may include the modules before it in that order and the floors: runtime/ (device
# helpers), the public headers (include/hotpath/) and common/; common/ itself includes only the
# public vocabulary (hotpath/error.h). Any other include is reported: it goes against the flow
# (and two of them make a cycle).
#   scripts/module_map.sh            prints the map (edges with how many includes make each)
#   scripts/module_map.sh --check    also fails on an include against the flow and on a source file
#                                    (src/, tests/, benchmarks/, examples/, tools/) over
#                                    $HOTPATH_MAX_LINES lines (default 600)
#   scripts/module_map.sh --dot      the map as Graphviz
# HOTPATH_MODULE_ROOT: the tree to look at (default: this checkout).
set -euo pipefail
cd "${HOTPATH_MODULE_ROOT:-$(dirname "$0")/..}"

order=(common dispatch trace ir fusion codegen compile driver exec policy session api)
mode=${1:-}
max_lines=${HOTPATH_MAX_LINES:-600}

rank() {
  local i
  for i in "${!order[@]}"; do
    if [ "${order[$i]}" = "$1" ]; then
      echo "$i"
      return
    fi
  done
  echo -1
}

# "from to header" per include of another module.
edges=$(for dir in src/*/; do
  from=$(basename "$dir")
  for f in "$dir"*.h "$dir"*.cpp; do
    [ -e "$f" ] || continue
    sed -n 's/^#include "\([a-z_]*\)\/\([^"]*\)".*/\1 \1\/\2/p' "$f" |
      while read -r to header; do
        [ "$to" = "$from" ] || echo "$from $to $header $f"
      done
  done
done)

bad=0
report_bad() {
  echo "module_map: $1" >&2
  bad=1
}

if [ -z "$edges" ]; then
  report_bad "no includes found under src/ (run from a checkout)"
fi
while read -r from to header file; do
  [ -n "$from" ] || continue
  fr=$(rank "$from")
  if [ "$fr" -lt 0 ]; then
    report_bad "$from/ is not in the flow's order (scripts/module_map.sh, docs/design.md)"
    continue
  fi
  case "$to" in
    runtime) continue ;;
    hotpath)
      if [ "$from" = common ] && [ "$header" != hotpath/error.h ]; then
        report_bad "$file includes $header: common/ takes only the public vocabulary (hotpath/error.h)"
      fi
      continue
      ;;
  esac
  tr=$(rank "$to")
  if [ "$tr" -lt 0 ]; then
    report_bad "$file includes $header: $to/ is not a module of the flow"
  elif [ "$tr" -gt "$fr" ]; then
    report_bad "$file includes $header: $from/ comes before $to/ in the flow"
  fi
done <<<"$edges"

pairs=$(awk 'NF { print $1, $2 }' <<<"$edges" | sort | uniq -c | awk '{ print $2, $3, $1 }')
if [ "$mode" = --dot ]; then
  echo "digraph modules {"
  echo "  rankdir=LR;"
  awk '{ printf "  \"%s\" -> \"%s\" [label=%s];\n", $1, $2, $3 }' <<<"$pairs"
  echo "}"
else
  echo "module map (module -> what it includes, with the number of #include lines):"
  for m in "${order[@]}"; do
    line=$(awk -v m="$m" '$1 == m { printf " %s(%s)", $2, $3 }' <<<"$pairs")
    printf '  %-8s ->%s\n' "$m" "${line:- (nothing)}"
  done
fi

if [ "$mode" = --check ]; then
  while read -r n f; do
    [ "$f" = total ] && continue
    if [ "$n" -gt "$max_lines" ]; then
      report_bad "$f has $n lines (at most $max_lines: split it by responsibility)"
    fi
  done < <(find src tests benchmarks examples tools \( -name '*.cpp' -o -name '*.h' -o -name '*.cuh' \) \
    2>/dev/null | sort | xargs -r wc -l)
  if [ "$bad" = 0 ]; then
    echo "module_map: every include keeps to the flow; no source file over $max_lines lines"
  fi
  exit "$bad"
fi
