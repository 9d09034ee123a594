#!/usr/bin/env bash
# The fault lab's Debian packages (python -m lab): iproute2 (network
# namespaces, veths, a bridge), iptables (partitions), faketime (clocks).
# Installed with apt-get as root, or through sudo; nothing when present.
set -euo pipefail
missing=()
command -v ip >/dev/null || missing+=(iproute2)
command -v iptables >/dev/null || missing+=(iptables)
[ -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ] || ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1 || missing+=(faketime)
command -v cc >/dev/null || missing+=(gcc)
[ ${#missing[@]} -eq 0 ] && exit 0
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
