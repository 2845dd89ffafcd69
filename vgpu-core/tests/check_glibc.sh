#!/usr/bin/env bash
# Proves build/libvgpu.so loads on glibc 2.17 or later: lists every symbol it imports with the
# version it needs, and fails if any needed version (or any library beyond libc, libpthread and
# libdl) is newer than GLIBC_2.17 (x86-64's oldest is GLIBC_2.2.5, aarch64's GLIBC_2.17).
# Needs only binutils (readelf) and coreutils. Usage: check_glibc.sh LIB
set -u
LIB=${1:?usage: check_glibc.sh LIB}
MAX=GLIBC_2.17
fail=0
newer() { # true when version $1 sorts after $MAX
  [ "$1" != "$MAX" ] && [ "$(printf '%s\n%s\n' "$1" "$MAX" | sort -V | tail -1)" = "$1" ]
}
echo "imported symbols of $LIB (symbol@version):"
imports=$(readelf -W --dyn-syms "$LIB" | awk '$7 == "UND" && $8 != "" {print $8}' | sort -u)
for s in $imports; do
  v=${s#*@}; v=${v#@}
  case $s in *@*) ;; *) v="";; esac
  mark=""
  if [ -n "$v" ] && newer "${v%% *}"; then mark="   <-- newer than $MAX"; fail=1; fi
  printf '  %s%s\n' "$s" "$mark"
done
for v in $(readelf -W -V "$LIB" | sed -n 's/.*Name: \(GLIBC_[0-9.]*\).*/\1/p' | sort -u); do
  if newer "$v"; then echo "needs version $v, newer than $MAX"; fail=1; fi
done
for n in $(readelf -W -d "$LIB" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
  case $n in libc.so.6|libpthread.so.0|libdl.so.2) ;;
  *) echo "needs $n: only libc.so.6, libpthread.so.0 and libdl.so.2 are allowed"; fail=1;;
  esac
done
if [ $fail = 0 ]; then echo "every import is GLIBC_2.17 or older"; fi
exit $fail
