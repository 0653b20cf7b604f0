# Shared by multi/up.sh, multi/down.sh and multi/node.sh: the three-node cluster's names, addresses,
# ports and dirs (all distinct from the single-node cluster's in ../lib.sh, so both can be up at once),
# and small helpers.
# shellcheck shell=bash
# shellcheck source=../../stop-pid.sh
. "$(dirname "${BASH_SOURCE[0]}")/../../stop-pid.sh"
# shellcheck source=../../containerd/config.sh
. "$(dirname "${BASH_SOURCE[0]}")/../../containerd/config.sh"
# shellcheck source=../wait-for.sh
. "$(dirname "${BASH_SOURCE[0]}")/../wait-for.sh"
WAIT_INTERVAL=2
W="${CLUSTER_DIR:-/var/lib/stove-cluster3}"
RUNTIME="${CLUSTER_RUNTIME:-$(cat "$W/runtime" 2>/dev/null || echo stove)}"
NODES=(cp-1 worker-1 worker-2)
declare -A NODE_IP=([cp-1]=10.251.0.11 [worker-1]=10.251.0.12 [worker-2]=10.251.0.13)
# The nodes' bridge: the host's end holds the registry's address; nothing on it is routed anywhere else.
BRIDGE=stove3-br
HOST_IP=10.251.0.1
NODE_PREFIX=24
REGISTRY_ADDR=$HOST_IP:5056
IMAGE_REPO=$REGISTRY_ADDR/k8s
GUARD_CHAIN=STOVE3-GUARD
SERVICE_CIDR=10.96.0.0/12
CLUSTER_CIDR=10.244.0.0/16
CGROUP_TOP=stove3
APISERVER=${NODE_IP[cp-1]}:6443
# The host's kernel settings outside any network namespace that the kubelets and kube-proxy change.
SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys
  kernel.keys.root_maxbytes)

die() { echo "$(basename "$0"): $*" >&2; exit 1; }
step() { echo "$(basename "$0"): $(date +%T) $*" >&2; }

netns_of() { echo "stove3-$1"; }
veth_of() { echo "s3-$1"; }
node_dir() { echo "$W/nodes/$1"; }
mntns_of() { echo "$W/ns/$1.mnt"; }
cgroup_root_of() { echo "/$CGROUP_TOP/$1"; }
socket_of() {
  if [ "$RUNTIME" = containerd ]; then echo "$(node_dir "$1")/containerd/containerd.sock"; else echo "$(node_dir "$1")/stove/stove.sock"; fi
}

# in_node NODE CMD... — CMD in NODE's network and mount namespaces (its /etc, /var/log, /var/lib/kubelet
# and /run/flannel are its own there).
in_node() {
  local node=$1; shift
  nsenter --net="/run/netns/$(netns_of "$node")" --mount="$(mntns_of "$node")" -- "$@"
}

# start NAME NODE CMD... — CMD in NODE's namespaces, in a session of its own, output to
# $W/logs/NAME.log, pid in $W/pids/NAME, the command line in $W/cmd/NAME (for kubelet.sh).
start() {
  local name=$1 node=$2; shift 2
  mkdir -p "$W/cmd" && printf '%s\0' "$@" >"$W/cmd/$name" && echo "$node" >"$W/cmd/$name.node"
  setsid nsenter --net="/run/netns/$(netns_of "$node")" --mount="$(mntns_of "$node")" -- "$@" >>"$W/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$W/pids/$name"
  step "started $name on $node (pid $!)"
}

kubectl() { "$(cat "$W/bin-dir")/kubectl" --kubeconfig "$W/admin.kubeconfig" "$@"; }

# stop_process NAME [SIGNAL] — signals NAME's process (default TERM), waits up to 10 s, then kills it.
stop_process() {
  local pid; pid=$(cat "$W/pids/$1" 2>/dev/null) || return 0
  stop_pid "$pid" 10 "${2:-TERM}"
  rm -f "$W/pids/$1"
}

# The kubelet of NODE the way kubeadm's systemd drop-in (10-kubeadm.conf) starts it: the kubeconfigs
# kubeadm wrote, its config.yaml and the flags in kubeadm-flags.env (which carry the node's own
# --hostname-override, --node-ip and --cgroup-root from nodeRegistration.kubeletExtraArgs).
start_kubelet() {
  local node=$1 n; n="$(node_dir "$1")"
  local flags; flags=$(sed -n 's/^KUBELET_KUBEADM_ARGS="\(.*\)"$/\1/p' "$n/kubelet/kubeadm-flags.env")
  # shellcheck disable=SC2086
  start "kubelet-$node" "$node" "$(cat "$W/bin-dir")/kubelet" --bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf \
    --kubeconfig=/etc/kubernetes/kubelet.conf --config=/var/lib/kubelet/config.yaml $flags --v="${KUBELET_VERBOSITY:-2}"
}

# containerd 2.x in Stove's place on NODE (CLUSTER_RUNTIME=containerd), in the node's namespaces as Stove
# is: root, state, socket and registry config under the node's dir (containerd_node_config), the CNI
# config in the node's /etc/cni/net.d where Flannel's DaemonSet writes it, the pause image kubeadm pulls.
# The shims' sockets (containerd 2.x keeps them in /run/containerd/s whatever its state dir) land in the
# node's own dir bound on /run/containerd in its mount namespace (up.sh).
start_containerd() {
  local node=$1 n bin; n="$(node_dir "$1")"; bin="$(cat "$W/bin-dir")"
  containerd_node_config "$n/containerd" "$(socket_of "$node")" "$REGISTRY_ADDR" "$PAUSE_IMAGE" /etc/cni/net.d
  start "containerd-$node" "$node" env PATH="$bin:/usr/sbin:/usr/bin:/sbin:/bin" "$bin/containerd" --config "$n/containerd/config.toml" --log-level warn
}
