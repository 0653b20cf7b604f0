/**
 * Root hooks of the cluster suite (mocha --file): brings the single-node cluster up with up.sh before
 * the first test and removes it with down.sh after the last, also when tests fail. With
 * CLUSTER_KEEP=1 the cluster stays up afterwards for a look by hand (down.sh removes it); with
 * CLUSTER_REUSE=1 a cluster already up is used as it is (and kept).
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { execa } from 'execa';
import { CLUSTER_DIR, CLUSTER_SCRIPTS, useCluster } from './kube.js';

const REUSE = process.env.CLUSTER_REUSE === '1' && existsSync(join(CLUSTER_DIR, 'up'));

const SKIP = process.getuid?.() !== 0 ? 'needs root' : undefined;

before(async function () {
  if (SKIP) {
    console.log(`cluster suite skipped: ${SKIP}`);
    this.skip();
  }
  if (REUSE) {
    useCluster(join(readFileSync(join(CLUSTER_DIR, 'bin-dir'), 'utf8').trim(), 'kubectl'), join(CLUSTER_DIR, 'admin.kubeconfig'));
    return;
  }
  this.timeout(45 * 60_000); // the first run builds Kubernetes
  await execa(join(CLUSTER_SCRIPTS, 'down.sh'), { reject: false });
  const up = await execa(join(CLUSTER_SCRIPTS, 'up.sh'), { stderr: 'inherit', reject: false });
  if (up.exitCode !== 0) throw new Error(`up.sh failed (exit ${up.exitCode}): ${up.stdout.slice(-2000)}`);
  const vars = Object.fromEntries(up.stdout.split('\n').filter((l) => /^[A-Z]+=/.test(l)).map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]));
  if (!vars.KUBECTL || !vars.KUBECONFIG) throw new Error(`up.sh printed no KUBECTL/KUBECONFIG: ${up.stdout.slice(-2000)}`);
  useCluster(vars.KUBECTL, vars.KUBECONFIG);
});

after(async function () {
  if (SKIP || REUSE || process.env.CLUSTER_KEEP === '1') return;
  this.timeout(5 * 60_000);
  const down = await execa(join(CLUSTER_SCRIPTS, 'down.sh'), { reject: false, all: true });
  if (down.exitCode !== 0) throw new Error(`down.sh failed: ${down.all}`);
});
