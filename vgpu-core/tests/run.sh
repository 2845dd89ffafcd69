#!/usr/bin/env bash
# Runs the vgpu-core suite against the stub driver, with and without LD_PRELOAD.
# Prints one line per test and a summary; exits non-zero if anything failed.
# BUILD=build|build/san selects the build; SAN=1 preloads the sanitizer runtime first.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
SAN=${SAN:-0}
LIB=$PWD/$BUILD/libvgpu.so
STUB=$PWD/$BUILD/stub
T=$PWD/$BUILD/tests
TMP=$(mktemp -d /tmp/vgpu-test.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
for v in $(env | grep -o '^TESSERA_[A-Z_]*'); do unset "$v"; done
# The tests load the stub driver through their RUNPATH, which LD_LIBRARY_PATH outranks: on a machine
# with a real driver on LD_LIBRARY_PATH (CUDA images set it) they would load the real libcuda instead.
unset LD_LIBRARY_PATH

PRE=$LIB
if [ "$SAN" = 1 ]; then
  # The sanitizer runtime must come first in the preload list.
  PRE="$(${CC:-gcc} -print-file-name=libasan.so) $LIB"
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:exitcode=86
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:exitcode=87
fi
PASS=0; FAIL=0; SKIP=0; FAILED=()

# run NAME CMD...: runs CMD, records the result, shows the output on failure. Exit status 77 is a
# skip (tests/fixed_ns.sh when not root): counted apart, with the reason.
run() {
  local name=$1; shift
  local out=$TMP/out.$((PASS + FAIL + SKIP))
  "$@" >"$out" 2>&1
  local rc=$?
  if [ $rc = 0 ]; then
    PASS=$((PASS + 1)); printf 'ok    %s\n' "$name"
  elif [ $rc = 77 ]; then
    SKIP=$((SKIP + 1)); printf 'skip  %s\n      %s\n' "$name" "$(grep -m1 SKIP "$out")"
  else
    FAIL=$((FAIL + 1)); FAILED+=("$name"); printf 'FAIL  %s\n' "$name"; sed 's/^/      /' "$out" | tail -40
  fi
}
# skip NAME REASON: a test this pass cannot run.
skip() {
  SKIP=$((SKIP + 1)); printf 'skip  %s\n      SKIP: %s\n' "$1" "$2"
}

# expect_log NAME PATTERN CMD...: like run, and the output must also contain PATTERN.
expect_log() {
  local name=$1 pat=$2; shift 2
  run "$name" check_log "$pat" "$@"
}
check_log() {
  local pat=$1 log=$TMP/log.$RANDOM; shift
  "$@" >"$log" 2>&1; local rc=$?
  cat "$log"
  [ $rc = 77 ] && return 77
  [ $rc = 0 ] && grep -qF -- "$pat" "$log" || { echo "output lacks: $pat"; return 1; }
}

GIB=$((1 << 30)); MIB=$((1 << 20))
UUID0=GPU-7e55e7a0-0000-0000-0000-000000000000
UUID1=GPU-7e55e7a0-0000-0000-0000-000000000001
STUBENV=(TESSERA_STUB_MEMORY_MIB=4096)
# A container with one card limited to 1 GiB.
lim() {
  local n=$1; shift
  env "${STUBENV[@]}" LD_PRELOAD="$PRE" TESSERA_SHARED_REGION="$TMP/region.$n" TESSERA_VISIBLE_UUIDS=$UUID0 \
    TESSERA_MEMORY_LIMIT_MIB=1024 "$@"
}

echo "== vgpu-core tests ($BUILD) =="
if [ "$SAN" = 0 ]; then # the sanitizer build needs libasan, is not shipped, and has the same sources
  run "glibc: every imported symbol is GLIBC_2.17 or older (loads on Ubuntu 20.04, UBI 8)" \
    tests/check_glibc.sh "$LIB"
  # glibc 2.38+ headers turn the strtol and scanf families into __isoc23_* (GLIBC_2.38) under
  # _GNU_SOURCE: a build on a newer distribution would not load on older ones (seen on Ubuntu 24.04).
  run "glibc: src/ calls no strtol- or scanf-family function (GLIBC_2.38 symbols on newer build hosts)" \
    bash -c '! grep -rnE "\<(strto[a-z]*|v?f?s?scanf)[[:space:]]*\(" src'
  run "layers: each src/ directory includes and calls only the layers below it (no cycle)" \
    tests/check_layers.sh "$BUILD/obj"
fi
run "unit: limits contract parsing" env TEST_TMP="$TMP" "$T/unit_config"
run "unit: limits-file parser, randomised (80,000 mutated files, every value) against a model of the contract" \
  "$T/unit_config_fuzz"
run "unit: shared region (limit edge, saturation, dead lock holder, reclaim, pid reuse)" \
  env TEST_TMP="$TMP" "$T/unit_region"
run "unit: SM limiter maths (budget, own-time estimate, burst-share contention on either driver)" "$T/unit_sm"

for s in edge apis report unknown-free procaddr; do
  run "memory/$s without LD_PRELOAD (stub card 4 GiB)" \
    env "${STUBENV[@]}" EXPECT_LIMIT=$((4 * GIB)) EXPECT_HOOKED=0 "$T/t_memory" $s
  run "memory/$s with LD_PRELOAD (limit 1 GiB)" lim $s EXPECT_LIMIT=$GIB EXPECT_HOOKED=1 "$T/t_memory" $s
done
run "memory/edge with real driver named by TESSERA_REAL_CUDA_LIB" lim real \
  TESSERA_REAL_CUDA_LIB="$STUB/libcuda.so.1" TESSERA_REAL_NVML_LIB="$STUB/libnvidia-ml.so.1" \
  EXPECT_LIMIT=$GIB EXPECT_HOOKED=1 "$T/t_memory" edge
for s in edge procaddr; do
  run "memory/$s with LD_PRELOAD and no variables is pass-through" env "${STUBENV[@]}" LD_PRELOAD="$PRE" \
    EXPECT_LIMIT=$((4 * GIB)) EXPECT_HOOKED=1 "$T/t_memory" $s
done
printf 'version=1\nTESSERA_MEMORY_LIMIT_MIB=512\n' >"$TMP/limits.env"
run "memory/edge: limits file overrides the environment" lim file TESSERA_LIMITS_FILE="$TMP/limits.env" \
  EXPECT_LIMIT=$((512 * MIB)) EXPECT_HOOKED=1 "$T/t_memory" edge
for d in 0 1; do
  for s in edge apis report; do
    run "memory/$s on card $d of a two-card container (256,512 MiB)" env TESSERA_STUB_DEVICES=2 "${STUBENV[@]}" \
      LD_PRELOAD="$PRE" TESSERA_SHARED_REGION="$TMP/region.multi$d$s" TESSERA_VISIBLE_UUIDS=$UUID0,$UUID1 \
      TESSERA_MEMORY_LIMIT_MIB=256,512 TEST_DEVICE=$d EXPECT_LIMIT=$(((256 << d) * MIB)) EXPECT_HOOKED=1 \
      "$T/t_memory" $s
  done
done
# CUDA_VISIBLE_DEVICES reorders and subsets ordinals; limits follow the card (by UUID), not the ordinal.
for c in "1,0 0 512" "1,0 1 256" "$UUID1 0 512" "GPU-7e55e7a0-0000-0000-0000-000000000001,$UUID0 1 256"; do
  set -- $c
  for s in edge apis report; do
    run "memory/$s: CUDA_VISIBLE_DEVICES=${1:0:20}… ordinal $2 gets its card's limit ($3 MiB)" \
      env TESSERA_STUB_DEVICES=2 "${STUBENV[@]}" LD_PRELOAD="$PRE" TESSERA_SHARED_REGION="$TMP/region.vis$2$3$s" \
      TESSERA_VISIBLE_UUIDS=$UUID0,$UUID1 TESSERA_MEMORY_LIMIT_MIB=256,512 CUDA_VISIBLE_DEVICES=$1 TEST_DEVICE=$2 \
      EXPECT_LIMIT=$(($3 * MIB)) EXPECT_HOOKED=1 "$T/t_memory" $s
  done
done
# The stub sees only the cards of TESSERA_STUB_DEVICE_DIR (as the end-to-end harness's toolkit mounts
# them), with their own UUIDs: the limit follows the card's UUID.
mkdir -p "$TMP/devdir" && echo "GPU-0a0b0c0d-0000-4000-8000-000000000007 3072 40" >"$TMP/devdir/7"
for s in edge apis; do
  run "memory/$s on a card of TESSERA_STUB_DEVICE_DIR (its own UUID, 3 GiB card, 1 GiB limit)" env \
    TESSERA_STUB_DEVICE_DIR="$TMP/devdir" LD_PRELOAD="$PRE" TESSERA_SHARED_REGION="$TMP/region.devdir$s" \
    TESSERA_VISIBLE_UUIDS=GPU-0a0b0c0d-0000-4000-8000-000000000007 TESSERA_MEMORY_LIMIT_MIB=1024 \
    EXPECT_LIMIT=$GIB EXPECT_HOOKED=1 "$T/t_memory" $s
done
# A container given one MIG device: the driver shows the instance as its only CUDA device, with the
# instance's memory; cuDeviceGetUuid_v2 reports the MIG device's UUID (v1 its parent card's), and the
# agent lists that MIG UUID. The limit applies to the instance, also as NVML reports it.
MIGU=MIG-0a0b0c0d-0001-4000-8000-000000000003
mkdir -p "$TMP/migdir" && echo "$MIGU 4096 60 GPU-0a0b0c0d-0000-4000-8000-000000000003" >"$TMP/migdir/3"
for s in edge apis report; do
  run "memory/$s on a MIG device listed by its MIG UUID (4 GiB instance, 1 GiB limit)" env \
    TESSERA_STUB_DEVICE_DIR="$TMP/migdir" LD_PRELOAD="$PRE" TESSERA_SHARED_REGION="$TMP/region.mig$s" \
    TESSERA_VISIBLE_UUIDS=$MIGU TESSERA_MEMORY_LIMIT_MIB=1024 EXPECT_LIMIT=$GIB EXPECT_HOOKED=1 "$T/t_memory" $s
done
run "memory/edge on a MIG device given whole: the limit is the instance's memory (4 GiB)" env \
  TESSERA_STUB_DEVICE_DIR="$TMP/migdir" LD_PRELOAD="$PRE" TESSERA_SHARED_REGION="$TMP/region.migwhole" \
  TESSERA_VISIBLE_UUIDS=$MIGU TESSERA_MEMORY_LIMIT_MIB=4096 EXPECT_LIMIT=$((4 * GIB)) EXPECT_HOOKED=1 \
  "$T/t_memory" edge
expect_log "memory: a MIG device other than the container's is refused, naming it as a MIG device" \
  "CUDA device 0 is MIG device $MIGU, which is not in TESSERA_VISIBLE_UUIDS" env \
  TESSERA_STUB_DEVICE_DIR="$TMP/migdir" LD_PRELOAD="$PRE" TESSERA_SHARED_REGION="$TMP/region.migother" \
  TESSERA_VISIBLE_UUIDS=MIG-0a0b0c0d-0002-4000-8000-000000000003 TESSERA_MEMORY_LIMIT_MIB=1024 \
  "$T/t_memory" refuse-all
expect_log "memory: a device that is not one of the container's cards is refused, naming its UUID" \
  "CUDA device 0 is $UUID1, which is not in TESSERA_VISIBLE_UUIDS" env TESSERA_STUB_DEVICES=2 "${STUBENV[@]}" \
  LD_PRELOAD="$PRE" TESSERA_SHARED_REGION="$TMP/region.unlisted" TESSERA_VISIBLE_UUIDS=$UUID0 \
  TESSERA_MEMORY_LIMIT_MIB=1024 CUDA_VISIBLE_DEVICES=1 "$T/t_memory" refuse-all
for s in ctx-destroy primary-reset primary-release async-no-context pool-threshold set-limit vmm-mapped graph-node; do
  run "lifecycle/$s (limit 1 GiB)" lim "life$s" EXPECT_LIMIT=$GIB "$T/t_lifecycle" $s
done
run "lifecycle/async-device: two-card container (256,512 MiB)" env TESSERA_STUB_DEVICES=2 "${STUBENV[@]}" \
  LD_PRELOAD="$PRE" TESSERA_SHARED_REGION="$TMP/region.lifedev" TESSERA_VISIBLE_UUIDS=$UUID0,$UUID1 \
  TESSERA_MEMORY_LIMIT_MIB=256,512 "$T/t_lifecycle" async-device
run "lifecycle/context-reserve: 64 MiB per context counted (stub contexts take 64 MiB)" lim lifectx \
  TESSERA_STUB_CTX_MIB=64 TESSERA_CONTEXT_RESERVE_MIB=64 EXPECT_CONTEXT_MIB=64 EXPECT_LIMIT=$GIB \
  "$T/t_lifecycle" context-reserve
expect_log "memory: malformed limit fails closed and names the variable" 'TESSERA_MEMORY_LIMIT_MIB="12abc"' \
  env "${STUBENV[@]}" LD_PRELOAD="$PRE" TESSERA_SHARED_REGION="$TMP/region.bad" TESSERA_MEMORY_LIMIT_MIB=12abc \
  "$T/t_memory" refuse-all
expect_log "region: an unopenable shared region fails closed, naming the path and errno" \
  'cannot open shared region /nonexistent-tessera-dir/region: No such file or directory (errno 2)' \
  lim regionfail TESSERA_SHARED_REGION=/nonexistent-tessera-dir/region "$T/t_memory" region-fail
run "region: TESSERA_DEBUG_PRIVATE_REGION=1 runs with per-process limits instead" lim regiondebug \
  TESSERA_SHARED_REGION=/nonexistent-tessera-dir/region TESSERA_DEBUG_PRIVATE_REGION=1 EXPECT_LIMIT=$GIB \
  EXPECT_HOOKED=1 "$T/t_memory" edge

run "share: 2 processes x 400 rounds never exceed one limit" lim share2 EXPECT_LIMIT=$GIB "$T/t_share" 2 400
run "share: 8 processes x 100 rounds never exceed one limit" lim share8 EXPECT_LIMIT=$GIB "$T/t_share" 8 100
run "kill: a SIGKILLed process's memory comes back" lim kill EXPECT_LIMIT=$GIB "$T/t_kill"
run "slots: an exited, unreaped child's (zombie's) memory comes back" lim zombie EXPECT_LIMIT=$GIB "$T/t_slots" zombie
run "slots: a child that execs a program without the library gives its memory back" lim exec EXPECT_LIMIT=$GIB \
  "$T/t_slots" exec
run "slots: a child that execs into a program with the library gives the old image's memory back" lim execp \
  EXPECT_LIMIT=$GIB "$T/t_slots" exec-preloaded
# The sanitizer runtime's own dlopen interceptor (ahead of ours) makes itself the caller: RUNPATH only without it.
RUNPATH_LIB=(); [ "$SAN" = 1 ] || RUNPATH_LIB=(TEST_RUNPATH_LIB="$STUB/librunpath.so")
name="dlsym: RTLD_NEXT stays exact, driver symbols hooked"
[ "$SAN" = 1 ] || name+=", dlopen searches its caller's RUNPATH"
run "$name" env LD_PRELOAD="$PRE $STUB/libprobe.so" "${RUNPATH_LIB[@]}" "$T/t_dlsym_next"
run "dlsym: RTLD_NEXT stays exact with a preload ahead of us" env LD_PRELOAD="${PRE% *} $STUB/libprobe.so $LIB" \
  "${RUNPATH_LIB[@]}" "$T/t_dlsym_next"

# A tenant's escapes (docs/isolation.md, "What a tenant can and cannot escape"). In a Tessera container
# the agent mounts the limits file read-only at /var/run/tessera/limits.env and the region read-write at
# /var/run/tessera/region; tests/fixed_ns.sh mounts that layout in a private mount namespace, so the
# shipped library reads its compiled-in paths and the host's /var/run is never touched.
FIXED=$PWD/tests/fixed_ns.sh
REGION_SIZE=$("$T/t_escape" region-size)
# agent_dir NAME LINE...: a container directory as the agent writes it: the limits file (version=1, then
# the lines) and the region, zero-filled at its exact size.
agent_dir() {
  local d=$TMP/agent.$1; shift
  mkdir -p "$d"; printf '%s\n' version=1 "$@" >"$d/limits.env"; truncate -s "$REGION_SIZE" "$d/region"; echo "$d"
}
AGENT=(TESSERA_VISIBLE_UUIDS=$UUID0 TESSERA_MEMORY_LIMIT_MIB=1024 TESSERA_SM_LIMIT=100 TESSERA_QOS=fixed-share
  TESSERA_SHARED_REGION=/var/run/tessera/region TESSERA_LOG_LEVEL=warn)
d=$(agent_dir env "${AGENT[@]}")
OVERRIDES="TESSERA_MEMORY_LIMIT_MIB TESSERA_LIMITS_FILE TESSERA_REAL_CUDA_LIB TESSERA_REAL_NVML_LIB"
expect_log \
  "escape/env: TESSERA_LIMITS_FILE=/dev/null, TESSERA_MEMORY_LIMIT_MIB=0, another driver: the agent's 1 GiB holds" \
  "ignored environment overrides: $OVERRIDES" \
  "$FIXED" "$d" env "${STUBENV[@]}" LD_PRELOAD="$PRE" TESSERA_LIMITS_FILE=/dev/null TESSERA_MEMORY_LIMIT_MIB=0 \
  TESSERA_SM_LIMIT=100 TESSERA_REAL_CUDA_LIB=/nonexistent/libcuda.so.1 TESSERA_REAL_NVML_LIB=/nonexistent/libnvml.so \
  EXPECT_LIMIT=$GIB EXPECT_HOOKED=1 "$T/t_memory" edge
d=$(agent_dir own "${AGENT[@]}")
run "escape/own-region: a TESSERA_SHARED_REGION per process still shares the agent's region (3/4 + 3/4 refused)" \
  "$FIXED" "$d" env "${STUBENV[@]}" LD_PRELOAD="$PRE" TESSERA_LIMITS_FILE=/dev/null TESSERA_MEMORY_LIMIT_MIB=1024 \
  TESSERA_SHARED_REGION="$TMP/own.parent" TEST_CHILD_ENV="TESSERA_SHARED_REGION=$TMP/own.child" EXPECT_LIMIT=$GIB \
  "$T/t_escape" share
d=$(agent_dir private "${AGENT[@]}")
run "escape/private-region: TESSERA_DEBUG_PRIVATE_REGION=1 in the env does not give each process the limit" \
  "$FIXED" "$d" env "${STUBENV[@]}" LD_PRELOAD="$PRE" TESSERA_LIMITS_FILE=/dev/null TESSERA_MEMORY_LIMIT_MIB=1024 \
  TESSERA_SHARED_REGION=/nonexistent-tessera-dir/region TESSERA_DEBUG_PRIVATE_REGION=1 EXPECT_LIMIT=$GIB \
  "$T/t_escape" share
d=$(agent_dir corrupt "${AGENT[@]}")
# magic "TESSERA1", layout version 99 written over the agent's region, as a tenant could
printf '1ARESSETc\0\0\0' | dd of="$d/region" conv=notrunc status=none
expect_log \
  "escape/private-region: the agent's region overwritten, TESSERA_DEBUG_PRIVATE_REGION=1 in the env: fails closed" \
  "cannot open shared region /var/run/tessera/region" \
  "$FIXED" "$d" env "${STUBENV[@]}" LD_PRELOAD="$PRE" TESSERA_DEBUG_PRIVATE_REGION=1 "$T/t_memory" region-fail
# The agent's file at the fixed path: what else it decides.
d=$(agent_dir bad TESSERA_VISIBLE_UUIDS=$UUID0 TESSERA_MEMORY_LIMIT_MIB=12abc TESSERA_SM_LIMIT=100)
expect_log "fixed: a malformed agent file fails closed (cuInit refused); the env's limits are no fallback" \
  'malformed TESSERA_MEMORY_LIMIT_MIB="12abc"' \
  "$FIXED" "$d" env "${STUBENV[@]}" LD_PRELOAD="$PRE" TESSERA_MEMORY_LIMIT_MIB=1024 "$T/t_memory" region-fail
d=$(agent_dir short TESSERA_VISIBLE_UUIDS=$UUID0 TESSERA_SM_LIMIT=100)
expect_log "fixed: an agent file without the memory limit fails closed" "lacks TESSERA_MEMORY_LIMIT_MIB" \
  "$FIXED" "$d" env "${STUBENV[@]}" LD_PRELOAD="$PRE" TESSERA_MEMORY_LIMIT_MIB=1024 "$T/t_memory" region-fail
d=$TMP/agent.unreadable; mkdir -p "$d/limits.env"; truncate -s "$REGION_SIZE" "$d/region"
expect_log "fixed: an agent file that cannot be read fails closed; the env is no fallback" "Is a directory" \
  "$FIXED" "$d" env "${STUBENV[@]}" LD_PRELOAD="$PRE" TESSERA_MEMORY_LIMIT_MIB=1024 "$T/t_memory" region-fail
d=$(agent_dir debug "${AGENT[@]/#TESSERA_SHARED_REGION=*/TESSERA_SHARED_REGION=/var/run/tessera/missing}" \
  TESSERA_DEBUG_PRIVATE_REGION=1)
expect_log "fixed: only the agent's own file can allow per-process accounting (a TESSERA_DEBUG_PRIVATE_REGION=1 line)" \
  "limits apply per process only" \
  "$FIXED" "$d" env "${STUBENV[@]}" LD_PRELOAD="$PRE" EXPECT_LIMIT=$GIB EXPECT_HOOKED=1 "$T/t_memory" edge
d=$(agent_dir kept "${AGENT[@]}")
size=$REGION_SIZE
region_kept() { # the region is the agent's file: still its size, initialised in place, nothing created beside it
  "$FIXED" "$d" env "${STUBENV[@]}" LD_PRELOAD="$PRE" EXPECT_LIMIT=$GIB EXPECT_HOOKED=1 "$T/t_memory" edge
  local rc=$?; [ $rc = 0 ] || return $rc
  [ "$(stat -c %s "$d/region")" = "$size" ] || { echo "region resized to $(stat -c %s "$d/region")"; return 1; }
  [ "$(head -c 8 "$d/region")" = 1ARESSET ] || { echo "region not initialised in place"; return 1; }
}
run "fixed: the region the agent pre-created is used in place, not recreated or resized (directory read-only)" \
  region_kept
# The region in the container's own storage: the agent's file names a path on the pod's memory-backed
# region volume (or in /dev/shm without it); the first process creates the region there, and a container
# that grows it fills only that tmpfs, never the host's disk.
VOL_REGION=/var/run/tessera-region/tessera-main.region
d=$(agent_dir volume "${AGENT[@]/#TESSERA_SHARED_REGION=*/TESSERA_SHARED_REGION=$VOL_REGION}"); rm "$d/region"
run "volume: a region the agent names on the pod's region volume is created there and shared (3/4 + 3/4 refused)" \
  env REGION_VOLUME_SIZE=512k "$FIXED" "$d" env "${STUBENV[@]}" LD_PRELOAD="$PRE" EXPECT_LIMIT=$GIB "$T/t_escape" share
volume_bounded() { # created 0666 at its size; fallocate past the volume fails; the region still works after
  REGION_VOLUME_SIZE=512k "$FIXED" "$d" bash -c '
    "$@" || exit
    [ "$(stat -c %a:%s '"$VOL_REGION"')" = 666:'"$REGION_SIZE"' ] || { echo "region: $(stat -c %a:%s '"$VOL_REGION"')"; exit 1; }
    if out=$(fallocate -l 1G '"$VOL_REGION"' 2>&1); then echo "fallocate of 1 GiB succeeded"; exit 1; fi
    case $out in *"No space left on device"*) ;; *) echo "fallocate: $out"; exit 1;; esac
    "$@"' region_volume env "${STUBENV[@]}" LD_PRELOAD="$PRE" EXPECT_LIMIT=$GIB EXPECT_HOOKED=1 "$T/t_memory" edge
}
run "volume: growing the region is refused at the volume's size (fallocate 1 GiB: ENOSPC); the region still works" \
  volume_bounded
