#!/usr/bin/env bash
# Builds the v0.12 test NRI plugin (main.go, containerd/nri v0.12.3 as go.mod pins it) into a cache outside the
# repo, for test/integration/nri/v012.test.ts (which looks for it there, or at NRI_V012_PLUGIN).
#
#   test/integration/nri/plugin-v012/build-plugin.sh [OUT]      (OUT: /var/cache/stove-e2e/nri-v012/stove-nri-v012-plugin)
set -euo pipefail
cd "$(dirname "$0")"
OUT=${1:-/var/cache/stove-e2e/nri-v012/stove-nri-v012-plugin}
mkdir -p "$(dirname "$OUT")"
export PATH=/usr/local/go/bin:$PATH GOMODCACHE=/var/cache/stove-e2e/gomod GOCACHE=/var/cache/stove-e2e/gocache GOFLAGS=-mod=readonly GOTOOLCHAIN=local CGO_ENABLED=0
go build -trimpath -o "$OUT" .
echo "built $OUT"
