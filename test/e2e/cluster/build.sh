#!/usr/bin/env bash
# test/e2e/cluster/build.sh [COMPONENT…] — builds the cluster's binaries from the pinned Go modules under
# tools/ into a cache outside the repository that later runs reuse, and prints the directory holding them
# as its last line. Components (default: kubernetes etcd coredns):
#   kubernetes  kubelet, kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy, kubectl (v1.36)
#   etcd        etcd (v3.6)
#   coredns     coredns
#   containerd  containerd and containerd-shim-runc-v2 (2.x), the runtime up.sh can run in Stove's place
# Environment: STOVE_E2E_CACHE (default /var/cache/stove-e2e) holds Go's module and build caches and
# bin/<key>/; GO is the go command (default /usr/local/go/bin/go). Two runs at once take turns on
# $cache/build.lock (flock, up to an hour and a half), so that neither removes the other's temp dirs and
# the second finds what the first built.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${STOVE_E2E_CACHE:-/var/cache/stove-e2e}"
go="${GO:-/usr/local/go/bin/go}"
[ -x "$go" ] || { echo "build.sh: no Go at $go (Go 1.26 is needed to build Kubernetes v1.36)" >&2; exit 1; }
components=("$@"); [ ${#components[@]} -gt 0 ] || components=(kubernetes etcd coredns)

mkdir -p "$cache"
exec 9>"$cache/build.lock"
if ! flock -n 9; then
  echo "build.sh: another build.sh holds $cache/build.lock; waiting for it" >&2
  flock -w 5400 9 || { echo "build.sh: $cache/build.lock still held after 5400 s" >&2; exit 1; }
fi

export GOMODCACHE="$cache/gomod" GOCACHE="$cache/gocache" GOFLAGS=-mod=readonly GOTOOLCHAIN=local CGO_ENABLED=0
# The key changes whenever a pin or this script changes, so a stale build is never reused.
key="$(cat "$0" "$here"/tools/*/go.mod "$here"/tools/*/go.sum | sha256sum | cut -c1-16)"
out="$cache/bin/$key"
mkdir -p "$out"
version_of() { awk -v m="$1" '$1 == m { print $2; exit }' "$here/tools/$2/go.mod"; }

# build COMPONENT PACKAGE… — `go build` in tools/COMPONENT into a temp dir, moved into place when whole.
build() {
  local component=$1; shift
  local tmp="$out/.tmp-$component"
  rm -rf "$tmp" && mkdir -p "$tmp"
  (cd "$here/tools/$component" && "$go" build -trimpath -ldflags "$ldflags" -o "$tmp/" "$@")
  mv "$tmp"/* "$out/" && rmdir "$tmp"
}

for component in "${components[@]}"; do
  [ -f "$out/.built-$component" ] && continue
  start=$(date +%s)
  case "$component" in
    kubernetes)
      k8s="$(version_of k8s.io/kubernetes kubernetes)"; minor="${k8s#v1.}"; minor="${minor%%.*}"
      cv=k8s.io/component-base/version
      ldflags="-s -w -X $cv.gitVersion=$k8s -X $cv.gitMajor=1 -X $cv.gitMinor=$minor -X $cv.gitTreeState=clean -X $cv.buildDate=1970-01-01T00:00:00Z"
      echo "build.sh: Kubernetes $k8s" >&2
      build kubernetes k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
        k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kube-proxy k8s.io/kubernetes/cmd/kubectl ;;
    etcd)
      ldflags="-s -w"; echo "build.sh: etcd $(version_of go.etcd.io/etcd/server/v3 etcd)" >&2
      build etcd go.etcd.io/etcd/server/v3 && mv "$out/server" "$out/etcd" ;;  # go names it after server/v3
    coredns)
      ldflags="-s -w"; echo "build.sh: CoreDNS $(version_of github.com/coredns/coredns coredns)" >&2
      build coredns github.com/coredns/coredns ;;
    containerd)
      v="$(version_of github.com/containerd/containerd/v2 containerd)"
      ldflags="-s -w -X github.com/containerd/containerd/v2/version.Version=$v"; echo "build.sh: containerd $v" >&2
      build containerd github.com/containerd/containerd/v2/cmd/containerd github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 ;;
    *) echo "build.sh: no component $component" >&2; exit 2 ;;
  esac
  touch "$out/.built-$component"
  echo "build.sh: $component built in $(( $(date +%s) - start )) s" >&2
done
echo "$out"