d=$(agent_dir full "${AGENT[@]/#TESSERA_SHARED_REGION=*/TESSERA_SHARED_REGION=$VOL_REGION}")
expect_log "volume: a region volume already full fails closed at once with ENOSPC, never a SIGBUS later" \
  "cannot open shared region $VOL_REGION: No space left on device" \
  env REGION_VOLUME_SIZE=512k "$FIXED" "$d" bash -c 'head -c 400000 /dev/zero >/var/run/tessera-region/filler && exec "$@"' \
  full env "${STUBENV[@]}" LD_PRELOAD="$PRE" "$T/t_memory" region-fail
d=$(agent_dir cut "${AGENT[@]/#TESSERA_SHARED_REGION=*/TESSERA_SHARED_REGION=$VOL_REGION}"); rm "$d/region"
expect_log "volume: a region a tenant truncated is refused, not re-extended with its counters zeroed (fails closed)" \
  "cannot open shared region $VOL_REGION: Protocol error" \
  env REGION_VOLUME_SIZE=512k "$FIXED" "$d" bash -c '
    "$@" EXPECT_LIMIT='"$GIB"' EXPECT_HOOKED=1 '"$T"'/t_memory edge >/dev/null || { echo "first process failed"; exit 1; }
    truncate -s 4096 '"$VOL_REGION"' && exec "$@" '"$T"'/t_memory region-fail' \
  cut env "${STUBENV[@]}" LD_PRELOAD="$PRE"
