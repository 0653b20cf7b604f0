#!/bin/bash
# test/vm/critest.sh [--oci-runtime PATH] [--timeout SECONDS] [extra critest args] — the whole critest
# suite (cri-tools of test/e2e/critest/go.mod, v1.36) against Stove in the cgroup v2 + systemd guest of
# test/vm/run.sh, where AppArmor is on and crun works (crun refuses this host's hybrid cgroups).
#
# Builds critest and crictl into the cache (test/e2e/critest.sh BUILD_ONLY=1), copies the conformance kit's
# registry storage (REGISTRY_STORAGE, default /var/lib/lab-registry/storage: `registry.sh start && python3
# mkimages.py`, with a pause:3.9 of its own digest, docs/testing.md) onto the checkout's disk, and runs
# test/vm/critest-guest.sh in the guest: OCI_RUNTIME=PATH (default /usr/bin/crun, Debian's crun 1.8.1; the
# guest's /usr/bin/runc is runc 1.1.5) test/e2e/critest.sh with that registry on the guest's loopback.
# Prints critest.sh's table and the guest's uptime. --timeout bounds the command in the guest (default
# 2700 s; 560–1500 s under emulation here). Root; `make test` does not run it. Nothing stays on the host.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
oci_runtime=/usr/bin/crun
timeout_s=2700
while [ $# -gt 0 ]; do
  case "$1" in
    --oci-runtime) oci_runtime=${2:?}; shift 2 ;;
    --timeout) timeout_s=${2:?}; shift 2 ;;
    *) break ;;
  esac
done
storage=${REGISTRY_STORAGE:-/var/lib/lab-registry/storage}
[ -d "$storage/docker/registry/v2/repositories" ] ||
  { echo "critest.sh: no registry storage at $storage (the conformance kit: registry.sh start && python3 mkimages.py)" >&2; exit 2; }
critest=$(BUILD_ONLY=1 "$repo/test/e2e/critest.sh" | tail -1)
[ -x "$critest" ] || { echo "critest.sh: cannot build critest" >&2; exit 1; }
tmp=$(mktemp -d /tmp/stove-vm-critest.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/data"
cp -a "$storage" "$tmp/data/registry"
"$repo/test/vm/run.sh" --timeout "$timeout_s" --critest "$critest" --crictl "${critest%/*}/crictl" --data "$tmp/data" \
  -- env OCI_RUNTIME="$oci_runtime" test/vm/critest-guest.sh "$@"
