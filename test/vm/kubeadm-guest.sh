#!/usr/bin/env bash
# In the guest (test/vm/kubeadm.sh runs it through test/vm/run.sh): a node made the way an operator makes
# one with kubeadm on a systemd machine, then taken apart.
#   1. The binaries where Kubernetes' packages put them (/usr/bin/kubeadm, kubelet, kubectl, crictl), Stove
#      where contrib/systemd/stove.service looks for it (/opt/stove, this checkout), the units of
#      contrib/systemd/ in /etc/systemd/system (stove.service, kubelet.service, kubelet.service.d/10-kubeadm.conf),
#      kubelet.service enabled as its packages leave it; a CNI config for the bridge plugin; the images'
#      registry (its storage from the host) as a unit on 127.0.0.1:5000; the node's address on a dummy
#      link (the guest has no network; kubeadm wants a default route).
#   2. `systemctl enable --now stove.service`, `kubeadm init` with nodeRegistration.criSocket
#      unix:///run/stove/stove.sock: kubeadm starts kubelet.service through systemd, which runs the control
#      plane's static pods on Stove.
#   3. The node Ready; etcd, kube-apiserver, kube-controller-manager and kube-scheduler running according to
#      `crictl ps` through Stove, in the kubelet's systemd slices; the control-plane taint removed; a pod
#      scheduled onto the node and Running.
#   4. `kubeadm reset -f`: no pod left on Stove; both units stopped.
# Each step's time is printed ("kubeadm-vm: <seconds> s <step>"). On a failure, the logs that explain it.
set -euo pipefail
data=${STOVE_VM_DATA:?run by test/vm/kubeadm.sh, which gives the guest the binaries and images}
# shellcheck disable=SC1091
source "$data/images.env"
export PATH=/usr/bin:/usr/sbin:/bin:/sbin KUBECONFIG=/etc/kubernetes/admin.conf
SOCK=unix:///run/stove/stove.sock
NODE=$(hostname)
NODE_IP=10.252.0.10
REGISTRY=127.0.0.1:5000
last=$SECONDS
start=$SECONDS
step() { echo "kubeadm-vm: $(printf '%4d' $((SECONDS - last))) s  $*"; last=$SECONDS; }
die() { echo "kubeadm-vm: FAIL: $*"; exit 1; }
# until SECONDS WHAT CMD... — until CMD succeeds, at most SECONDS.
until_ok() {
  local limit=$1 what=$2; shift 2
  local deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || die "$what: not within ${limit}s"
    sleep 2
  done
}

reset_done=
on_exit() {
  local rc=$?
  if [ "$rc" != 0 ]; then
    echo "--- kubeadm-vm: failed (exit $rc) after $((SECONDS - start)) s; what the node says"
    systemctl --no-pager status stove.service kubelet.service 2>&1 | head -40 || true
    echo "--- kubelet (journal, last 40 lines but mirror-pod retries)"; journalctl -u kubelet --no-pager 2>&1 | grep -v "Unable to register mirror pod" | tail -40 || true
    echo "--- stove (journal, last 40 lines)"; journalctl -u stove --no-pager -n 40 2>&1 || true
    echo "--- the guest's processes by CPU time"; ps -eo pid,time,rss,comm --sort=-time 2>&1 | head -15 || true
    echo "--- crictl ps -a"; crictl ps -a 2>&1 || true
    for id in $(crictl ps -a -q 2>/dev/null); do
      echo "--- crictl logs --tail 15 $(crictl inspect -o go-template --template '{{.status.metadata.name}} attempt {{.status.metadata.attempt}}, {{.status.state}} {{.status.exitCode}}' "$id" 2>/dev/null)"
      crictl logs --tail 15 "$id" 2>&1 | cut -c1-300 || true
    done
    [ -f /etc/kubernetes/admin.conf ] && { echo "--- kubectl get pods -A"; timeout 30 kubectl get pods -A -o wide 2>&1 || true; }
    [ -n "$reset_done" ] || timeout 300 kubeadm reset -f --cri-socket "$SOCK" >/dev/null 2>&1 || true
  fi
  systemctl stop kubelet.service stove.service stove-kubeadm-registry.service 2>/dev/null || true
}
trap on_exit EXIT

