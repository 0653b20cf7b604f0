/** Volumes, security contexts, resources, image volumes and user namespaces, as the kubelet asks Stove for them. */
import { strict as assert } from 'node:assert';
import { apply, busyboxPod, image, kubectl, pod, suiteNamespace, waitFor, waitPodReady } from './kube.js';

describe('cluster: volumes, security contexts and resources', function () {
  this.timeout(240_000);
  const ns = suiteNamespace('e2e-volumes');

  const exec = (name: string, script: string) => kubectl(['-n', ns.name, 'exec', name, '--', 'sh', '-c', script]);

  it('mounts ConfigMap, Secret, emptyDir, projected and downward-API volumes', async () => {
    await apply(`apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: ${ns.name}}
data: {greeting: hello-configmap}
---
apiVersion: v1
kind: Secret
metadata: {name: secret, namespace: ${ns.name}}
stringData: {password: hunter2}
---
apiVersion: v1
kind: Pod
metadata: {name: volumes, namespace: ${ns.name}, labels: {tier: e2e}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: ${image('BUSYBOX_IMAGE')}
    command: [sleep, '3600']
    env:
    - {name: FROM_CONFIGMAP, valueFrom: {configMapKeyRef: {name: settings, key: greeting}}}
    volumeMounts:
    - {name: config, mountPath: /config}
    - {name: secret, mountPath: /secret}
    - {name: scratch, mountPath: /scratch}
    - {name: memory, mountPath: /memory}
    - {name: projected, mountPath: /projected}
    - {name: podinfo, mountPath: /podinfo}
  volumes:
  - {name: config, configMap: {name: settings}}
  - {name: secret, secret: {secretName: secret, defaultMode: 0400}}
  - {name: scratch, emptyDir: {}}
  - {name: memory, emptyDir: {medium: Memory, sizeLimit: 16Mi}}
  - name: projected
    projected:
      sources:
      - configMap: {name: settings}
      - serviceAccountToken: {path: token, expirationSeconds: 3600}
  - name: podinfo
    downwardAPI:
      items:
      - {path: labels, fieldRef: {fieldPath: metadata.labels}}
      - {path: name, fieldRef: {fieldPath: metadata.name}}
`);
    await waitPodReady(ns.name, 'volumes');
    assert.equal(await exec('volumes', 'cat /config/greeting'), 'hello-configmap');
    assert.equal(await exec('volumes', 'echo $FROM_CONFIGMAP'), 'hello-configmap');
    assert.equal(await exec('volumes', 'cat /secret/password'), 'hunter2');
    assert.match(await exec('volumes', 'stat -L -c %a /secret/password'), /^400$/);
    assert.equal(await exec('volumes', 'echo x > /scratch/f && cat /scratch/f'), 'x');
    assert.match(await exec('volumes', 'grep " /memory " /proc/mounts'), /tmpfs/);
    assert.equal(await exec('volumes', 'cat /projected/greeting'), 'hello-configmap');
    assert.match(await exec('volumes', 'cat /projected/token'), /^eyJ/);
    assert.equal(await exec('volumes', 'cat /podinfo/name'), 'volumes');
    assert.match(await exec('volumes', 'cat /podinfo/labels'), /tier="e2e"/);
  });

  it('applies runAsUser, fsGroup and readOnlyRootFilesystem', async () => {
    await apply(
      busyboxPod(ns.name, 'secured', 'exec sleep 3600', {
        specYaml: '  securityContext: {runAsUser: 1000, runAsGroup: 3000, fsGroup: 2000}\n  volumes: [{name: data, emptyDir: {}}]',
        containerYaml: `    securityContext: {readOnlyRootFilesystem: true, allowPrivilegeEscalation: false}
    volumeMounts: [{name: data, mountPath: /data}]`,
      }),
    );
    await waitPodReady(ns.name, 'secured');
    assert.equal(await exec('secured', 'id -u; id -g'), '1000\n3000');
    assert.match(await exec('secured', 'id -G'), /\b2000\b/);
    assert.equal(await exec('secured', 'stat -c %g /data'), '2000');
    assert.equal(await exec('secured', 'touch /data/ok && stat -c %g /data/ok'), '2000');
    await assert.rejects(exec('secured', 'touch /rootfs-write'), /Read-only file system/);
  });

  it('shows requests and limits in the container\'s cgroup', async () => {
    await apply(
      busyboxPod(ns.name, 'limited', 'exec sleep 3600', {
        containerYaml: '    resources: {requests: {cpu: 250m, memory: 32Mi}, limits: {cpu: 500m, memory: 64Mi}}',
      }),
    );
    await waitPodReady(ns.name, 'limited');
    const v2 = (await exec('limited', 'test -f /sys/fs/cgroup/cgroup.controllers && echo v2 || echo v1')) === 'v2';
    if (v2) {
      assert.equal(await exec('limited', 'cat /sys/fs/cgroup/memory.max'), String(64 * 1024 * 1024));
      assert.equal(await exec('limited', 'cat /sys/fs/cgroup/cpu.max'), '50000 100000');
    } else {
      assert.equal(await exec('limited', 'cat /sys/fs/cgroup/memory/memory.limit_in_bytes'), String(64 * 1024 * 1024));
      assert.equal(await exec('limited', 'cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us'), '50000');
      assert.equal(await exec('limited', 'cat /sys/fs/cgroup/cpu/cpu.shares'), '256');
    }
  });

  it('mounts an image volume read-only', async () => {
    await apply(
      busyboxPod(ns.name, 'imagevol', 'exec sleep 3600', {
        specYaml: `  volumes: [{name: data, image: {reference: '${image('DATA_IMAGE')}', pullPolicy: IfNotPresent}}]`,
        containerYaml: '    volumeMounts: [{name: data, mountPath: /image}, {name: data, mountPath: /sub, subPath: data/sub}]',
      }),
    );
    await waitPodReady(ns.name, 'imagevol');
    assert.equal(await exec('imagevol', 'cat /image/data/hello.txt'), 'hello from an image volume');
    assert.equal(await exec('imagevol', 'cat /sub/inner.txt'), 'inner');
    await assert.rejects(exec('imagevol', 'touch /image/data/new'), /Read-only file system/);
  });

  it('runs a pod with hostUsers: false in a user namespace of its own', async () => {
    await apply(busyboxPod(ns.name, 'userns', 'exec sleep 3600', { specYaml: '  hostUsers: false' }));
    await waitFor('the user-namespaced pod Ready', 120_000, async () => {
      const p = await pod(ns.name, 'userns');
      const waiting = p.status.containerStatuses?.[0]?.state.waiting;
      if (waiting?.reason && /Err|Invalid/.test(waiting.reason)) throw new Error(`${waiting.reason}: ${waiting.message}`);
      return p.status.conditions?.some((c) => c.type === 'Ready' && c.status === 'True');
    });
    const map = (await exec('userns', 'cat /proc/self/uid_map')).trim().split(/\s+/);
    assert.equal(map[0], '0');
    assert.notEqual(map[1], '0', 'root in the pod is not root on the host');
    assert.equal(await exec('userns', 'id -u'), '0');
  });
});
