/**
 * Builds the images Kubernetes' e2e suite runs (test/utils/image/manifest.go of the pinned version) from
 * what is on this machine, pushes them to the cluster's registry under the names the suite asks for, and
 * writes the KUBE_TEST_REPO_LIST file that points the suite there (images.sh calls this).
 *
 *   node images.js <registry-url> <e2e-bin-dir> <kubernetes-source-dir> <debian-root> <repo-list-out>
 *
 * - every image's shell: the ash of Debian's busybox as /bin/sh (specs match its messages, "/bin/sh:
 *   can't create /file: Read-only file system"), and Debian's bash as /bin/bash. It is the dynamically
 *   linked busybox (images.sh passes it as BUSYBOX_BIN): busybox-static's ash is built with
 *   FEATURE_SH_STANDALONE and runs its own applets before PATH, so `nc -u` was busybox's nc without
 *   -u where the upstream images (Alpine's ash) run OpenBSD's /usr/bin/nc;
 * - the busybox image's `sh` on PATH (/usr/bin/sh, before /bin) is bash: Debian patches ash to drop
 *   environment variables whose names no shell could set (`data-1`, `1-data`, `$_-x`;
 *   temp-deb-installer-hack.patch, FEATURE_DI_ENV_HACK, on only in the installer's busybox-udeb) before
 *   `sh -c env` sees them, where upstream busybox 1.37 passes them on; no other Debian shell both keeps
 *   them and prints ash's messages (bash, ksh93, yash and zsh keep them; dash, mksh and posh drop them).
 *   Specs that run `/bin/sh` get ash, specs that run `sh` see every variable the runtime set;
 * - a tools root (the base of agnhost and of glibc-dns-testing): Debian's dig/nslookup (bind9), nc
 *   (OpenBSD), curl, ip and ss (iproute2) and getent, with the libraries ldd lists;
 * - agnhost (both tags the suite uses) = tools root + the agnhost binary built from the pinned module,
 *   its porter certificates, /uploads and the user and group its Dockerfile adds;
 * - kitten and nautilus = agnhost + their html; busybox = busybox with those shells;
 * - nginx (both tags) = Debian's nginx with its libraries; nonroot = busybox as uid 1234; nonewprivs
 *   and regression-issue-74839 from the pinned module; pause = Stove's static pause.
 * `<debian-root>` is where images.sh unpacked the Debian packages (apt-get download, dpkg-deb -x).
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, realpathSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { BUSYBOX_BIN, busyboxRootEntries, GROUP, PASSWD, pushImage, type LayerEntry, type RegistryEndpoint } from '../../helpers/image-builder.js';

const [url, binDir, k8sSrc, debRoot, repoListOut] = process.argv.slice(2);
if (!url || !binDir || !k8sSrc || !debRoot || !repoListOut) {
  console.error('usage: images.js <registry-url> <e2e-bin-dir> <kubernetes-source-dir> <debian-root> <repo-list-out>');
  process.exit(2);
}
const registry: RegistryEndpoint = { host: new URL(url).host, url, dispatcher: undefined, authorization: () => undefined };
const E2E = 'e2e-test-images';
const K8S = 'k8s';
const LIB_PATH = [`${debRoot}/usr/lib/x86_64-linux-gnu`, `${debRoot}/lib/x86_64-linux-gnu`].join(':');

/** Adds `path` (a file read through symlinks) once. */
function addFile(entries: Map<string, LayerEntry>, path: string, content: Buffer, mode = 0o755): void {
  const key = path.replace(/^\/+/, '');
  if (!entries.has(key)) entries.set(key, { path: key, mode, content });
}

