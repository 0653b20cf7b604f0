#!/usr/bin/env bash
# test/vm/build-checkpointctl.sh — builds checkpointctl (the checkpoint archive reader CRI-O's and
# Podman's users inspect archives with) of the version pinned in test/vm/checkpointctl/go.mod, once,
# into $STOVE_E2E_CACHE/checkpointctl/<version>/ (default /var/cache/stove-e2e), and prints the
# binary's path. Needs Go at /usr/local/go (or GO) and the module proxy; exit 1 when it cannot build.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
go=${GO:-/usr/local/go/bin/go}
cache=${STOVE_E2E_CACHE:-/var/cache/stove-e2e}
module=$repo/test/vm/checkpointctl
version=$(awk '$1 == "github.com/checkpoint-restore/checkpointctl" { print $2; exit }' "$module/go.mod")
out=$cache/checkpointctl/$version
if [ ! -x "$out/checkpointctl" ]; then
  [ -x "$go" ] || { echo "build-checkpointctl.sh: no Go at $go" >&2; exit 1; }
  export GOMODCACHE=$cache/gomod GOCACHE=$cache/gocache GOTOOLCHAIN=local GOFLAGS=-mod=readonly CGO_ENABLED=0
  echo "building checkpointctl $version into $out" >&2
  rm -rf "$out.tmp" && mkdir -p "$out.tmp"
  (cd "$module" && "$go" build -trimpath -o "$out.tmp/checkpointctl" github.com/checkpoint-restore/checkpointctl >&2) || { rm -rf "$out.tmp"; exit 1; }
  rm -rf "$out" && mv "$out.tmp" "$out"
fi
echo "$out/checkpointctl"
