#!/usr/bin/env bash
# Runs CMD inside a Tessera container's layout as the node agent mounts it, without touching the host:
# in a private mount namespace (unshare -m), a tmpfs over /var/run's real directory holds tessera/,
# itself read-only, with DIR/limits.env bind-mounted read-only at /var/run/tessera/limits.env and
# DIR/region bind-mounted read-write at /var/run/tessera/region (single-file mounts, as the agent
# does). DIR/region is created empty when absent (the agent pre-creates it at the region's exact size,
# which the caller gets from `t_escape region-size`; an empty one fails closed). Without DIR/limits.env
# nothing is mounted there (a process outside a Tessera container). The library under test is the
# shipped one: its fixed paths are real paths here. /dev/shm is a private 1 MiB tmpfs (a container's
# own); with REGION_VOLUME_SIZE set, /var/run/tessera-region is a tmpfs of that size, mode 0777, as the
# kubelet mounts a pod's memory-backed region volume.
# Needs root (CI and the dev machines run the suite as root); otherwise prints why and exits 77,
# which tests/run.sh reports as a skip.
# Usage: fixed_ns.sh DIR CMD...
set -eu
if [ "$#" -lt 2 ]; then echo "usage: fixed_ns.sh DIR CMD..." >&2; exit 2; fi
DIR=$(realpath "$1"); shift
if [ "$(id -u)" != 0 ]; then
  echo "SKIP: needs root to mount the agent's layout in a private mount namespace (unshare -m)"
  exit 77
fi
[ -e "$DIR/region" ] || : >"$DIR/region"
RUN=$(realpath /var/run) # /var/run is usually a link to /run
exec unshare -m --propagation private -- bash -c '
  set -eu
  DIR=$1 RUN=$2; shift 2
  mount -t tmpfs -o mode=0755 tessera-test "$RUN"
  mount -t tmpfs -o size=1m,mode=1777 tessera-test-shm /dev/shm
  if [ -n "${REGION_VOLUME_SIZE:-}" ]; then
    mkdir "$RUN/tessera-region"
    mount -t tmpfs -o "size=$REGION_VOLUME_SIZE,mode=0777" tessera-test-region "$RUN/tessera-region"
  fi
  mkdir "$RUN/tessera"
  : >"$RUN/tessera/region"
  if [ -d "$DIR/limits.env" ]; then mkdir "$RUN/tessera/limits.env"; # to test a file that cannot be read
  elif [ -e "$DIR/limits.env" ]; then : >"$RUN/tessera/limits.env"; fi
  # The directory read-only (nothing can be created beside the mounts); the mounts on top are files.
  mount --bind "$RUN/tessera" "$RUN/tessera"
  mount -o remount,bind,ro "$RUN/tessera"
  mount --bind "$DIR/region" "$RUN/tessera/region"
  if [ -e "$DIR/limits.env" ]; then
    mount --bind "$DIR/limits.env" "$RUN/tessera/limits.env"
    mount -o remount,bind,ro "$RUN/tessera/limits.env"
  fi
  exec "$@"
' fixed_ns "$DIR" "$RUN" "$@"
