/**
 * The operator's scenarios on three kubeadm nodes (cp-1, worker-1, worker-2), each a kubelet on its own
 * Stove (or, with CLUSTER_RUNTIME=containerd, containerd 2.x: the same scenarios, crictl against its
 * socket): what the nodes report, where the scheduler puts pods, the pod network and DNS, a node whose
 * kubelet stops, the apiserver down, a drain that keeps a PodDisruptionBudget, and `kubectl top` against
 * the pods' cgroups. The suites run in order; each step is bounded.
 */
import assert from 'node:assert/strict';
import { readFileSync, readdirSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { apply, busyboxImage, WANTED_RUNTIME, condition, crictl, getJson, isReady, kubectl, node, nodeScript, NODES, onNode, pods, waitFor, type NodeName, type PodJson } from './cluster.js';

const NS = 'scenarios';
const WORKERS = new Set(['worker-1', 'worker-2']);

function deployment(name: string, replicas: number, command: string, spec = '', container = ''): string {
  return `apiVersion: apps/v1
kind: Deployment
metadata: {name: ${name}, namespace: ${NS}}
spec:
  replicas: ${replicas}
  selector: {matchLabels: {app: ${name}}}
  template:
    metadata: {labels: {app: ${name}}}
    spec:
      terminationGracePeriodSeconds: 1
${spec}
      containers:
      - name: main
        image: ${busyboxImage()}
        command: [sh, -c, ${JSON.stringify(command)}]
        resources: {requests: {cpu: 10m, memory: 16Mi}}
${container}
`;
}

async function readyPods(selector: string, count: number, timeoutMs: number): Promise<PodJson[]> {
  return waitFor(`${count} Ready pods ${selector}`, timeoutMs, async () => {
    const ps = (await pods(NS, selector)).filter((p) => isReady(p) && !('deletionTimestamp' in p.metadata));
    return ps.length === count ? ps : undefined;
  });
}

describe(`three kubeadm nodes on ${WANTED_RUNTIME === 'stove' ? 'Stove' : 'containerd'}`, function () {
  this.timeout(15 * 60_000);

  before(async () => {
    await kubectl(['create', 'namespace', NS]);
    await waitFor('the default service account', 60_000, async () => (await kubectl(['-n', NS, 'get', 'serviceaccount', 'default'], { reject: false })).includes('default'));
  });
  after(async () => {
    await kubectl(['delete', 'namespace', NS, '--wait=false'], { reject: false });
  });

  describe('the nodes', () => {
    it(`lists 3 Ready nodes on ${WANTED_RUNTIME}://, each with its own /24 of 10.244.0.0/16`, async () => {
      const wide = await kubectl(['get', 'nodes', '-o', 'wide']);
      const cidrs = new Set<string>();
      for (const name of NODES) {
        const n = await node(name);
        assert.equal(condition(n, 'Ready')?.status, 'True', `${name} Ready`);
        assert.match(n.status.nodeInfo.containerRuntimeVersion, new RegExp(`^${WANTED_RUNTIME}://\\d+\\.\\d+`));
        assert.match(n.spec.podCIDR ?? '', /^10\.244\.\d+\.0\/24$/, `${name}'s podCIDR`);
        cidrs.add(n.spec.podCIDR!);
        assert.match(wide, new RegExp(`^${name}\\s+Ready\\s.*${WANTED_RUNTIME}://`, 'm'));
      }
      assert.equal(cidrs.size, 3);
      const jsonpath = await kubectl(['get', 'nodes', '-o', 'jsonpath={range .items[*]}{.metadata.name} {.spec.podCIDR}{"\\n"}{end}']);
      assert.equal(jsonpath.trim().split('\n').length, 3);
    });

    it("keeps kubeadm's control-plane taint on cp-1 only", async () => {
      const cp = await node('cp-1');
      assert.ok(cp.spec.taints?.some((t) => t.key === 'node-role.kubernetes.io/control-plane' && t.effect === 'NoSchedule'));
      for (const w of ['worker-1', 'worker-2'] as const) assert.ok(!(await node(w)).spec.taints?.length, `${w} has no taint`);
    });

    it('describes worker-1 with Conditions, Capacity, Allocatable, its pods and their requests summed', async () => {
      const d = await kubectl(['describe', 'node', 'worker-1']);
      for (const section of ['Conditions:', 'Capacity:', 'Allocatable:', 'Non-terminated Pods:', 'Allocated resources:']) assert.ok(d.includes(section), `${section} in ${d}`);
      assert.match(d, /kube-proxy-\w+/);
      assert.match(d, /kube-flannel-ds-\w+/);
      assert.match(d, /Resource\s+Requests\s+Limits[\s\S]*cpu\s+\d+m/);
    });
  });

  describe('scheduling', () => {
    it('puts a 6-replica Deployment on the workers only', async () => {
      await apply(deployment('six', 6, 'sleep 100000'));
      const ps = await readyPods('app=six', 6, 8 * 60_000);
      for (const p of ps) assert.ok(WORKERS.has(p.spec.nodeName!), `${p.metadata.name} on ${p.spec.nodeName}`);
      await kubectl(['-n', NS, 'delete', 'deployment', 'six', '--wait=false']);
    });

    it('schedules a DaemonSet on 2 nodes without the toleration, on 3 with it', async () => {
      const ds = (name: string, tolerations: string) => `apiVersion: apps/v1
kind: DaemonSet
metadata: {name: ${name}, namespace: ${NS}}
spec:
  selector: {matchLabels: {app: ${name}}}
  template:
    metadata: {labels: {app: ${name}}}
    spec:
      terminationGracePeriodSeconds: 1
${tolerations}
      containers:
      - {name: main, image: ${busyboxImage()}, command: [sleep, "100000"], resources: {requests: {cpu: 5m, memory: 8Mi}}}
`;
      await apply(ds('plain', ''));
      await apply(ds('everywhere', '      tolerations: [{key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}]'));
      const desired = (name: string) => async () => (await getJson<{ status: { desiredNumberScheduled?: number } }>(['-n', NS, 'daemonset', name])).status.desiredNumberScheduled;
      assert.equal(await waitFor('plain desired', 60_000, desired('plain')), 2);
      assert.equal(await waitFor('everywhere desired', 60_000, desired('everywhere')), 3);
      await kubectl(['-n', NS, 'delete', 'daemonset', 'plain', 'everywhere', '--wait=false']);
    });

    it('leaves a pod that fits no node Pending with FailedScheduling', async () => {
      await apply(`apiVersion: v1
kind: Pod
metadata: {name: too-big, namespace: ${NS}}
spec:
  containers:
  - {name: main, image: ${busyboxImage()}, command: [sleep, "100000"], resources: {requests: {cpu: "64", memory: 512Gi}}}
`);
      const ev = await waitFor('FailedScheduling', 90_000, async () => {
        const out = await kubectl(['-n', NS, 'get', 'events', '--field-selector', 'involvedObject.name=too-big,reason=FailedScheduling', '-o', 'jsonpath={.items[*].message}']);
        return out.trim() || undefined;
      });
      assert.match(ev, /Insufficient (cpu|memory)/);
      assert.equal((await getJson<PodJson>(['-n', NS, 'pod', 'too-big'])).status.phase, 'Pending');
      await kubectl(['-n', NS, 'delete', 'pod', 'too-big', '--wait=false']);
    });
  });

  describe('the pod network, kube-proxy and CoreDNS', () => {
    const onWorker = (w: string) => `      nodeSelector: {kubernetes.io/hostname: ${w}}`;
    let web: PodJson[] = [];

    before(async () => {
      await apply(
        deployment('web', 2, 'mkdir -p /www && hostname >/www/index.html && exec httpd -f -p 8080 -h /www', '      topologySpreadConstraints: [{maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: web}}}]'),
      );
      await apply(`apiVersion: v1
kind: Service
metadata: {name: web, namespace: ${NS}}
spec: {selector: {app: web}, ports: [{port: 80, targetPort: 8080}]}
`);
      for (const w of ['worker-1', 'worker-2']) await apply(deployment(`client-${w}`, 1, 'sleep 100000', onWorker(w)));
      web = await readyPods('app=web', 2, 6 * 60_000);
      await readyPods('app=client-worker-1', 1, 6 * 60_000);
      await readyPods('app=client-worker-2', 1, 6 * 60_000);
    });

    async function fromClient(w: string, url: string): Promise<string> {
      const [client] = await pods(NS, `app=client-${w}`);
      return kubectl(['-n', NS, 'exec', client!.metadata.name, '--', 'timeout', '15', 'wget', '-qO-', url], { timeoutMs: 60_000 });
    }

    it('spreads web over both workers', () => {
      assert.deepEqual(new Set(web.map((p) => p.spec.nodeName)), WORKERS);
    });

    it('reaches the Service by name through CoreDNS from pods on each worker', async () => {
      const names = new Set(web.map((p) => p.metadata.name));
      for (const w of ['worker-1', 'worker-2']) {
        const answer = (await waitFor(`web by name from ${w}`, 120_000, () => fromClient(w, `http://web.${NS}.svc.cluster.local/`).catch(() => undefined))).trim();
        assert.ok(names.has(answer), `${answer} is one of ${[...names].join(', ')}`);
      }
    });

    it("reaches the Service's ClusterIP through kube-proxy from every node's namespace", async () => {
      const ip = (await kubectl(['-n', NS, 'get', 'service', 'web', '-o', 'jsonpath={.spec.clusterIP}'])).trim();
      for (const n of NODES) {
        const answer = await waitFor(`web from ${n}`, 120_000, () => onNode(n, ['curl', '-fsS', '--max-time', '10', `http://${ip}/`]).catch(() => undefined));
        assert.ok(web.some((p) => p.metadata.name === answer.trim()), `${n} got ${answer}`);
      }
    });

    it('reaches a pod on worker-2 from a pod on worker-1 by its pod IP (VXLAN)', async () => {
      const target = web.find((p) => p.spec.nodeName === 'worker-2')!;
      const answer = await fromClient('worker-1', `http://${target.status.podIP}:8080/`);
      assert.equal(answer.trim(), target.metadata.name);
    });
  });

  describe('worker-2 fails and comes back', () => {
    const tolerant = `      affinity: {nodeAffinity: {preferredDuringSchedulingIgnoredDuringExecution: [{weight: 100, preference: {matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [worker-2]}]}}]}}
      tolerations:
      - {key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 30}
      - {key: node.kubernetes.io/not-ready, operator: Exists, effect: NoExecute, tolerationSeconds: 30}`;
    let before: PodJson[] = [];
    let kept: Map<string, string>;

    it('runs pods tolerating an unreachable node for 30 s on worker-2', async () => {
      await apply(deployment('tolerant', 2, 'i=0; while true; do echo tick $i; i=$((i+1)); sleep 2; done', tolerant));
      before = await readyPods('app=tolerant', 2, 6 * 60_000);
      for (const p of before) assert.equal(p.spec.nodeName, 'worker-2');
      // what must survive the kubelet's absence: worker-2's DaemonSet containers
      const ds = (await getJson<{ items: PodJson[] }>(['pods', '-A', '--field-selector', 'spec.nodeName=worker-2'])).items.filter((p) => !p.metadata.name.startsWith('tolerant'));
      kept = new Map(ds.flatMap((p) => (p.status.containerStatuses ?? []).map((c) => [`${p.metadata.name}/${c.name}`, `${c.containerID}#${c.restartCount}`] as [string, string])));
      assert.ok(kept.size >= 2, 'kube-proxy and flannel run on worker-2');
    });

    it('marks worker-2 NotReady, Unknown "Kubelet stopped posting node status", its Lease stale, tainted unreachable', async () => {
      await nodeScript('kubelet-stop', 'worker-2');
      const n = await waitFor('worker-2 Ready=Unknown', 150_000, async () => {
        const w = await node('worker-2');
        return condition(w, 'Ready')?.status === 'Unknown' ? w : undefined;
      });
      for (const type of ['Ready', 'MemoryPressure', 'DiskPressure', 'PIDPressure']) {
        assert.equal(condition(n, type)?.status, 'Unknown', type);
        assert.equal(condition(n, type)?.message, 'Kubelet stopped posting node status.');
      }
      assert.match(await kubectl(['get', 'node', 'worker-2']), /worker-2\s+NotReady/);
      await waitFor('the unreachable taint', 60_000, async () => (await node('worker-2')).spec.taints?.some((t) => t.key === 'node.kubernetes.io/unreachable' && t.effect === 'NoExecute'));
      const renew = async () => (await kubectl(['-n', 'kube-node-lease', 'get', 'lease', 'worker-2', '-o', 'jsonpath={.spec.renewTime}'])).trim();
      const r1 = await renew();
      const r2 = await waitFor('20 s on the lease', 40_000, async () => {
        const cp1 = (await kubectl(['-n', 'kube-node-lease', 'get', 'lease', 'cp-1', '-o', 'jsonpath={.spec.renewTime}'])).trim();
        return Date.now() - Date.parse(cp1) < 15_000 && Date.now() - Date.parse(r1) > 20_000 ? renew() : undefined;
      });
      assert.equal(r2, r1, "worker-2's Lease is not renewed");
    });

    it("evicts the tolerating pods after 30 s and recreates them on worker-1, while crictl on worker-2 still answers", async () => {
      const moved = await waitFor('tolerant pods Ready on worker-1', 5 * 60_000, async () => {
        const ps = (await pods(NS, 'app=tolerant')).filter((p) => isReady(p) && p.spec.nodeName === 'worker-1');
        return ps.length === 2 ? ps : undefined;
      });
      assert.ok(moved.every((p) => !before.some((b) => b.metadata.uid === p.metadata.uid)));
      // the node's runtime, asked directly as an operator would on worker-2
      const ps = await crictl('worker-2', ['ps', '--name', 'main', '-o', 'json']);
      const running = (JSON.parse(ps) as { containers: { id: string; state: string; labels: Record<string, string> }[] }).containers.filter((c) => c.labels['io.kubernetes.pod.namespace'] === NS);
      assert.ok(running.length >= 2, 'the evicted pods still run on worker-2 (no kubelet stops them)');
      assert.match(await crictl('worker-2', ['pods']), /tolerant-/);
      assert.match(await crictl('worker-2', ['logs', '--tail', '2', running[0]!.id]), /tick \d+/);
    });

    it('is Ready again with its kubelet back, its containers adopted, none restarted', async () => {
      await nodeScript('kubelet-start', 'worker-2');
      await waitFor('worker-2 Ready', 5 * 60_000, async () => condition(await node('worker-2'), 'Ready')?.status === 'True');
      await waitFor("the evicted pods gone from worker-2's runtime", 3 * 60_000, async () => !(await crictl('worker-2', ['pods'])).includes('tolerant-'));
      const ds = (await getJson<{ items: PodJson[] }>(['pods', '-A', '--field-selector', 'spec.nodeName=worker-2'])).items;
      const now = new Map(ds.flatMap((p) => (p.status.containerStatuses ?? []).map((c) => [`${p.metadata.name}/${c.name}`, `${c.containerID}#${c.restartCount}`] as [string, string])));
      for (const [k, v] of kept) assert.equal(now.get(k), v, `${k} kept its container and restart count`);
      await kubectl(['-n', NS, 'delete', 'deployment', 'tolerant', '--wait=false']);
    });
  });

  describe('the apiserver down', () => {
    it('leaves crictl answering on every node and the pods running', async () => {
      await apply(deployment('steady', 2, 'i=0; while true; do echo steady $i; i=$((i+1)); sleep 1; done'));
      const steady = await readyPods('app=steady', 2, 5 * 60_000);
      await onNode('cp-1', ['mv', '/etc/kubernetes/manifests/kube-apiserver.yaml', '/etc/kubernetes/kube-apiserver.yaml']);
      try {
        await waitFor('the apiserver gone', 3 * 60_000, async () => !(await crictl('cp-1', ['ps', '--name', 'kube-apiserver', '-q'])).trim() && (await kubectl(['get', '--raw', '/readyz'], { reject: false, timeoutMs: 10_000 })).includes('refused'));
        for (const n of NODES) {
          const listed = await crictl(n, ['ps', '-o', 'json']);
          const containers = (JSON.parse(listed) as { containers: { id: string; labels: Record<string, string> }[] }).containers;
          assert.ok(containers.some((c) => c.labels['io.kubernetes.container.name'] === 'kube-proxy'), `kube-proxy listed on ${n}`);
          assert.ok((await crictl(n, ['pods'])).includes('kube-proxy-'));
        }
        for (const p of steady) {
          const w = p.spec.nodeName as NodeName;
          const id = p.status.containerStatuses![0]!.containerID!.replace(/^[a-z]+:\/\//, '');
          assert.match(await crictl(w, ['ps', '-q']), new RegExp(id));
          const count = async () => Number(/steady (\d+)/.exec((await crictl(w, ['logs', '--tail', '1', id])).trim())?.[1] ?? -1);
          const a = await count();
          assert.ok(a >= 0, `${p.metadata.name}'s log on ${w}`);
          await waitFor(`${p.metadata.name} logging on ${w}`, 60_000, async () => (await count()) > a);
        }
      } finally {
        await onNode('cp-1', ['mv', '/etc/kubernetes/kube-apiserver.yaml', '/etc/kubernetes/manifests/kube-apiserver.yaml']);
        await waitFor('the apiserver back', 6 * 60_000, async () => (await kubectl(['get', '--raw', '/readyz'], { reject: false, timeoutMs: 10_000 })).trim() === 'ok');
      }
      for (const p of await pods(NS, 'app=steady')) assert.equal(p.status.containerStatuses?.[0]?.restartCount, 0);
      await kubectl(['-n', NS, 'delete', 'deployment', 'steady', '--wait=false']);
    });
  });

  describe('maintenance', () => {
    it('drains worker-1 keeping a PodDisruptionBudget, then uncordons it', async () => {
      await apply(deployment('budget', 4, 'sleep 100000', '      topologySpreadConstraints: [{maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, nodeTaintsPolicy: Honor, labelSelector: {matchLabels: {app: budget}}}]'));
      await readyPods('app=budget', 4, 6 * 60_000);
      await apply(`apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: budget, namespace: ${NS}}
spec: {minAvailable: 3, selector: {matchLabels: {app: budget}}}
`);
      await waitFor('the budget observed', 60_000, async () => (await getJson<{ status: { disruptionsAllowed?: number } }>(['-n', NS, 'pdb', 'budget'])).status.disruptionsAllowed === 1);
      const out = await kubectl(['drain', 'worker-1', '--ignore-daemonsets', '--delete-emptydir-data', '--timeout=600s'], { timeoutMs: 660_000, all: true });
      assert.match(out, /Cannot evict pod as it would violate the pod's disruption budget/);
      assert.match(out, /node\/worker-1 drained/);
      const ps = await readyPods('app=budget', 4, 5 * 60_000);
      assert.ok(ps.every((p) => p.spec.nodeName === 'worker-2'));
      assert.equal((await node('worker-1')).spec.unschedulable, true);
      await kubectl(['uncordon', 'worker-1']);
      assert.ok(!(await node('worker-1')).spec.unschedulable);
      await kubectl(['-n', NS, 'delete', 'deployment', 'budget', '--wait=false']);
      await kubectl(['-n', NS, 'delete', 'pdb', 'budget', '--wait=false']);
    });
  });

  describe('kubectl top', () => {
    it("shows figures within 20% of the pods' cgroups", async () => {
      // 64 MiB in a memory-backed emptyDir: charged to the pod's memory cgroup, steady
      await apply(
        deployment(
          'hog',
          1,
          'head -c 67108864 /dev/zero >/scratch/fill && sleep 100000',
          '      volumes: [{name: scratch, emptyDir: {medium: Memory}}]',
          '        volumeMounts: [{name: scratch, mountPath: /scratch}]',
        ),
      );
      const [hog] = await readyPods('app=hog', 1, 5 * 60_000);
      const nodeName = hog!.spec.nodeName as NodeName;
      const top = await waitFor('kubectl top pod hog', 5 * 60_000, async () => {
        const out = await kubectl(['-n', NS, 'top', 'pod', '-l', 'app=hog', '--no-headers'], { reject: false });
        const m = /\s(\d+)m\s+(\d+)Mi/.exec(out);
        return m && Number(m[2]) >= 64 ? Number(m[2]) * 1024 * 1024 : undefined;
      });
      const uid = hog!.metadata.uid.replaceAll('-', '_');
      const base = `/sys/fs/cgroup/memory/stove3/${nodeName}/kubepods`;
      const dir = [join(base, `pod${hog!.metadata.uid}`), join(base, 'burstable', `pod${hog!.metadata.uid}`), join(base, 'besteffort', `pod${hog!.metadata.uid}`), join(base, `pod${uid}`)].find((d) => existsSync(d));
      assert.ok(dir, `the pod's memory cgroup under ${base}: ${readdirSync(base).join(' ')}`);
      const usage = Number(readFileSync(join(dir, 'memory.usage_in_bytes'), 'utf8'));
      const inactive = Number(/^total_inactive_file (\d+)$/m.exec(readFileSync(join(dir, 'memory.stat'), 'utf8'))?.[1] ?? 0);
      const workingSet = usage - inactive;
      assert.ok(Math.abs(top - workingSet) <= 0.2 * workingSet, `kubectl top ${top} vs the cgroup's working set ${workingSet}`);
      const nodes = await kubectl(['top', 'nodes', '--no-headers']);
      for (const n of NODES) assert.match(nodes, new RegExp(`^${n}\\s+\\d+m\\s+\\d+%\\s+\\d+Mi\\s+\\d+%`, 'm'));
      await kubectl(['-n', NS, 'delete', 'deployment', 'hog', '--wait=false']);
    });
  });
});
