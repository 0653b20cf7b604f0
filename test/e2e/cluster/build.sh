#!/usr/bin/env bash
# Builds the Kubernetes v1.36 binaries (kubelet, kube-apiserver, kube-controller-manager, kube-scheduler,
# kube-proxy, kubectl), etcd and CoreDNS from the pinned Go modules under tools/, into a cache outside the
# repository that later runs reuse. Prints the directory holding the binaries as its last line.
#   STOVE_E2E_CACHE  the cache (default /var/cache/stove-e2e): Go's module and build caches and bin/<key>/
#   GO               the go command (default /usr/local/go/bin/go)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${STOVE_E2E_CACHE:-/var/cache/stove-e2e}"
go="${GO:-/usr/local/go/bin/go}"
[ -x "$go" ] || { echo "build.sh: no Go at $go (Go 1.26 is needed to build Kubernetes v1.36)" >&2; exit 1; }

export GOMODCACHE="$cache/gomod" GOCACHE="$cache/gocache" GOFLAGS=-mod=readonly GOTOOLCHAIN=local CGO_ENABLED=0
# The key changes whenever a pin or this script changes, so a stale build is never reused.
key="$(cat "$0" "$here"/tools/*/go.mod "$here"/tools/*/go.sum | sha256sum | cut -c1-16)"
out="$cache/bin/$key"
want=(kubelet kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubectl etcd coredns)
have=1; for b in "${want[@]}"; do [ -x "$out/$b" ] || have=0; done
if [ "$have" = 1 ]; then echo "$out"; exit 0; fi

mkdir -p "$out.tmp"
start=$(date +%s)
version_of() { awk -v m="$1" '$1 == m { print $2; exit }' "$here/tools/$2/go.mod"; }

k8s="$(version_of k8s.io/kubernetes kubernetes)"
minor="${k8s#v1.}"; minor="${minor%%.*}"
cv=k8s.io/component-base/version
k8s_ldflags="-s -w -X $cv.gitVersion=$k8s -X $cv.gitMajor=1 -X $cv.gitMinor=$minor -X $cv.gitTreeState=clean -X $cv.buildDate=1970-01-01T00:00:00Z"
echo "build.sh: Kubernetes $k8s (kubelet, kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy, kubectl)" >&2
(cd "$here/tools/kubernetes" && "$go" build -trimpath -ldflags "$k8s_ldflags" -o "$out.tmp/" \
  k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kube-proxy k8s.io/kubernetes/cmd/kubectl)

echo "build.sh: etcd $(version_of go.etcd.io/etcd/server/v3 etcd)" >&2
(cd "$here/tools/etcd" && "$go" build -trimpath -ldflags "-s -w" -o "$out.tmp/etcd" go.etcd.io/etcd/server/v3)

echo "build.sh: CoreDNS $(version_of github.com/coredns/coredns coredns)" >&2
(cd "$here/tools/coredns" && "$go" build -trimpath -ldflags "-s -w" -o "$out.tmp/coredns" github.com/coredns/coredns)

rm -rf "$out" && mv "$out.tmp" "$out"
echo "build.sh: built in $(( $(date +%s) - start )) s into $out" >&2
echo "$out"
