/**
 * The `stove` command: `serve` runs the daemon; `version`, `config` and `check` inspect it.
 */
import { parseArgs } from 'node:util';
import { loadConfig, configToToml, ConfigError, type ConfigOverrides } from './config/load.js';
import { createLogger } from './common/logger.js';
import { startDaemon, stoveVersion } from './daemon.js';
import { formatChecks, runChecks } from './check/doctor.js';
import { messageOf } from './common/errors.js';
import { cliImages, cliPull } from './cli/images.js';

const USAGE = `usage: stove <command> [flags]

commands:
  serve     run the CRI daemon
  version   print the version
  config    print the effective configuration as TOML
  check     check this node for what stove needs
  pull IMAGE [--creds USER:PASSWORD]
            pull an image through the running daemon, with progress
  images    list the daemon's images

flags (serve, config, check):
  --config FILE     configuration file (default /etc/stove/stove.toml)
  --socket PATH     CRI socket (default /run/stove/stove.sock)
  --root DIR        persistent state (default /var/lib/stove)
  --state DIR       volatile state (default /run/stove)
  --log-level LVL   debug, info, warn or error
`;

const FLAG_OPTIONS = {
  config: { type: 'string' },
  socket: { type: 'string' },
  root: { type: 'string' },
  state: { type: 'string' },
  'log-level': { type: 'string' },
  help: { type: 'boolean', short: 'h' },
  creds: { type: 'string' },
} as const;

async function serve(configPath: string | undefined, overrides: ConfigOverrides): Promise<number> {
  const config = await loadConfig(configPath, overrides);
  const log = createLogger(config.logLevel);
  const daemon = await startDaemon(config, log);
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
  const overrides: ConfigOverrides = {
    socket: values.socket,
    root: values.root,
    state: values.state,
    logLevel: values['log-level'],
  };
  switch (command) {
    case 'serve':
      return serve(values.config, overrides);
    case 'version':
      process.stdout.write(`stove ${stoveVersion()} (CRI v1, node ${process.version})\n`);
      return 0;
    case 'config':
      process.stdout.write(configToToml(await loadConfig(values.config, overrides)));
      return 0;
    case 'check': {
      const results = await runChecks(await loadConfig(values.config, overrides));
      process.stdout.write(formatChecks(results) + '\n');
      return results.some((r) => r.status === 'fail') ? 1 : 0;
    }
    case 'pull': {
      if (positionals.length !== 1) {
        process.stderr.write(`stove: pull takes one image reference\n${USAGE}`);
        return 2;
      }
      const config = await loadConfig(values.config, overrides);
      return cliPull(config, positionals[0]!, values.creds, process.stdout);
    }
    case 'images':
      return cliImages(await loadConfig(values.config, overrides), process.stdout);
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
