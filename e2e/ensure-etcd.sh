#!/usr/bin/env bash
# Installs Debian's etcd-server when no etcd is on the PATH (the e2e harness runs it).
set -euo pipefail
if command -v etcd >/dev/null || [ -x /usr/bin/etcd ]; then exit 0; fi
sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
echo "installing Debian's etcd-server"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get install -y -q etcd-server >/dev/null 2>&1 || { $sudo apt-get update -q >/dev/null && $sudo apt-get install -y -q etcd-server >/dev/null; }
# The package enables a system service; the harness runs its own etcd on free ports.
$sudo systemctl disable --now etcd >/dev/null 2>&1 || true
