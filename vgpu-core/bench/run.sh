#!/usr/bin/env bash
# Side-by-side per-call costs against the stub driver: no library, library without limits,
# library with limits; then cuInit latency with 32 processes starting at once.
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
LIB=$PWD/$BUILD/libvgpu.so
STUB=$PWD/$BUILD/stub
B=$PWD/$BUILD/tests/bench_calls
TMP=$(mktemp -d /tmp/vgpu-bench.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
for v in $(env | grep -o '^TESSERA_[A-Z_]*'); do unset "$v"; done
export LD_LIBRARY_PATH=$STUB LIB TMP

none() { "$@"; }
nolimit() { env LD_PRELOAD="$LIB" "$@"; }
limits() {
  env LD_PRELOAD="$LIB" TESSERA_SHARED_REGION="$TMP/region" TESSERA_VISIBLE_UUIDS=GPU-7e55e7a0-0000-0000-0000-000000000000 \
    TESSERA_MEMORY_LIMIT_MIB=8192 TESSERA_SM_LIMIT=50 TESSERA_QOS=fixed-share "$@"
}
# Median of 5 runs, to keep one noisy run on a shared 2-core machine from deciding the figure.
median() { for _ in 1 2 3 4 5; do "$@"; done | sort -n | sed -n 3p; }

printf '%-34s %14s %18s %18s\n' "ns per call (median of 5 runs)" "no library" "library, no limit" "library, limits"
a0=$(median none "$B" alloc 200000); a1=$(median nolimit "$B" alloc 200000); a2=$(median limits "$B" alloc 200000)
printf '%-34s %14s %18s %18s\n' "cuMemAlloc_v2 + cuMemFree_v2 pair" "$a0" "$a1" "$a2"
l0=$(median none "$B" launch 2000000); l1=$(median nolimit "$B" launch 2000000)
l2=$(median env BENCH_WARMUP_MS=2500 bash -c "$(declare -f limits); limits \"$B\" launch 2000000")
printf '%-34s %14s %18s %18s\n' "cuLaunchKernel (zero-length)" "$l0" "$l1" "$l2"

# 32 processes call cuInit at once: per-process cuInit time and wall time until all are done.
burst() {
  local mode=$1 out=$TMP/burst.$1 t0 t1
  rm -f "$out" "$TMP/region"
  t0=$(date +%s%N)
  for _ in $(seq 32); do $mode "$B" init >>"$out" & done
  wait
  t1=$(date +%s%N)
  sort -n "$out" | awk -v wall=$(((t1 - t0) / 1000)) '{v[NR]=$1; s+=$1} END {
    printf "%.0f / %.0f / %d", s/NR/1000, v[NR]/1000, wall }'
}
printf '%-34s %14s %18s %18s\n' "cuInit x32 at once: avg/max/wall µs" "$(burst none)" "$(burst nolimit)" "$(burst limits)"
