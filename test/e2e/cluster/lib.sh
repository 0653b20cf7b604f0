# Shared by up.sh and down.sh: the cluster's names, addresses and ports, and small helpers.
# shellcheck shell=bash
# shellcheck source=../stop-pid.sh
. "$(dirname "${BASH_SOURCE[0]}")/../stop-pid.sh"
# shellcheck source=../containerd/config.sh
. "$(dirname "${BASH_SOURCE[0]}")/../containerd/config.sh"
# shellcheck source=wait-for.sh
. "$(dirname "${BASH_SOURCE[0]}")/wait-for.sh"
W="${CLUSTER_DIR:-/var/lib/stove-cluster}"
RUNTIME="${CLUSTER_RUNTIME:-$(cat "$W/runtime" 2>/dev/null || echo stove)}"
NODE_NAME=stove-node
# The node's address lives on a link of its own (a bridge without ports, as the kernel may have no dummy
# links): endpoints may not be loopback addresses, and
# nothing sent to it leaves the machine.
NODE_LINK=stove-e2e0
NODE_IP=10.250.0.1
BRIDGE=stove-e2e-br
GUARD_CHAIN=STOVE-E2E-GUARD
SERVICE_CIDR=10.96.0.0/16
KUBERNETES_SERVICE_IP=10.96.0.1
DNS_SERVICE_IP=10.96.0.10
CLUSTER_CIDR=10.244.0.0/16
POD_CIDR=10.244.0.0/24
REGISTRY_ADDR=127.0.0.1:5055
ETCD_CLIENT=127.0.0.1:12379
ETCD_PEER=127.0.0.1:12380
ETCD_METRICS=127.0.0.1:12381
if [ "$RUNTIME" = containerd ]; then SOCKET="$W/containerd/containerd.sock"; else SOCKET="$W/stove/stove.sock"; fi
# The host's kernel settings the kubelet and kube-proxy change; up.sh records them, down.sh restores them.
SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys
  kernel.keys.root_maxbytes net.ipv4.ip_forward net.ipv4.conf.all.route_localnet
  net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables net.netfilter.nf_conntrack_max
  net.netfilter.nf_conntrack_tcp_timeout_established net.netfilter.nf_conntrack_tcp_timeout_close_wait)
# The processes, in the order up.sh starts them (down.sh stops them in reverse).
PROCESSES=(registry stove containerd etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy)

die() { echo "$(basename "$0"): $*" >&2; exit 1; }
step() { echo "$(basename "$0"): $*" >&2; }

# start NAME CMD... — runs CMD in its own session, output to $W/logs/NAME.log, pid in $W/pids/NAME, the
# command in $W/cmd/NAME (for restart.sh).
start() {
  local name=$1; shift
  mkdir -p "$W/cmd" && printf '%s\0' "$@" >"$W/cmd/$name"
  setsid "$@" >>"$W/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$W/pids/$name"
  step "started $name (pid $!)"
}

kubectl() { "$(cat "$W/bin-dir")/kubectl" --kubeconfig "$W/admin.kubeconfig" "$@"; }

node_ready() {
  [ "$(kubectl get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]
}

coredns_version() { awk '$1 == "github.com/coredns/coredns" { print $2; exit }' "$here/tools/coredns/go.mod"; }

# stop_process NAME [SIGNAL] — signals NAME's process (default TERM), waits up to 10 s, then kills it.
stop_process() {
  local pid; pid=$(cat "$W/pids/$1" 2>/dev/null) || return 0
  stop_pid "$pid" 10 "${2:-TERM}"
  rm -f "$W/pids/$1"
}

# containerd 2.x in Stove's place (CLUSTER_RUNTIME=containerd): its root, state, socket, CNI config and
# registry config all under $W, runc with the cgroupfs driver, the pause image from the cluster registry
# (containerd_node_config in test/e2e/containerd/config.sh, shared with the three-node cluster).
start_containerd() {
  local bin; bin="$(cat "$W/bin-dir")"
  [ -x "$bin/containerd" ] || bin="$("$here/build.sh" containerd | tail -1)"
  [ "$bin" = "$(cat "$W/bin-dir")" ] || die "containerd built into another dir than the cluster's ($bin)"
  containerd_node_config "$W/containerd" "$SOCKET" "$REGISTRY_ADDR" "$PAUSE_IMAGE" "$W/cni/net.d"
  # The runc v2 shim is found on PATH.
  start containerd env PATH="$bin:/usr/sbin:/usr/bin:/sbin:/bin" "$bin/containerd" --config "$W/containerd/config.toml" --log-level warn
}
