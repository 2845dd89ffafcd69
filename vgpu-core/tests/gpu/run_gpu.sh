#!/usr/bin/env bash
# Runs the real-GPU checks with the library preloaded. Needs an otherwise idle GPU 0.
set -u
BIN=$1 LIB=$2
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
UUID=$(nvidia-smi --query-gpu=uuid --format=csv,noheader -i 0)
fail=0
run() { echo "-- $*"; env LD_PRELOAD="$LIB" TESSERA_SHARED_REGION="$TMP/region.$RANDOM" TESSERA_VISIBLE_UUIDS="$UUID" "$@" || fail=1; }
run TESSERA_MEMORY_LIMIT_MIB=2048 "$BIN" memory 2048
for pct in 10 30 50 90; do run TESSERA_SM_LIMIT=$pct TESSERA_QOS=fixed-share "$BIN" sm $pct; done
run TESSERA_SM_LIMIT=100 "$BIN" sm 100
[ $fail = 0 ] && echo "test-gpu: all passed" || { echo "test-gpu: FAILED"; exit 1; }
