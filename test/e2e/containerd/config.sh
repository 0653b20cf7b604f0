# Sourced by test/e2e/cluster/lib.sh, test/e2e/cluster/multi/lib.sh and test/e2e/critest.sh: writes
# containerd's config from the one template (config.toml beside this file) that bench/lib/containerd.ts
# reads too.
# shellcheck shell=bash

# containerd_config OUT NAME=VALUE… — config.toml with every @NAME@ replaced; fails when a field is
# left without a value.
containerd_config() {
  local out=$1 template kv name
  shift
  template="$(dirname "${BASH_SOURCE[0]}")/config.toml"
  local text; text=$(grep -v '^#' "$template")
  for kv in "$@"; do
    name=${kv%%=*}
    text=${text//@"$name"@/${kv#*=}}
  done
  if [[ $text =~ @[A-Z_]+@ ]]; then
    echo "containerd_config: no value for ${BASH_REMATCH[0]}" >&2
    return 1
  fi
  printf '%s\n' "$text" >"$out"
}

# containerd_node_config DIR SOCKET REGISTRY SANDBOX_IMAGE CNI_CONF_DIR — a kubelet's containerd, in Stove's
# place on a cluster node: DIR/config.toml with root, state and registry config under DIR, the runtime's
# socket at SOCKET, REGISTRY (host:port) reached over plain HTTP through DIR/certs.d, SANDBOX_IMAGE as the
# pause image, runc with the cgroupfs driver, Debian's CNI plugins and the config in CNI_CONF_DIR. Start
# it as `containerd --config DIR/config.toml` with the runc v2 shim on PATH.
containerd_node_config() {
  local dir=$1 socket=$2 registry=$3 sandbox=$4 cni_conf=$5
  mkdir -p "$dir/certs.d/$registry"
  printf 'server = "http://%s"\n[host."http://%s"]\n  capabilities = ["pull", "resolve"]\n' "$registry" "$registry" \
    >"$dir/certs.d/$registry/hosts.toml"
  containerd_config "$dir/config.toml" ROOT="$dir/root" STATE="$dir/state" SOCKET="$socket" SANDBOX_IMAGE="$sandbox" \
    MAX_CONCURRENT_DOWNLOADS=3 RUNC=/usr/bin/runc CNI_BIN_DIR=/usr/lib/cni CNI_CONF_DIR="$cni_conf" CERTS_DIR="$dir/certs.d"
}
