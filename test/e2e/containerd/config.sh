# Sourced by test/e2e/cluster/lib.sh and test/e2e/critest.sh: writes containerd's config from the one
# template (config.toml beside this file) that bench/lib/containerd.ts reads too.
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