d=$(agent_dir shm "${AGENT[@]/#TESSERA_SHARED_REGION=*/TESSERA_SHARED_REGION=/dev/shm/tessera-main.region}"); rm "$d/region"
run "volume: without the volume the agent names /dev/shm; the region is created there and shared (3/4 + 3/4 refused)" \
  "$FIXED" "$d" env "${STUBENV[@]}" LD_PRELOAD="$PRE" EXPECT_LIMIT=$GIB "$T/t_escape" share
d=$(agent_dir link "${AGENT[@]/#TESSERA_SHARED_REGION=*/TESSERA_SHARED_REGION=$VOL_REGION}"); rm "$d/region"
expect_log "volume: a link planted where the region goes is refused, not followed (fails closed)" \
  "cannot open shared region $VOL_REGION: Too many levels of symbolic links" \
  env REGION_VOLUME_SIZE=512k "$FIXED" "$d" bash -c 'ln -s /var/run/tessera/limits.env '"$VOL_REGION"' && exec "$@"' \
  link env "${STUBENV[@]}" LD_PRELOAD="$PRE" "$T/t_memory" region-fail
if [ "$SAN" = 0 ]; then
  run "escape/deepbind: a library dlopen'ed with RTLD_DEEPBIND that links the driver still gets 3 GiB refused" \
    lim deep TEST_DEEP_LIB="$STUB/libdeep.so" EXPECT_LIMIT=$GIB "$T/t_escape" deepbind
