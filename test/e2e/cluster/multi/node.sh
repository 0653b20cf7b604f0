#!/usr/bin/env bash
# test/e2e/cluster/multi/node.sh — what an operator does on one node of the three-node cluster:
#   node.sh exec NODE CMD...       CMD in NODE's network and mount namespaces (crictl, cat, mv, ip …)
#   node.sh kubelet-stop NODE      stops NODE's kubelet (SIGTERM; its pods and the runtime keep running)
#   node.sh kubelet-start NODE     starts it again as multi/up.sh did; prints its pid
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=lib.sh
source "$here/lib.sh"
[ -e "$W/up" ] || die "no three-node cluster in $W"
cmd=${1:-}; node=${2:-}
[[ " ${NODES[*]} " == *" $node "* ]] || die "usage: node.sh exec|kubelet-stop|kubelet-start NODE [CMD...] (NODE: ${NODES[*]})"
shift 2
case "$cmd" in
  exec) export PATH="$(cat "$W/bin-dir"):$PATH"; in_node "$node" "$@" ;;
  kubelet-stop) stop_process "kubelet-$node" ;;
  kubelet-start)
    pid=$(cat "$W/pids/kubelet-$node" 2>/dev/null) && kill -0 "$pid" 2>/dev/null && die "the kubelet of $node runs (pid $pid)"
    start_kubelet "$node" && cat "$W/pids/kubelet-$node" ;;
  *) die "no command $cmd" ;;
esac
