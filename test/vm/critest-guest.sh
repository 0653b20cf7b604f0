#!/bin/bash
# test/vm/critest-guest.sh — the guest's side of test/vm/critest.sh: serves the registry storage that
# travelled on the checkout's disk ($STOVE_VM_DATA/registry, the conformance kit's images) with the guest's
# docker-registry on 127.0.0.1:5000 (the guest has no network), then runs the whole critest suite with
# test/e2e/critest.sh against a Stove daemon of its own (OCI_RUNTIME passes through, e.g. /usr/bin/crun),
# and stops the registry however the run ends. Exit status: test/e2e/critest.sh's.
set -uo pipefail
cd "$(dirname "$0")/../.."
[[ -n ${STOVE_VM:-} && -d ${STOVE_VM_DATA:-}/registry && -x ${STOVE_VM_CRITEST:-} ]] ||
  { echo "critest-guest.sh: runs in the guest of test/vm/critest.sh (needs STOVE_VM_DATA/registry and STOVE_VM_CRITEST)" >&2; exit 2; }
mkdir -p /run/stove-critest
cat >/run/stove-critest/registry.yml <<EOT
version: 0.1
log: {level: warn}
storage: {filesystem: {rootdirectory: $STOVE_VM_DATA/registry}, delete: {enabled: true}}
http: {addr: 127.0.0.1:5000}
EOT
systemd-run --quiet --unit stove-critest-registry /usr/bin/docker-registry serve /run/stove-critest/registry.yml
trap 'systemctl stop stove-critest-registry.service 2>/dev/null || true' EXIT
for _ in $(seq 120); do timeout 5 busybox wget -q -O /dev/null http://127.0.0.1:5000/v2/ 2>/dev/null && break; sleep 0.5; done
timeout 5 busybox wget -q -O /dev/null http://127.0.0.1:5000/v2/ || { echo "critest-guest.sh: the registry on 127.0.0.1:5000 does not answer" >&2; exit 1; }
echo "critest-guest.sh: $(${OCI_RUNTIME:-runc} --version | head -1), registry up at $(cut -d' ' -f1 /proc/uptime)s of uptime"
CRITEST=$STOVE_VM_CRITEST MIRROR=http://127.0.0.1:5000 SKIP_BUILD=1 test/e2e/critest.sh "$@"
status=$?
echo "critest-guest.sh: critest.sh exit $status at $(cut -d' ' -f1 /proc/uptime)s of uptime"
exit "$status"