else
  skip "escape/deepbind" "the sanitizer runtime aborts any dlopen with RTLD_DEEPBIND before the library sees it"
fi
run "escape/dlvsym: hooked names give the hooks (any handle, any version); so do dlsym/dlvsym taken from libc" \
  lim dlvsym EXPECT_LIMIT=$GIB "$T/t_escape" dlvsym
run "escape/dlmopen: the driver, or a library linking it, into a new namespace: refused; LM_ID_BASE hooked" \
  lim dlmopen TEST_DEEP_LIB="$STUB/libdeep.so" EXPECT_LIMIT=$GIB "$T/t_escape" dlmopen
run "open escape (documented): a process that rewrites the region's counters lets the container exceed its limit" \
  lim rw TEST_REGION="$TMP/region.rw" EXPECT_LIMIT=$GIB "$T/t_escape" region-write

# SM limiter: scenarios run in two batches of parallel containers (they sleep most of the time).
# Each `sm` line is one process; processes given the same TESSERA_STUB_CARDS_FILE share one
# simulated card (time-sliced), each in its own container (own region) and pid namespace.
SMPIDS=(); SMNAMES=(); SMN=0
sm() { # sm NAME EXPECTED ENV...  (the real NVML is found on the library path, as on a node)
  local name=$1 want=$2; shift 2
  local out=$TMP/sm.$SMN
  env LD_LIBRARY_PATH="$STUB" TESSERA_SHARED_REGION="$TMP/region.sm$SMN" TESSERA_VISIBLE_UUIDS=$UUID0,$UUID1 \
    TESSERA_STUB_PIDNS=$SMN "$@" "$T/t_sm" "$want" >"$out" 2>&1 &
  SMPIDS+=($!); SMNAMES+=("$SMN:$name"); SMN=$((SMN + 1))
}
sm_wait() {
  for i in "${!SMPIDS[@]}"; do
    local n=${SMNAMES[$i]%%:*} name=${SMNAMES[$i]#*:}
    wait "${SMPIDS[$i]}"
    local rc=$?
    if [ $rc = 0 ]; then
      PASS=$((PASS + 1)); printf 'ok    %s\n' "$name"
    elif [ $rc = 77 ]; then
      SKIP=$((SKIP + 1)); printf 'skip  %s\n' "$name"
    else
      FAIL=$((FAIL + 1)); FAILED+=("$name"); printf 'FAIL  %s\n' "$name"
    fi
    sed -n 's/^t_sm: /      /p' "$TMP/sm.$n"
    grep -v '^t_sm' "$TMP/sm.$n" | sed 's/^/      /' | tail -20
  done
  SMPIDS=(); SMNAMES=()
}
# Tenants keep running until the partner has measured too, at most 2 s warm-up + 24 windows of 0.5 s.
PAIR_SECONDS=15
# pair NAME CARD-ENV... -- A-WANT A-ENV... -- B-WANT B-ENV...: two containers sharing one card.
pair() {
  local name=$1; shift
  local card=() a=() b=()
  while [ "$1" != -- ]; do card+=("$1"); shift; done; shift
  local wa=$1; shift
  while [ "$1" != -- ]; do a+=("$1"); shift; done; shift
  local wb=$1; shift
  b=("$@")
  local f=$TMP/cards.$SMN
  sm "$name: tenant A holds $wa%" "$wa" LD_PRELOAD="$PRE" TESSERA_STUB_CARDS_FILE="$f" TEST_MIN_SECONDS=$PAIR_SECONDS \
    TEST_DONE_FILE="$f.A" TEST_WAIT_FILE="$f.B" "${card[@]}" "${a[@]}"
  sm "$name: tenant B holds $wb%" "$wb" LD_PRELOAD="$PRE" TESSERA_STUB_CARDS_FILE="$f" TEST_MIN_SECONDS=$PAIR_SECONDS \
    TEST_DONE_FILE="$f.B" TEST_WAIT_FILE="$f.A" "${card[@]}" "${b[@]}"
}

echo "-- SM limiter, batch 1 of 2: one container per card (~5 s, longer when the machine stalls) --"
for sms in 80 188; do
  for pct in 10 30 50 70 90; do
    sm "sm: $sms SMs fixed-share $pct% holds $pct±5% after 2 s" $pct LD_PRELOAD="$PRE" TESSERA_STUB_SMS=$sms \
      TESSERA_SM_LIMIT=$pct TESSERA_QOS=fixed-share
  done
done
for k in 5 5000; do
  sm "sm: ${k} µs blocks (far from the first guess) still converge to 30%" 30 LD_PRELOAD="$PRE" TESSERA_STUB_SMS=188 \
    TESSERA_SM_LIMIT=30 TEST_KERNEL=sleep_${k}us
done
sm "sm: second card of a two-card container is limited too (30,60 -> 60%)" 60 LD_PRELOAD="$PRE" \
  TESSERA_STUB_DEVICES=2 TESSERA_STUB_SMS=108 TESSERA_SM_LIMIT=30,60 TEST_DEVICE=1
sm "sm: CUDA_VISIBLE_DEVICES=1: ordinal 0 is card 1 (by UUID) and gets card 1's limit (30,60 -> 60%)" 60 \
  LD_PRELOAD="$PRE" TESSERA_STUB_DEVICES=2 TESSERA_STUB_SMS=108 TESSERA_SM_LIMIT=30,60 CUDA_VISIBLE_DEVICES=1
sm "sm: burst-share on an idle card is not capped" 100 LD_PRELOAD="$PRE" TESSERA_SM_LIMIT=30 \
  TESSERA_QOS=burst-share
sm "sm: best-effort is never capped" 100 LD_PRELOAD="$PRE" TESSERA_SM_LIMIT=30 TESSERA_QOS=best-effort
sm "sm: exclusive card (100%) is not throttled" 100 LD_PRELOAD="$PRE" TESSERA_SM_LIMIT=100
sm "sm: without LD_PRELOAD nothing throttles" 100 TESSERA_SM_LIMIT=30
d=$(agent_dir sm TESSERA_VISIBLE_UUIDS=$UUID0 TESSERA_MEMORY_LIMIT_MIB=0 TESSERA_SM_LIMIT=30 TESSERA_QOS=fixed-share)
sm "escape/env: TESSERA_SM_LIMIT=100, TESSERA_QOS=best-effort in the env: the agent's 30% holds" 30 \
  LD_PRELOAD="$PRE" TESSERA_SM_LIMIT=100 TESSERA_QOS=best-effort TESSERA_LIMITS_FILE=/dev/null "$FIXED" "$d"
sm_wait

echo "-- SM limiter, batch 2 of 2: graph replay, containers sharing a card (~5 s, longer when the machine stalls) --"
for c in 80:10 80:50 80:90 188:30 188:70; do
  sms=${c%:*} pct=${c#*:}
  sm "sm: $sms SMs, graph replay (cuGraphLaunch, also via cuGetProcAddress and _v2) held at $pct%" $pct LD_PRELOAD="$PRE" \
    TESSERA_STUB_SMS=$sms TESSERA_SM_LIMIT=$pct TEST_GRAPH=1
done
pair "sm: 30%/70% in two pid namespaces, driver reports host pids, 80 SMs" TESSERA_STUB_SMS=80 \
  TESSERA_STUB_PID_MODE=host -- 30 TESSERA_SM_LIMIT=30 -- 70 TESSERA_SM_LIMIT=70
pair "sm: 30%/70% in two pid namespaces, driver reports namespace pids, 188 SMs" TESSERA_STUB_SMS=188 \
  TESSERA_STUB_PID_MODE=ns -- 30 TESSERA_SM_LIMIT=30 -- 70 TESSERA_SM_LIMIT=70
pair "sm: 30% graph replay beside 70% plain launches, host pids, 188 SMs" TESSERA_STUB_SMS=188 \
  TESSERA_STUB_PID_MODE=host -- 30 TESSERA_SM_LIMIT=30 TEST_GRAPH=1 -- 70 TESSERA_SM_LIMIT=70
pair "sm: 30% of 5 ms blocks (kernels longer than a time slice) beside 70% plain launches, host pids" \
  TESSERA_STUB_PID_MODE=host -- 30 TESSERA_SM_LIMIT=30 TEST_KERNEL=sleep_5000us -- 70 TESSERA_SM_LIMIT=70
pair "sm: burst-share 30% beside a busy uncapped neighbour is capped, host pids" TESSERA_STUB_PID_MODE=host \
  -- 30 TESSERA_SM_LIMIT=30 TESSERA_QOS=burst-share -- 70 TESSERA_SM_LIMIT=100
pair "sm: burst-share 30% beside a busy uncapped neighbour is capped, namespace pids" TESSERA_STUB_PID_MODE=ns \
  -- 30 TESSERA_SM_LIMIT=30 TESSERA_QOS=burst-share -- 70 TESSERA_SM_LIMIT=100
echo "1 20" >"$TMP/foreign"
sm "sm: burst-share with another container on the card (NVML only) is capped" 30 LD_PRELOAD="$PRE" \
  TESSERA_SM_LIMIT=30 TESSERA_QOS=burst-share TESSERA_STUB_FOREIGN="$TMP/foreign"
sm_wait

# The GPU test kit (gputest/), unchanged, against the stub: what `make gpu-test` runs on a real card. Its
# workers preload the library alone, so the sanitizer pass (which needs libasan first) skips it.
if [ "$SAN" = 0 ]; then
  echo "-- GPU test kit on the stub driver (~35 s) --"
  run "gputest: the GPU test kit passes on the stub driver (memory, SM shares, graphs, pid namespaces, remap)" \
    env LD_LIBRARY_PATH="$STUB" TMPDIR="$TMP" "$PWD/$BUILD/gputest/gputest" --lib "$LIB"
  [ "${FAILED[*]}" != "${FAILED[*]%gputest:*}" ] || sed 's/^/      /' "$TMP/out.$((PASS + FAIL - 1))"
fi

echo "== $BUILD: $PASS passed, $FAIL failed, $SKIP skipped =="
for f in "${FAILED[@]}"; do echo "   failed: $f"; done
[ "$FAIL" = 0 ]