# --- 1. The node's packages, units and settings --------------------------------------------------------------
install -m 0755 "$data/bin/kubeadm" "$data/bin/kubelet" "$data/bin/kubectl" "$data/bin/crictl" /usr/bin/
ln -sfn /repo /opt/stove
install -m 0644 contrib/systemd/stove.service contrib/systemd/kubelet.service /etc/systemd/system/
install -D -m 0644 contrib/systemd/kubelet.service.d/10-kubeadm.conf /etc/systemd/system/kubelet.service.d/10-kubeadm.conf
printf 'runtime-endpoint: %s\nimage-endpoint: %s\ntimeout: 60\n' "$SOCK" "$SOCK" >/etc/crictl.yaml
# Stove: the systemd cgroup driver (the guest's job wrote 50-vm.toml), the images' registry over http.
printf '[registries."%s"]\ninsecure = true\n' "$REGISTRY" >/etc/stove/stove.d/60-kubeadm-registry.toml
# The bridge plugin for the node's pods (Debian's containernetworking-plugins, /usr/lib/cni).
mkdir -p /etc/cni/net.d
cat >/etc/cni/net.d/10-stove-bridge.conflist <<EOT
{"cniVersion": "1.0.0", "name": "stove-bridge", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.0.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
EOT
# What kubeadm's preflight checks: ip_forward; br_netfilter, so that kube-proxy's rules see bridged traffic.
modprobe br_netfilter
sysctl -q -w net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1 net.bridge.bridge-nf-call-ip6tables=1
ip link add stove-node type dummy
ip addr add "$NODE_IP/24" dev stove-node
ip link set stove-node up
ip route add default via 10.252.0.1 dev stove-node
mkdir -p /run/stove-kubeadm
cat >/run/stove-kubeadm/registry.yml <<EOT
version: 0.1
log: {level: warn}
storage: {filesystem: {rootdirectory: $data/registry}}
http: {addr: $REGISTRY}
EOT
systemd-run --quiet --unit stove-kubeadm-registry /usr/bin/docker-registry serve /run/stove-kubeadm/registry.yml
systemctl daemon-reload
systemctl enable --quiet kubelet.service
until_ok 60 "the registry on $REGISTRY" timeout 5 busybox wget -q -O /dev/null "http://$REGISTRY/v2/"
step "binaries, units, CNI config, registry in place"

# --- 2. Stove, then kubeadm init ------------------------------------------------------------------------------
systemctl enable --now --quiet stove.service
until_ok 300 "stove.service to answer on $SOCK" crictl info
step "stove.service answers on $SOCK ($(systemctl show -P MainPID stove.service) in $(cut -d: -f3 /proc/"$(systemctl show -P MainPID stove.service)"/cgroup))"

# Under software emulation the control plane answers in tens of seconds where a real machine takes
# milliseconds: kubeadm's patches (its documented way to change the static pods it writes) give the
# liveness and readiness probes of etcd, kube-apiserver, kube-controller-manager and kube-scheduler 60 s
# and 30 failures, so that a slow answer is not taken for a dead component. Nothing else changes.
mkdir -p /run/stove-kubeadm/patches
for c in etcd kube-apiserver kube-controller-manager kube-scheduler; do
  ready=; [ "$c" = kube-controller-manager ] || ready='    readinessProbe: {timeoutSeconds: 60, failureThreshold: 30}'
  printf 'spec:\n  containers:\n  - name: %s\n    livenessProbe: {timeoutSeconds: 60, failureThreshold: 30}\n%s\n' "$c" "$ready" \
    >/run/stove-kubeadm/patches/"$c"+strategic.yaml
done
cat >/run/stove-kubeadm/kubeadm.yaml <<EOT
apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
localAPIEndpoint: {advertiseAddress: $NODE_IP, bindPort: 6443}
nodeRegistration:
  criSocket: $SOCK
  imagePullPolicy: IfNotPresent
  kubeletExtraArgs:
  - {name: node-ip, value: $NODE_IP}
patches: {directory: /run/stove-kubeadm/patches}
# Under software emulation the control plane takes many minutes where a real machine takes seconds.
timeouts: {controlPlaneComponentHealthCheck: 30m0s, kubeletHealthCheck: 10m0s, kubernetesAPICall: 20m0s}
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: $K8S_VERSION
imageRepository: $REGISTRY/k8s
etcd: {local: {imageTag: "$ETCD_TAG"}}
dns: {imageTag: "$COREDNS_TAG"}
networking: {podSubnet: 10.244.0.0/16, serviceSubnet: 10.96.0.0/12}
# Leader election's 5 s requests time out under emulation: the two would lose their lease and restart,
# each restart costing minutes of the guest's CPU. One control-plane node: generous terms instead.
controllerManager:
  extraArgs: [{name: leader-elect-lease-duration, value: 120s}, {name: leader-elect-renew-deadline, value: 100s}, {name: leader-elect-retry-period, value: 10s}]
scheduler:
  extraArgs: [{name: leader-elect-lease-duration, value: 120s}, {name: leader-elect-renew-deadline, value: 100s}, {name: leader-elect-retry-period, value: 10s}]
---
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
# The guest's disk is small: no eviction for its few pods.
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
EOT
# kubeadm's own API client gives each request 10 s (cmd/kubeadm/app/util/kubeconfig: ToClientSet), which
# a starved guest's apiserver can miss once the control plane is up. Then, as an operator would, the
# phases after the control plane's are run again, once (the step's line says so): preflight, certs,
# kubeconfigs, manifests and the kubelet's start are skipped, as they are done.
init_once() { kubeadm init --config "$1" 2>&1 | tee -a /run/stove-kubeadm/init.log | grep --line-buffered -v '^\[certs\]\|^\[kubeconfig\]'; }
init_note=
if ! init_once /run/stove-kubeadm/kubeadm.yaml; then
  grep -q '^\[control-plane-check\] kube-apiserver is healthy' /run/stove-kubeadm/init.log || die "kubeadm init failed"
  echo "kubeadm-vm: kubeadm init failed after the control plane came up; its later phases once more"
  sed 's/^kind: InitConfiguration$/&\nskipPhases: [preflight, certs, kubeconfig, etcd, control-plane, kubelet-start]/' \
    /run/stove-kubeadm/kubeadm.yaml >/run/stove-kubeadm/kubeadm-again.yaml
  init_once /run/stove-kubeadm/kubeadm-again.yaml || die "kubeadm init failed twice"
  init_note="; its phases after wait-control-plane run twice"
fi
grep -q "Your Kubernetes control-plane has initialized successfully" /run/stove-kubeadm/init.log || die "kubeadm init did not say it initialized the control plane"
step "kubeadm init (the control plane as static pods on Stove, kubelet.service started by kubeadm$init_note)"

# --- 3. What the operator checks ------------------------------------------------------------------------------
[ "$(systemctl is-active kubelet.service)" = active ] || die "kubelet.service is not active"
kubelet_pid=$(systemctl show -P MainPID kubelet.service)
tr '\0' ' ' </proc/"$kubelet_pid"/cmdline | grep -q -- "--config=/var/lib/kubelet/config.yaml" || die "the kubelet does not run with 10-kubeadm.conf's flags"
grep -q "^containerRuntimeEndpoint: $SOCK" /var/lib/kubelet/config.yaml || die "kubeadm did not point the kubelet at $SOCK"
echo "kubeadm-vm: kubelet.service pid $kubelet_pid in $(cut -d: -f3 /proc/"$kubelet_pid"/cgroup): $(tr '\0' ' ' </proc/"$kubelet_pid"/cmdline)"
node_ready() { [ "$(kubectl get node "$NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]; }
until_ok 900 "node $NODE Ready" node_ready
step "node $NODE Ready"
for c in etcd kube-apiserver kube-controller-manager kube-scheduler; do
  until_ok 600 "$c running on Stove" sh -c "crictl ps --name '^$c\$' --state running -q | grep -q ."
done
crictl ps
for c in etcd kube-apiserver kube-controller-manager kube-scheduler; do
  id=$(crictl ps --name "^$c\$" --state running -q | head -1)
  pid=$(crictl inspect -o go-template --template '{{.info.pid}}' "$id")
  cg=$(cut -d: -f3 /proc/"$pid"/cgroup)
  case "$cg" in /kubepods.slice/*) ;; *) die "$c runs in $cg, not under kubepods.slice" ;; esac
  echo "kubeadm-vm: $c (static pod $c-$NODE) pid $pid in $cg"
  kubectl -n kube-system get pod "$c-$NODE" >/dev/null || die "no mirror pod $c-$NODE"
done
step "etcd, kube-apiserver, kube-controller-manager, kube-scheduler running on Stove (crictl ps), mirror pods in kube-system"

kubectl taint nodes "$NODE" node-role.kubernetes.io/control-plane:NoSchedule-
kubectl run sleeper --image "$BUSYBOX_IMAGE" --restart Never --command -- sleep 3600
kubectl wait --for=condition=Ready pod/sleeper --timeout=600s
[ "$(kubectl get pod sleeper -o jsonpath='{.spec.nodeName}')" = "$NODE" ] || die "the pod is not on $NODE"
crictl pods --name '^sleeper$' --state ready -q | grep -q . || die "Stove has no ready sandbox for the pod"
kubectl get pods -A -o wide
step "taint removed; pod sleeper scheduled and Running ($(kubectl get pod sleeper -o jsonpath='{.status.podIP}'))"

echo "kubeadm-vm: the guest's processes by CPU time so far:"; ps -eo pid,time,rss,comm --sort=-time | head -12

# --- 4. kubeadm reset ------------------------------------------------------------------------------------------
kubeadm reset -f --cri-socket "$SOCK" >/run/stove-kubeadm/reset.log 2>&1 || { tail -30 /run/stove-kubeadm/reset.log; die "kubeadm reset failed"; }
reset_done=1
left=$(crictl pods -q | wc -l)
[ "$left" = 0 ] || { crictl pods; die "$left pod sandboxes left on Stove after kubeadm reset"; }
systemctl disable --now --quiet kubelet.service
systemctl disable --now --quiet stove.service
step "kubeadm reset -f: no pod left on Stove; kubelet.service and stove.service stopped"
echo "kubeadm-vm: PASS in $((SECONDS - start)) s"
