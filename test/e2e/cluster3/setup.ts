/**
 * Root hooks of the three-node suite (mocha --file): `up.sh --nodes 3` before the first test,
 * `down.sh --nodes 3` after the last, also when tests fail. CLUSTER_RUNTIME=containerd makes the nodes
 * on containerd 2.x (up.sh reads it); CLUSTER_KEEP=1 leaves the cluster up; CLUSTER_REUSE=1 uses one
 * already up (its up.sh output saved in $CLUSTER_DIR/up.out).
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { execa } from 'execa';
import { CLUSTER_DIR, SCRIPTS, useCluster } from './cluster.js';

const SKIP = process.getuid?.() !== 0 ? 'needs root' : undefined;
const REUSE = process.env.CLUSTER_REUSE === '1' && existsSync(join(CLUSTER_DIR, 'up.out'));

function parse(out: string): void {
  const lines = out.split('\n');
  const endpoints: Record<string, string> = {};
  for (const l of lines) {
    const m = /^NODE=(\S+) CRI_ENDPOINT=(\S+) KUBELET_PID=\d+$/.exec(l);
    if (m) endpoints[m[1]!] = m[2]!;
  }
  const v = (k: string) => lines.find((l) => l.startsWith(`${k}=`))?.slice(k.length + 1);
  const kubectl = v('KUBECTL');
  const kubeconfig = v('KUBECONFIG');
  if (!kubectl || !kubeconfig || Object.keys(endpoints).length !== 3) throw new Error(`up.sh --nodes 3 printed no NODE/KUBECTL/KUBECONFIG lines: ${out.slice(-2000)}`);
  const crictl = process.env.CRICTL ?? '/var/cache/stove-e2e/cri-tools/v1.36.0/crictl';
  if (!existsSync(crictl)) throw new Error(`no crictl at ${crictl} (BUILD_ONLY=1 test/e2e/critest.sh builds it; CRICTL names another)`);
  useCluster({ kubectl, kubeconfig, crictl, endpoints });
}

before(async function () {
  if (SKIP) {
    console.log(`three-node suite skipped: ${SKIP}`);
    this.skip();
  }
  if (REUSE) return parse(readFileSync(join(CLUSTER_DIR, 'up.out'), 'utf8'));
  this.timeout(90 * 60_000); // the first run builds Kubernetes, Flannel and metrics-server
  await execa(join(SCRIPTS, 'down.sh'), ['--nodes', '3'], { reject: false });
  const up = await execa(join(SCRIPTS, 'up.sh'), ['--nodes', '3'], { stderr: 'inherit', reject: false });
  if (up.exitCode !== 0) throw new Error(`up.sh --nodes 3 failed (exit ${up.exitCode}): ${up.stdout.slice(-2000)}`);
  writeFileSync(join(CLUSTER_DIR, 'up.out'), up.stdout);
  parse(up.stdout);
});

after(async function () {
  if (SKIP || REUSE || process.env.CLUSTER_KEEP === '1') return;
  this.timeout(10 * 60_000);
  const down = await execa(join(SCRIPTS, 'down.sh'), ['--nodes', '3'], { reject: false, all: true });
  if (down.exitCode !== 0) throw new Error(`down.sh --nodes 3 failed: ${down.all}`);
});
