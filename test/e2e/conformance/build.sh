#!/usr/bin/env bash
# test/e2e/conformance/build.sh — builds Kubernetes' own e2e suite from the pinned module here (go.mod: the
# cluster's Kubernetes version) into a cache outside the repository, and prints the directory holding
# e2e.test, ginkgo (the v2 CLI that runs it in parallel), agnhost (the program most of its specs run),
# nonewprivs and regression-issue-74839 (images.ts makes images of the last three) as its last line. A
# run that finds them built prints the directory at once.
# Environment: STOVE_E2E_CACHE (default /var/cache/stove-e2e), GO (default /usr/local/go/bin/go).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${STOVE_E2E_CACHE:-/var/cache/stove-e2e}"
go="${GO:-/usr/local/go/bin/go}"
[ -x "$go" ] || { echo "conformance/build.sh: no Go at $go (Go 1.26 is needed to build Kubernetes v1.36)" >&2; exit 1; }
export GOMODCACHE="$cache/gomod" GOCACHE="$cache/gocache" GOFLAGS=-mod=readonly GOTOOLCHAIN=local CGO_ENABLED=0
# The key changes whenever the pin or this script changes, so a stale build is never reused.
key="$(cat "$0" "$here/go.mod" "$here/go.sum" | sha256sum | cut -c1-16)"
out="$cache/e2e/$key"
if [ ! -f "$out/.built" ]; then
  k8s="$(awk '$1 == "k8s.io/kubernetes" { print $2; exit }' "$here/go.mod")"; minor="${k8s#v1.}"; minor="${minor%%.*}"
  cv=k8s.io/component-base/version
  ldflags="-s -w -X $cv.gitVersion=$k8s -X $cv.gitMajor=1 -X $cv.gitMinor=$minor -X $cv.gitTreeState=clean -X $cv.buildDate=1970-01-01T00:00:00Z"
  start=$(date +%s)
  tmp="$out.tmp" && rm -rf "$tmp" && mkdir -p "$tmp"
  echo "conformance/build.sh: e2e.test, ginkgo and agnhost of Kubernetes $k8s" >&2
  cd "$here"
  "$go" build -trimpath -ldflags "$ldflags" -o "$tmp/" github.com/onsi/ginkgo/v2/ginkgo k8s.io/kubernetes/test/images/agnhost \
    k8s.io/kubernetes/test/images/nonewprivs k8s.io/kubernetes/test/images/regression-issue-74839
  "$go" test -c -trimpath -ldflags "$ldflags" -o "$tmp/e2e.test" k8s.io/kubernetes/test/e2e
  rm -rf "$out" && mv "$tmp" "$out" && touch "$out/.built"
  echo "conformance/build.sh: built in $(( $(date +%s) - start )) s" >&2
fi
echo "$out"
