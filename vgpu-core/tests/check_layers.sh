#!/usr/bin/env bash
# Proves that vgpu-core's source directories (src/<dir>/) form layers: each directory may use only
# directories in layers below its own, so neither the include graph nor the calls between
# directories can have a cycle. Two graphs are checked, each against the layer order and for cycles:
#   includes: every `#include "..."` line of src/*/*.[ch] (include/tessera/, the ABI, is below all);
#             the same lines between files must not form a cycle either;
#   links:    with OBJDIR (build/obj), the symbols each object of src/<dir>/<name>.c, built as
#             OBJDIR/<dir>/<name>.o, takes from another directory's objects (nm).
# Prints the layers and both directory graphs. Needs bash, coreutils (realpath, tsort) and binutils.
# Usage: check_layers.sh [OBJDIR]
set -u
cd "$(dirname "$0")/.."
OBJDIR=${1:-}

# Bottom to top; directories on one line are peers and must not use each other.
LAYERS=(
  "common"      # log, contract parsing, the list of hooked and called symbols, the real-function tables
  "shared"      # the cross-process region and its slots' owners
  "process"     # start-up (once per process), process-wide state, this process's slot, card mapping
  "limits"      # memory accounting, pools, the SM limiter; registers its own fork handlers
  "cuda nvml"   # the hooks
  "intercept"   # how callers reach the hooks: the name -> hook table, dlsym, cuGetProcAddress
)

tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
: >"$tmp/file-includes"
declare -A layer_of
for i in "${!LAYERS[@]}"; do
  for d in ${LAYERS[$i]}; do layer_of[$d]=$i; done
done
fail=0

echo "layers, bottom to top (a directory uses only layers below its own):"
for i in "${!LAYERS[@]}"; do printf '  %d  %s\n' "$i" "${LAYERS[$i]}"; done

for d in src/*/; do
  d=${d#src/}; d=${d%/}
  if [ -z "${layer_of[$d]+x}" ]; then echo "src/$d is in no layer: add it to LAYERS in $0"; fail=1; fi
done

# check_graph NAME: reads "from-dir to-dir example" lines, prints the directory graph, and fails on
# an edge that does not go strictly down the layers or on a cycle.
check_graph() {
  local name=$1 edges
  edges=$(sort -u -k1,2)
  echo "$name graph between directories (from -> to, one example):"
  local from to example
  while read -r from to example; do
    [ -n "$from" ] || continue
    local mark=""
    if [ -z "${layer_of[$from]+x}" ] || [ -z "${layer_of[$to]+x}" ]; then
      mark="   <-- not in LAYERS"; fail=1
    elif [ "${layer_of[$to]}" -ge "${layer_of[$from]}" ]; then
      mark="   <-- $to is not below $from"; fail=1
    fi
    printf '  %-10s -> %-10s %s%s\n' "$from" "$to" "$example" "$mark"
  done <<<"$edges"
  cut -d' ' -f1,2 <<<"$edges" | check_acyclic "$name graph"
}

# check_acyclic WHAT: reads "from to" lines; fails and prints the loops tsort finds.
check_acyclic() {
  if ! tsort >/dev/null 2>"$tmp/tsort"; then
    echo "$1 has cycles (each loop as tsort reports it):"
    awk 'function out() {if (l && !seen[l]++) print "    " l " -> " first}
         /input contains a loop/ {out(); l = ""; next}
         {sub(/^tsort: /, ""); if (l) l = l " -> " $0; else l = first = $0} END {out()}' "$tmp/tsort"
    fail=1
  fi
}

# Include edges: a quoted include resolves against the including file's directory, then include/.
for f in src/*/*.[ch]; do
  from=${f#src/}; from=${from%%/*}
  sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f" | while read -r inc; do
    if [ -f "$(dirname "$f")/$inc" ]; then
      target=$(realpath -m --relative-to=. "$(dirname "$f")/$inc")
      case $target in
      src/*/*) to=${target#src/}; to=${to%%/*}
               echo "$f $target" >>"$tmp/file-includes"
               [ "$to" = "$from" ] || echo "$from $to $f->$target" ;;
      *) echo "$f includes $inc, outside src/ and include/" >&2; echo "$from outside $f->$inc" ;;
      esac
    elif [ ! -f "include/$inc" ]; then
      echo "$f includes \"$inc\", which resolves to no file" >&2; echo "$from unresolved $f->$inc"
    fi
  done
done >"$tmp/includes"
check_graph includes <"$tmp/includes"
check_acyclic "include graph between files" <"$tmp/file-includes"

# Link edges: an object's undefined symbol defined by an object in another directory. The objects
# are those of today's sources (a stale object of a moved file is not counted).
if [ -n "$OBJDIR" ]; then
  declare -A dir_of_sym
  objs=()
  for f in src/*/*.c; do
    o=$OBJDIR/${f#src/}; o=${o%.c}.o
    if [ -f "$o" ]; then objs+=("$o"); else echo "no object $o for $f: build first"; fail=1; fi
  done
  for o in "${objs[@]}"; do
    d=${o#"$OBJDIR"/}; d=${d%%/*}
    for s in $(nm -g --defined-only "$o" | awk '{print $3}'); do dir_of_sym[$s]=$d; done
  done
  for o in "${objs[@]}"; do
    from=${o#"$OBJDIR"/}; from=${from%%/*}
    for s in $(nm -u "$o" | awk '{print $2}'); do
      to=${dir_of_sym[$s]:-}
      if [ -n "$to" ] && [ "$to" != "$from" ]; then echo "$from $to ${o#"$OBJDIR"/}->$s"; fi
    done
  done >"$tmp/links"
  check_graph links <"$tmp/links"
fi

if [ $fail = 0 ]; then echo "no cycle; every dependency goes down the layers"; fi
exit $fail
