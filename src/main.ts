/**
 * The `stove` command: `serve` runs the daemon; `version`, `config` and `check` inspect it.
 */
import { parseArgs } from 'node:util';
import { loadConfigLayers, configOriginLines, configToToml, ConfigError, type ConfigSources } from './config/load.js';
import type { RootLogger } from './common/logger.js';
import type { Daemon } from './daemon.js';
import { createLogger } from './common/logger.js';
import { messageOf } from './common/errors.js';
// Each command imports what it runs when it runs: the daemon does not load the checks or the CLI client.

const USAGE = `usage: stove <command> [flags]

commands:
  serve     run the CRI daemon
  version   print the version
  config    print the effective configuration as TOML (--origin: with the file
            each value came from)
  check     check this node for what stove needs
  pull IMAGE [--username USER --password-stdin]
            pull an image through the running daemon, with progress; the
            password is read from stdin, or user and password come from
            STOVE_PULL_USERNAME and STOVE_PULL_PASSWORD (never from argv)
  images    list the daemon's images

flags (serve, config, check):
  --config FILE     configuration file (default /etc/stove/stove.toml)
  --config-dir DIR  drop-in files *.toml merged over it in lexical order
                    (default /etc/stove/stove.d)
  --socket PATH     CRI socket (default /run/stove/stove.sock)
  --root DIR        persistent state (default /var/lib/stove)
  --state DIR       volatile state (default /run/stove)
  --log-level LVL   debug, info, warn or error
  --metrics-address HOST:PORT
                    serve Prometheus metrics at http://HOST:PORT/metrics ("" = off)
`;

const FLAG_OPTIONS = {
  config: { type: 'string' },
  'config-dir': { type: 'string' },
  origin: { type: 'boolean' },
  socket: { type: 'string' },
  root: { type: 'string' },
  state: { type: 'string' },
  'log-level': { type: 'string' },
  'metrics-address': { type: 'string' },
  help: { type: 'boolean', short: 'h' },
  creds: { type: 'string' },
  username: { type: 'string' },
  'password-stdin': { type: 'boolean' },
} as const;

async function serve(sources: ConfigSources): Promise<number> {
  const config = (await loadConfigLayers(sources)).config;
  const log = createLogger(config.logLevel);
  const { startDaemon } = await import('./daemon.js');
  const daemon = await startDaemon(config, log);
  process.on('SIGHUP', () => void reload(daemon, sources, log));
  return new Promise<number>((resolve) => {
    let stopping = false;
    const stop = (signal: string) => {
      if (stopping) return;
      stopping = true;
      log.info('shutting down', { signal });
      daemon.stop().then(
        () => resolve(0),
        (err: unknown) => {
          log.error('shutdown failed', { error: messageOf(err) });
          resolve(1);
        },
      );
    };
    process.once('SIGTERM', () => stop('SIGTERM'));
    process.once('SIGINT', () => stop('SIGINT'));
  });
}

/**
 * SIGHUP: reads the main file and the drop-ins again and applies what can change live. A config that
 * does not load changes nothing: the daemon keeps its current one and goes on serving.
 */
async function reload(daemon: Daemon, sources: ConfigSources, log: RootLogger): Promise<void> {
  let loaded;
  try {
    loaded = await loadConfigLayers(sources);
  } catch (err) {
    log.error('config reload failed; keeping the current configuration', { error: messageOf(err) });
    return;
  }
  const report = daemon.reload(loaded.config);
  log.info('configuration reloaded', { files: loaded.files, applied: report.applied });
  for (const key of report.needsRestart) log.warn('configuration key changed; it takes effect after a restart', { key });
}

async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  if (!command || command === 'help' || command === '--help' || command === '-h') {
    process.stdout.write(USAGE);
    return command ? 0 : 2;
  }
  const { values, positionals } = parseArgs({ args: rest, options: FLAG_OPTIONS, allowPositionals: true, strict: true });
  if (values.help) {
    process.stdout.write(USAGE);
    return 0;
  }
  const sources: ConfigSources = {
    path: values.config,
    dir: values['config-dir'],
    overrides: {
      socket: values.socket,
      root: values.root,
      state: values.state,
      logLevel: values['log-level'],
      metricsAddress: values['metrics-address'],
    },
  };
  const load = async () => (await loadConfigLayers(sources)).config;
  switch (command) {
    case 'serve':
      return serve(sources);
    case 'version':
      process.stdout.write(`stove ${(await import('./daemon.js')).stoveVersion()} (CRI v1, node ${process.version})\n`);
      return 0;
    case 'config': {
      const loaded = await loadConfigLayers(sources);
      process.stdout.write(values.origin ? configOriginLines(loaded) : configToToml(loaded.config));
      return 0;
    }
    case 'check': {
      const { formatChecks, runChecks } = await import('./check/doctor.js');
      const results = await runChecks(await load());
      process.stdout.write(formatChecks(results) + '\n');
      return results.some((r) => r.status === 'fail') ? 1 : 0;
    }
    case 'pull': {
      if (positionals.length !== 1) {
        process.stderr.write(`stove: pull takes one image reference\n${USAGE}`);
        return 2;
      }
      if (values.creds !== undefined) {
        // Anything in argv is readable by every user on the node (ps, /proc/<pid>/cmdline).
        process.stderr.write('stove: pull: --creds is gone: it put the password on the command line; use --username with --password-stdin, or STOVE_PULL_USERNAME and STOVE_PULL_PASSWORD\n');
        return 2;
      }
      const { cliPull, pullCredentials } = await import('./cli/images.js');
      const auth = await pullCredentials({ username: values.username, passwordStdin: values['password-stdin'] ?? false }, process.env, process.stdin);
      return cliPull(await load(), positionals[0]!, auth, process.stdout);
    }
    case 'images':
      return (await import('./cli/images.js')).cliImages(await load(), process.stdout);
    default:
      process.stderr.write(`stove: unknown command "${command}" ${positionals.join(' ')}\n${USAGE}`);
      return 2;
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    const prefix = err instanceof ConfigError ? 'stove: config: ' : 'stove: ';
    process.stderr.write(prefix + messageOf(err) + '\n');
    process.exit(1);
  },
);
