/**
 * What every NRI integration suite sets up alike. The `[nri]` table it gives its daemon: NRI on, with its socket, plugin dir
 * and plugin config dir in the suite's own temp dir (`<dir>/nri.sock`, `<dir>/plugins`, `<dir>/conf.d`),
 * so suites and other runtimes on the host never share NRI's default paths.
 */
import { chmod, mkdir, mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** The table's lines; `timeouts` sets how long a plugin may take to register and to answer. */
export function nriToml(dir: string, timeouts?: { registration: string; request: string }): string[] {
  return [
    '[nri]',
    'enable = true',
    `socket_path = "${join(dir, 'nri.sock')}"`,
    `plugin_path = "${join(dir, 'plugins')}"`,
    `plugin_config_path = "${join(dir, 'conf.d')}"`,
    ...(timeouts ? [`plugin_registration_timeout = "${timeouts.registration}"`, `plugin_request_timeout = "${timeouts.request}"`] : []),
  ];
}

/** A suite's NRI temp dir (`prefix` names it), searchable by the daemon's users, with `plugins/` made. */
export async function nriTestDir(prefix: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  await chmod(dir, 0o711);
  await mkdir(join(dir, 'plugins'));
  return dir;
}

/** Installs the v0.12 test plugin (`plugin`) as `10-recorder` in `dir`'s plugins, logging to `log`. */
export async function installRecorder(dir: string, plugin: string, log: string): Promise<void> {
  await writeFile(join(dir, 'plugins', '10-recorder'), `#!/bin/sh\nexec ${plugin} -log ${log}\n`, { mode: 0o755 });
}
