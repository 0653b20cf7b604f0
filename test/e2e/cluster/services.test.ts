/** Services through CoreDNS and kube-proxy, NodePorts and hostPorts, with pods networked by Stove. */
import { strict as assert } from 'node:assert';
import { NODE_IP, apply, busyboxPod, httpService, getJson, kubectl, suiteNamespace, waitFor, waitPodReady } from './kube.js';


async function httpGet(url: string): Promise<string> {
  const res = await fetch(url, { signal: AbortSignal.timeout(5000) });
  return (await res.text()).trim();
}

describe('cluster: services, DNS, NodePort and hostPort', function () {
  this.timeout(240_000);
  const ns = suiteNamespace('e2e-services');
  let clusterIP: string;
  let nodePort: number;
  before(async () => {
    await apply(
      busyboxPod(ns.name, 'web', 'mkdir -p /www; echo "served by $(hostname)" > /www/index.html; exec httpd -f -p 8080 -h /www', {
          labels: { app: 'web' },
          containerYaml: '    ports: [{containerPort: 8080, hostPort: 18089}]\n    readinessProbe: {tcpSocket: {port: 8080}, periodSeconds: 1}',
        }),
    );
    await apply(`${httpService(ns.name, 'web', 'web')}---\n${httpService(ns.name, 'web-nodeport', 'web', 'NodePort')}`);
    await apply(busyboxPod(ns.name, 'client', 'exec sleep 3600'));
    await waitPodReady(ns.name, 'web');
    await waitPodReady(ns.name, 'client');
    clusterIP = (await getJson<{ spec: { clusterIP: string } }>(['-n', ns.name, 'service', 'web'])).spec.clusterIP;
    nodePort = (await getJson<{ spec: { ports: { nodePort: number }[] } }>(['-n', ns.name, 'service', 'web-nodeport'])).spec.ports[0]!.nodePort;
  });

  it('resolves the Service by name through CoreDNS from another pod and reaches it', async () => {
    const lookup = await waitFor('the Service name to resolve', 60_000, async () =>
      kubectl(['-n', ns.name, 'exec', 'client', '--', 'nslookup', `web.${ns.name}.svc.cluster.local`]).then((out) => (out.includes(clusterIP) ? out : undefined)),
    );
    assert.match(lookup, new RegExp(`Address:\\s*${clusterIP.replace(/\./g, '\\.')}`));
    // The short name through the pod's search domains; busybox's wget cannot resolve names itself
    // (a static glibc binary has no NSS), so it goes to the address CoreDNS gave.
    // busybox's nslookup tries every search domain and fails if any does not know the name.
    const short = await kubectl(['-n', ns.name, 'exec', 'client', '--', 'sh', '-c', 'nslookup web; true']);
    assert.match(short, new RegExp(`Name:\\s*web\\.${ns.name}\\.svc\\.cluster\\.local\\s+Address:\\s*${clusterIP.replace(/\./g, '\\.')}`));
    const resolved = /Name:\s*\S+\s+Address:\s*(\S+)/.exec(short)![1];
    const body = await waitFor('the Service to answer at the address CoreDNS gave', 60_000, async () =>
      kubectl(['-n', ns.name, 'exec', 'client', '--', 'wget', '-qO-', '-T', '5', `http://${resolved}/index.html`]),
    );
    assert.equal(body.trim(), 'served by web');
  });

  it('reaches the ClusterIP from the node through kube-proxy', async () => {
    assert.equal(await waitFor('the ClusterIP from the node', 60_000, () => httpGet(`http://${clusterIP}/index.html`)), 'served by web');
  });

  it('reaches a NodePort from the node, on loopback and on the node address', async () => {
    assert.equal(await waitFor('the NodePort on 127.0.0.1', 60_000, () => httpGet(`http://127.0.0.1:${nodePort}/index.html`)), 'served by web');
    assert.equal(await httpGet(`http://${NODE_IP}:${nodePort}/index.html`), 'served by web');
  });

  it('reaches a hostPort on the node address', async () => {
    assert.equal(await waitFor('the hostPort', 60_000, () => httpGet(`http://${NODE_IP}:18089/index.html`)), 'served by web');
  });
});
