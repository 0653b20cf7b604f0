/**
 * Builds the images the three-node cluster runs and pushes them to its registry (multi/up.sh calls this):
 * the control plane kubeadm runs as static pods (kube-apiserver, kube-controller-manager, kube-scheduler,
 * etcd), kube-proxy with iptables, CoreDNS and the pause image kubeadm pulls, all under one repository
 * kubeadm's `imageRepository` names; flanneld (with busybox for its CNI-config step, and iptables);
 * metrics-server; busybox for the scenarios. Each holds the binary build.sh made; iptables and its
 * libraries and xtables modules are the host's (Debian's). Prints `NAME=reference` lines.
 *
 *   node images.js <registry-url> <bin-dir> <repo-path> <k8s-version> <etcd-tag> <coredns-tag> <flannel-version> <metrics-server-version> [all|metrics-server|but-metrics-server|kubeadm]
 *
 * metrics-server's build takes longest on a new machine: up.sh pushes the others first and its image once
 * the build it started meanwhile is done. `kubeadm` pushes what `kubeadm init` and its addons pull and
 * busybox, without Flannel and metrics-server (the guest's one-node cluster, test/vm/kubeadm.sh).
 */
import { execFileSync } from 'node:child_process';
import { lstatSync, readFileSync, readdirSync, readlinkSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { busyboxLayer, pushBusyboxImage, pushImage, type LayerEntry, type RegistryEndpoint } from '../../../helpers/image-builder.js';

const [url, bin, repo, k8sVersion, etcdTag, corednsTag, flannelVersion, metricsVersion, which = 'all'] = process.argv.slice(2);
if (!url || !bin || !repo || !k8sVersion || !etcdTag || !corednsTag || !flannelVersion || !metricsVersion) {
  console.error('usage: images.js <registry-url> <bin-dir> <repo-path> <k8s-version> <etcd-tag> <coredns-tag> <flannel-version> <metrics-server-version>');
  process.exit(2);
}
const registry: RegistryEndpoint = { host: new URL(url).host, url, dispatcher: undefined, authorization: () => undefined };

/** Host files copied into a layer as they are on the host: every symlink on the way kept a symlink. */
class HostFiles {
  readonly entries: LayerEntry[] = [];
  private readonly seen = new Set<string>();

  add(path: string): void {
    const abs = resolve(path);
    if (abs === '/' || this.seen.has(abs)) return;
    this.seen.add(abs);
    // the parent first, resolved: a symlinked directory (/lib → usr/lib) stays a symlink
    const parent = dirname(abs);
    this.add(parent);
    const real = join(this.realDir(parent), basename(abs));
    if (real !== abs && this.seen.has(real)) return;
    this.seen.add(real);
    const st = lstatSync(real);
    const rel = real.slice(1);
    if (st.isSymbolicLink()) {
      const target = readlinkSync(real);
      this.entries.push({ type: 'symlink', path: rel, target });
      this.add(resolve(dirname(real), target));
    } else if (st.isDirectory()) {
      this.entries.push({ type: 'dir', path: rel, mode: st.mode & 0o7777 });
    } else {
      this.entries.push({ path: rel, mode: st.mode & 0o7777, content: readFileSync(real) });
    }
  }

  /** Adds a dynamically linked program and the libraries `ldd` names for it. */
  addProgram(path: string): void {
    this.add(path);
    const out = execFileSync('ldd', [path], { encoding: 'utf8' });
    for (const m of out.matchAll(/(?:=> )?(\/\S+) \(0x/g)) this.add(m[1]!);
  }

  private realDir(dir: string): string {
    let d = '/';
    for (const part of dir.split('/').filter(Boolean)) {
      const next = join(d, part);
      d = lstatSync(next).isSymbolicLink() ? this.realDir(resolve(d, readlinkSync(next))) : next;
    }
    return d;
  }
}

/** iptables (the host's nft backend), its save/restore commands, libraries and xtables modules. */
function iptablesEntries(): LayerEntry[] {
  const files = new HostFiles();
  files.addProgram('/usr/sbin/xtables-nft-multi');
  const xt = '/usr/lib/x86_64-linux-gnu/xtables';
  for (const m of readdirSync(xt)) files.addProgram(join(xt, m));
  const entries = files.entries;
  for (const name of ['iptables', 'iptables-save', 'iptables-restore', 'ip6tables', 'ip6tables-save', 'ip6tables-restore'])
    entries.push({ type: 'symlink', path: `usr/sbin/${name}`, target: 'xtables-nft-multi' });
  entries.push({ type: 'dir', path: 'run' }, { type: 'dir', path: 'tmp', mode: 0o1777 }, { type: 'dir', path: 'var' }, { type: 'dir', path: 'var/lib' });
  return entries;
}

/** The binary NAME from build.sh's dir at AT (`''`: the root) in a layer. */
function binaryLayer(name: string, at = 'usr/local/bin'): LayerEntry[] {
  const entries: LayerEntry[] = [];
  let d = '';
  for (const part of at.split('/').filter(Boolean)) {
    d = d ? `${d}/${part}` : part;
    entries.push({ type: 'dir', path: d });
  }
  entries.push({ path: d ? `${d}/${name}` : name, mode: 0o755, content: readFileSync(join(bin!, name)) });
  return entries;
}

const etcPasswd: LayerEntry[] = [
  { type: 'dir', path: 'etc' },
  { path: 'etc/passwd', content: 'root:x:0:0:root:/:/nonexistent\nnobody:x:65534:65534:nobody:/:/nonexistent\n' },
  { path: 'etc/group', content: 'root:x:0:\nnogroup:x:65534:\n' },
  { type: 'dir', path: 'tmp', mode: 0o1777 },
];

const out: string[] = [];
if (which === 'metrics-server') {
  const metrics = await pushImage(registry, `${repo}/metrics-server:${metricsVersion}`, { layers: [etcPasswd, binaryLayer('metrics-server', '')], entrypoint: ['/metrics-server'] });
  console.log(`METRICS_SERVER_IMAGE=${metrics.reference}`);
  process.exit(0);
}
for (const name of ['kube-apiserver', 'kube-controller-manager', 'kube-scheduler']) {
  const img = await pushImage(registry, `${repo}/${name}:${k8sVersion}`, { layers: [etcPasswd, binaryLayer(name)], entrypoint: [`/usr/local/bin/${name}`] });
  out.push(`${name.toUpperCase().replaceAll('-', '_')}_IMAGE=${img.reference}`);
}
const iptables = iptablesEntries();
const proxy = await pushImage(registry, `${repo}/kube-proxy:${k8sVersion}`, { layers: [etcPasswd, iptables, binaryLayer('kube-proxy')], entrypoint: ['/usr/local/bin/kube-proxy'] });
out.push(`KUBE_PROXY_IMAGE=${proxy.reference}`);
const etcd = await pushImage(registry, `${repo}/etcd:${etcdTag}`, { layers: [etcPasswd, binaryLayer('etcd')], entrypoint: ['/usr/local/bin/etcd'] });
out.push(`ETCD_IMAGE=${etcd.reference}`);
const coredns = await pushImage(registry, `${repo}/coredns:${corednsTag}`, {
  layers: [etcPasswd, binaryLayer('coredns', '')],
  entrypoint: ['/coredns'],
  exposedPorts: ['53/udp', '53/tcp'],
});
out.push(`COREDNS_IMAGE=${coredns.reference}`);
// kubeadm pulls it; Stove runs pods from its own pause root (containerd from this one).
const pause = await pushImage(registry, `${repo}/pause:3.10.2`, {
  layers: [[{ path: 'pause', mode: 0o755, content: readFileSync(new URL('../../../../../rootfs/pause/bin/pause', import.meta.url)) }]],
  entrypoint: ['/pause'],
});
out.push(`PAUSE_IMAGE=${pause.reference}`);
if (which !== 'kubeadm') {
  const flannel = await pushImage(registry, `${repo}/flannel:${flannelVersion}`, {
    layers: [busyboxLayer(), iptables, binaryLayer('flanneld', 'opt/bin')],
    entrypoint: ['/opt/bin/flanneld'],
  });
  out.push(`FLANNEL_IMAGE=${flannel.reference}`);
}
if (which === 'all') {
  const metrics = await pushImage(registry, `${repo}/metrics-server:${metricsVersion}`, { layers: [etcPasswd, binaryLayer('metrics-server', '')], entrypoint: ['/metrics-server'] });
  out.push(`METRICS_SERVER_IMAGE=${metrics.reference}`);
}
const busybox = await pushBusyboxImage(registry, 'e2e/busybox:1', { labels: { 'io.stove.e2e': 'busybox' } });
out.push(`BUSYBOX_IMAGE=${busybox.reference}`);
console.log(out.join('\n'));