/** The libraries `ldd` lists for `binary` (the unpacked Debian libraries first); fails on a missing one. */
function libraries(binary: string): { at: string; from: string }[] {
  const out = execFileSync('ldd', [binary], { encoding: 'utf8', env: { ...process.env, LD_LIBRARY_PATH: LIB_PATH } });
  const libs: { at: string; from: string }[] = [];
  for (const line of out.split('\n')) {
    if (/not found/.test(line)) throw new Error(`${binary}: ${line.trim()} (images.sh unpacks the Debian packages it needs)`);
    const m = /=> (\/\S+) \(/.exec(line) ?? /^\s*(\/\S+) \(/.exec(line);
    if (!m) continue;
    const from = m[1]!;
    // A library from the unpacked packages goes where Debian installs it.
    const at = from.startsWith(debRoot) ? from.slice(debRoot.length) : from;
    libs.push({ at, from });
  }
  return libs;
}

/** A binary (from the host or the unpacked packages) at `at`, with its libraries. */
function addBinary(entries: Map<string, LayerEntry>, from: string, at: string): void {
  addFile(entries, at, readFileSync(from));
  for (const lib of libraries(from)) addFile(entries, lib.at, readFileSync(realpathSync(lib.from)));
}

const deb = (path: string) => {
  const p = join(debRoot, path);
  if (!existsSync(p)) throw new Error(`${p} is missing (images.sh unpacks the Debian packages)`);
  return p;
};

/** Debian's bash as /bin/bash, and the libraries of both bash and busybox (whose ash is /bin/sh). */
function shellEntries(): LayerEntry[] {
  const entries = new Map<string, LayerEntry>();
  addBinary(entries, '/bin/bash', '/bin/bash');
  for (const lib of libraries(BUSYBOX_BIN)) addFile(entries, lib.at, readFileSync(realpathSync(lib.from)));
  return [...entries.values()];
}

const base = busyboxRootEntries({ applets: 'hardlink' });
const shell = shellEntries();

/** The tools agnhost's Dockerfile installs (Alpine's there; Debian's here). */
function toolEntries(): LayerEntry[] {
  const entries = new Map<string, LayerEntry>();
  addBinary(entries, deb('usr/bin/dig'), '/usr/bin/dig');
  addBinary(entries, deb('usr/bin/nslookup'), '/usr/bin/nslookup');
  addBinary(entries, deb('bin/nc.openbsd'), '/usr/bin/nc');
  addBinary(entries, '/usr/bin/curl', '/usr/bin/curl');
  addBinary(entries, '/usr/sbin/ip', '/usr/sbin/ip');
  addBinary(entries, '/usr/bin/ss', '/usr/bin/ss');
  addBinary(entries, '/usr/bin/getent', '/usr/bin/getent');
  addFile(entries, '/etc/nsswitch.conf', Buffer.from('passwd: files\ngroup: files\nhosts: files dns\nnetworks: files\n'), 0o644);
  addFile(entries, '/etc/os-release', readFileSync('/etc/os-release'), 0o644);
  return [...entries.values()];
}
const tools = toolEntries();

// uid and gid 1000 are agnhost's user-defined-in-image (busybox's `user` gives them up).
const withoutUser = (text: string) => text.split('\n').filter((l) => !/^user:/.test(l)).join('\n').replace(/,?\buser\b/g, '');
const AGNHOST_PASSWD = `${withoutUser(PASSWD)}user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n`;
const AGNHOST_GROUP = `${withoutUser(GROUP)}user-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n`;
const agnhostFiles: LayerEntry[] = [
  { path: 'agnhost', mode: 0o755, content: readFileSync(join(binDir, 'agnhost')) },
  { type: 'symlink', path: 'agnhost-2', target: 'agnhost' },
  { type: 'dir', path: 'uploads' },
  { type: 'dir', path: 'home/user-defined-in-image', uid: 1000, gid: 1000 },
  { path: 'localhost.crt', content: readFileSync(join(k8sSrc, 'test/images/agnhost/porter/localhost.crt')) },
  { path: 'localhost.key', content: readFileSync(join(k8sSrc, 'test/images/agnhost/porter/localhost.key')) },
  { path: 'etc/passwd', content: AGNHOST_PASSWD },
  { path: 'etc/group', content: AGNHOST_GROUP },
];
const agnhostSettings = { entrypoint: ['/agnhost'], cmd: ['pause'], exposedPorts: ['80/tcp', '8080/tcp', '8081/tcp', '9376/tcp', '5000/tcp'] };

const pushed: string[] = [];
const push = async (name: string, options: Parameters<typeof pushImage>[2]) => {
  const image = await pushImage(registry, name, options);
  pushed.push(image.reference);
  return image;
};

for (const tag of ['2.63.0', '2.55']) await push(`${E2E}/agnhost:${tag}`, { layers: [base, shell, tools, agnhostFiles], ...agnhostSettings });
for (const name of ['kitten', 'nautilus']) {
  const html = join(k8sSrc, 'test/images', name, 'html');
  await push(`${E2E}/${name}:1.8`, {
    layers: [
      base,
      shell,
      tools,
      agnhostFiles,
      [
        { path: `${name}.jpg`, content: readFileSync(join(html, `${name}.jpg`)) },
        { path: 'data.json', content: readFileSync(join(html, 'data.json')) },
      ],
    ],
    ...agnhostSettings,
    cmd: ['test-webserver'],
  });
}
await push(`${E2E}/glibc-dns-testing:2.0.0`, { layers: [base, shell, tools], cmd: ['bash'] });
// `sh` through PATH is bash here (see above): /usr/bin comes before /bin in the image's PATH.
await push(`${E2E}/busybox:1.37.0-1`, { layers: [base, shell, [{ type: 'symlink', path: 'usr/bin/sh', target: '/bin/bash' }]], cmd: ['sh'] });
await push(`${E2E}/nonroot:1.5`, { layers: [base, shell], cmd: ['sh'], user: '1234' });
await push(`${E2E}/nonewprivs:1.4`, {
  layers: [base, shell, [{ type: 'dir', path: 'usr/local' }, { type: 'dir', path: 'usr/local/bin' }, { path: 'usr/local/bin/nnp', mode: 0o4755, content: readFileSync(join(binDir, 'nonewprivs')) }]],
  cmd: ['nnp'],
});
await push(`${E2E}/regression-issue-74839:1.4`, { layers: [[{ path: 'regression-issue-74839', mode: 0o755, content: readFileSync(join(binDir, 'regression-issue-74839')) }]], entrypoint: ['/regression-issue-74839'] });

/** nginx as the upstream image runs it: in the foreground, port 80, logs to the container's output. */
function nginxEntries(): LayerEntry[] {
  const entries = new Map<string, LayerEntry>();
  addBinary(entries, deb('usr/sbin/nginx'), '/usr/sbin/nginx');
  addFile(entries, '/etc/nginx/mime.types', readFileSync(deb('etc/nginx/mime.types')), 0o644);
  const conf = [
    'user root;',
    'worker_processes 1;',
    'error_log /dev/stderr notice;',
    'pid /run/nginx.pid;',
    'events { worker_connections 1024; }',
    'http {',
    '  include /etc/nginx/mime.types;',
    '  access_log /dev/stdout;',
    '  server { listen 80; listen [::]:80; location / { root /usr/share/nginx/html; index index.html; } }',
    '}',
    '',
  ].join('\n');
  addFile(entries, '/etc/nginx/nginx.conf', Buffer.from(conf), 0o644);
  addFile(entries, '/usr/share/nginx/html/index.html', Buffer.from('<html><body><h1>Welcome to nginx!</h1></body></html>\n'), 0o644);
  const out = [...entries.values()];
  for (const d of ['var/log/nginx', 'var/lib/nginx', 'var/lib/nginx/body', 'var/cache/nginx', 'usr/lib/nginx/modules']) out.push({ type: 'dir', path: d });
  return out;
}
const nginx = nginxEntries();
for (const tag of ['1.15-4', '1.27-0']) {
  await push(`${E2E}/nginx:${tag}`, { layers: [base, shell, nginx], cmd: ['nginx', '-g', 'daemon off;'], exposedPorts: ['80/tcp'], stopSignal: 'SIGQUIT' });
}
const pauseBin = new URL('../../../../rootfs/pause/bin/pause', import.meta.url);
await push(`${K8S}/pause:3.10.2`, { layers: [[{ path: 'pause', mode: 0o755, content: readFileSync(pauseBin) }]], entrypoint: ['/pause'] });

// Every registry key of manifest.go's RegistryList: the ones the selection uses point at what was pushed,
// the rest at the same registry (where an image they name is simply missing).
const host = registry.host;
writeFileSync(
  repoListOut,
  [
    `promoterE2eRegistry: ${host}/${E2E}`,
    `buildImageRegistry: ${host}/build-image`,
    `gcEtcdRegistry: ${host}/${K8S}`,
    `gcRegistry: ${host}/${K8S}`,
    `sigStorageRegistry: ${host}/sig-storage`,
    `privateRegistry: ${host}/k8s-authenticated-test`,
    `dockerLibraryRegistry: ${host}/library`,
    `cloudProviderGcpRegistry: ${host}/cloud-provider-gcp`,
    '',
  ].join('\n'),
);
for (const reference of pushed) console.log(reference);
