#!/usr/bin/env bash
# test/e2e/cluster/restart.sh NAME [SIGNAL] — stops one of the cluster's processes (kubelet, stove, …) with
# SIGNAL (default TERM; KILL for a crash) and starts it again with the command up.sh gave it.
#   KUBELET_CONFIG_PATCH  with NAME=kubelet: `key: value` lines that replace those keys of its config; the
#                         config before is kept and put back by the next restart.sh kubelet
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=lib.sh
source "$here/lib.sh"
name=${1:?usage: restart.sh NAME [SIGNAL]}
[ -f "$W/cmd/$name" ] || die "$name is not one of the cluster's processes"
stop_process "$name" "${2:-TERM}"
if [ "$name" = kubelet ]; then
  cfg="$W/kubelet/config.yaml"
  [ -f "$cfg.orig" ] && mv "$cfg.orig" "$cfg"
  if [ -n "${KUBELET_CONFIG_PATCH:-}" ]; then
    cp "$cfg" "$cfg.orig"
    while IFS= read -r line; do # each `key: value` replaces that top-level key
      [ -n "$line" ] || continue
      sed -i "/^${line%%:*}:/d" "$cfg" && echo "$line" >>"$cfg"
    done <<<"$KUBELET_CONFIG_PATCH"
  fi
fi
mapfile -d '' cmd <"$W/cmd/$name"
start "$name" "${cmd[@]}"
