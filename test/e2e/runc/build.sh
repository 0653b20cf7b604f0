#!/usr/bin/env bash
# test/e2e/runc/build.sh — builds runc of the version pinned in test/e2e/runc/go.mod (the OCI runtime of
# containerd 2.4's bundles) once, with cgo and seccomp as runc's own Makefile does, into
# $STOVE_E2E_CACHE/runc/<version>/ (default /var/cache/stove-e2e), and prints the binary's path as its
# last line. Needs Go at /usr/local/go (or GO), gcc, Debian's libseccomp-dev (make setup installs it) and
# the module proxy; exit 1 when it cannot build.
#
# Build tags are the Makefile's less libpathrs (a Rust library Debian 12 does not ship; runc then uses its
# Go path-resolution code, as `RUNC_BUILDTAGS=-libpathrs make` does). runc embeds its VERSION file, so
# `runc --version` prints the module's version; the commit line names the module version too.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
go=${GO:-/usr/local/go/bin/go}
cache=${STOVE_E2E_CACHE:-/var/cache/stove-e2e}
version=$(awk '$1 == "github.com/opencontainers/runc" { print $2; exit }' "$here/go.mod")
out=$cache/runc/$version
if [ ! -x "$out/runc" ]; then
  [ -x "$go" ] || { echo "runc/build.sh: no Go at $go" >&2; exit 1; }
  pkg-config --exists libseccomp || { echo "runc/build.sh: no libseccomp-dev (apt-get install libseccomp-dev, or make setup)" >&2; exit 1; }
  export GOMODCACHE=$cache/gomod GOCACHE=$cache/gocache GOTOOLCHAIN=local GOFLAGS=-mod=readonly CGO_ENABLED=1
  echo "runc/build.sh: building runc $version into $out" >&2
  rm -rf "$out.tmp" && mkdir -p "$out.tmp"
  (cd "$here" && "$go" build -trimpath -buildmode=pie -tags "seccomp urfave_cli_no_docs" \
    -ldflags "-X main.gitCommit=$version" -o "$out.tmp/runc" github.com/opencontainers/runc >&2) || { rm -rf "$out.tmp"; exit 1; }
  "$out.tmp/runc" --version | grep -q "^libseccomp: " || { echo "runc/build.sh: the build has no seccomp" >&2; rm -rf "$out.tmp"; exit 1; }
  rm -rf "$out" && mv "$out.tmp" "$out"
fi
echo "$out/runc"
