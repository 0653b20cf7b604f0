/**
 * The `[nri]` table every NRI integration suite gives its daemon: NRI on, with its socket, plugin dir
 * and plugin config dir in the suite's own temp dir (`<dir>/nri.sock`, `<dir>/plugins`, `<dir>/conf.d`),
 * so suites and other runtimes on the host never share NRI's default paths.
 */
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
