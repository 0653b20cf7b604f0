/**
 * Exec, attach and port-forward end to end: a real `stove serve` (the container tests' ContainerWorld:
 * its own CNI bridge, loopback registry, busybox images), and clients that speak to the URLs the daemon
 * hands out — the SPDY test client (test/helpers/spdy-client.ts, as client-go does: streams opened in
 * order, resize as JSON lines, the status on the error stream) and `ws` for the WebSocket channels.
 */
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import WebSocket from 'ws';
import { AttachRequest, ExecRequest, PortForwardRequest } from '../../../src/gen/runtime/v1/api.js';
import { ContainerWorld, eventually, skipReason } from '../container/world.js';
import { spdyUpgrade, type ClientStream, type SpdyClient } from '../../helpers/spdy-client.js';
import { suiteHooks } from '../../helpers/suite.js';

export { eventually, rejectsWith, skipReason } from '../container/world.js';

/** What client-go offers for exec and attach (newest first). */
export const COMMAND_PROTOCOLS = ['v5.channel.k8s.io', 'v4.channel.k8s.io', 'v3.channel.k8s.io', 'v2.channel.k8s.io', 'channel.k8s.io'];

/** The streams of one exec or attach, opened in client-go's order. */
export interface CommandSession {
  client: SpdyClient;
  error: ClientStream;
  stdin?: ClientStream;
  stdout?: ClientStream;
  stderr?: ClientStream;
  resize?: ClientStream;
}

/** The decoded status of a finished exec: its exit code, or the failure message. */
export interface Outcome {
  exitCode?: number;
  failure?: string;
}

/** Reads the v4 status JSON from the error stream ('' = success). */
export function parseStatus(text: string): Outcome {
  if (text.trim() === '') return { exitCode: 0 };
  const status = JSON.parse(text) as { status: string; reason?: string; message?: string; details?: { causes?: { reason?: string; message?: string }[] } };
  if (status.status === 'Success') return { exitCode: 0 };
  if (status.reason === 'NonZeroExitCode') {
    const cause = status.details?.causes?.find((c) => c.reason === 'ExitCode');
    return { exitCode: Number(cause?.message) };
  }
  return { failure: status.message ?? text };
}

export class StreamingWorld extends ContainerWorld {
  readonly clients: SpdyClient[] = [];
  readonly sockets: WebSocket[] = [];

  async execUrl(partial: Partial<ExecRequest>): Promise<string> {
    return (await this.daemon.clients.runtime.exec(ExecRequest.fromPartial(partial))).url;
  }

  async attachUrl(partial: Partial<AttachRequest>): Promise<string> {
    return (await this.daemon.clients.runtime.attach(AttachRequest.fromPartial(partial))).url;
  }

  async portForwardUrl(podSandboxId: string, port: number[] = []): Promise<string> {
    return (await this.daemon.clients.runtime.portForward(PortForwardRequest.fromPartial({ podSandboxId, port }))).url;
  }

  /** Upgrades to SPDY on `url` (the 101 is asserted) and remembers the client for cleanup. */
  async connect(url: string, protocols = COMMAND_PROTOCOLS): Promise<SpdyClient> {
    const r = await spdyUpgrade(url, protocols);
    if (r.status !== 101 || !r.client) throw new Error(`upgrade of ${url} answered ${r.status}: ${r.body}`);
    this.clients.push(r.client);
    return r.client;
  }

  /** Connects and opens error, stdin, stdout, stderr, resize (those asked for), as client-go does. */
  async openCommand(url: string, streams: { stdin?: boolean; stdout?: boolean; stderr?: boolean; tty?: boolean }): Promise<CommandSession> {
    const client = await this.connect(url);
    const session: CommandSession = { client, error: await client.open({ streamtype: 'error' }) };
    if (streams.stdin) session.stdin = await client.open({ streamtype: 'stdin' });
    if (streams.stdout) session.stdout = await client.open({ streamtype: 'stdout' });
    if (streams.stderr) session.stderr = await client.open({ streamtype: 'stderr' });
    if (streams.tty) session.resize = await client.open({ streamtype: 'resize' });
    return session;
  }

  /** Runs an exec to its end over SPDY: optional input (then stdin is closed), all output, the outcome. */
  async streamExec(
    containerId: string,
    cmd: string[],
    options: { input?: Buffer | string; stderr?: boolean; timeoutMs?: number } = {},
  ): Promise<{ stdout: string; stderr: string; raw: Buffer } & Outcome> {
    const stdin = options.input !== undefined;
    const stderr = options.stderr ?? true;
    const url = await this.execUrl({ containerId, cmd, stdin, stdout: true, stderr });
    const s = await this.openCommand(url, { stdin, stdout: true, stderr });
    if (stdin) {
      await writeChunked(s.stdin!, Buffer.from(options.input!));
      s.stdin!.end();
    }
    const timeoutMs = options.timeoutMs ?? 20_000;
    const [out, err, status] = await Promise.all([
      s.stdout!.readAll(timeoutMs),
      s.stderr ? s.stderr.readAll(timeoutMs) : Promise.resolve(Buffer.alloc(0)),
      s.error.readAll(timeoutMs),
    ]);
    const outcome = parseStatus(status.toString());
    return { stdout: out.toString(), stderr: err.toString(), raw: out, ...outcome };
  }

  /** A WebSocket on `url` with the given subprotocols; resolves once open. */
  async websocket(url: string, protocols: string[]): Promise<{ ws: WebSocket; messages: Buffer[]; closed: Promise<number> }> {
    const ws = new WebSocket(url.replace(/^http/, 'ws'), protocols);
    this.sockets.push(ws);
    const messages: Buffer[] = [];
    ws.on('message', (data) => messages.push(data as Buffer));
    const closed = new Promise<number>((resolve) => ws.on('close', (code) => resolve(code)));
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
    });
    return { ws, messages, closed };
  }

  /** Closes every client a test opened (so no session outlives it). */
  closeClients(): void {
    for (const c of this.clients.splice(0)) c.close();
    for (const ws of this.sockets.splice(0)) ws.terminate();
  }

  /**
   * What exec, attach and port-forward sessions may leave: exec scratch dirs, exec attach links (16 hex
   * digits; containers' are 64), exec conmons, and socat/nsenter processes (they name a netns pin).
   */
  async sessionLeftovers(): Promise<string[]> {
    const out: string[] = [];
    const { state, dir } = this.daemon;
    const execDirs = await readdir(join(state, 'exec')).catch(() => [] as string[]);
    if (execDirs.length) out.push(`exec dirs: ${execDirs.join(' ')}`);
    const links = (await readdir(join(state, 'attach')).catch(() => [] as string[])).filter((n) => /^[0-9a-f]{16}$/.test(n));
    if (links.length) out.push(`exec attach links: ${links.join(' ')}`);
    for (const name of await readdir('/proc')) {
      if (!/^\d+$/.test(name)) continue;
      const argv = (await readFile(`/proc/${name}/cmdline`, 'utf8').catch(() => '')).split('\0');
      if (argv.some((a) => a.startsWith(`--net=${dir}/`))) out.push(`forwarder ${name}: ${argv.join(' ')}`);
      if (argv[0]?.endsWith('conmon') && argv.includes('-e') && argv.some((a) => a.startsWith(dir + '/'))) out.push(`exec conmon ${name}`);
    }
    return out;
  }

  /**
   * Waits until the daemon has ended `count` attach sessions to the container (its "attach finished"
   * debug line): a detach has been handled once this returns.
   */
  async attachesEnded(containerId: string, count = 1, timeoutMs = 15_000): Promise<void> {
    const ended = () =>
      this.daemon
        .output()
        .split('\n')
        .filter((line) => line.includes('"msg":"attach finished"') && line.includes(`"containerId":"${containerId}"`)).length;
    await eventually(`the daemon to end ${count} attach session(s) to ${containerId}`, () => ended() >= count, timeoutMs);
  }

  /** sessionLeftovers() once sessions had `timeoutMs` to end (they end asynchronously once their client is gone). */
  async settledSessionLeftovers(timeoutMs = 5000): Promise<string[]> {
    const settled = await eventually('sessions to be cleaned up', async () => (await this.sessionLeftovers()).length === 0, timeoutMs).then(
      () => true,
      () => false,
    );
    if (settled) return [];
    const left = await this.sessionLeftovers();
    return left.length ? left : [`sessions still ending after ${timeoutMs} ms`];
  }
}

/**
 * The hooks of a streaming suite (call it in a `describe` body): start `world`, run a pod with a
 * long-running busybox container (handed to `ready`), and after each test close the test's clients,
 * remove every other container and fail a passing test whose sessions left anything behind.
 */
export function streamingSuite(
  world: StreamingWorld,
  what: string,
  ready: (pod: Awaited<ReturnType<StreamingWorld['pod']>>, shell: string) => void,
): void {
  let shell = '';
  suiteHooks({
    what,
    skipReason,
    setup: async () => {
      await world.start();
      const pod = await world.pod();
      shell = await world.run(pod, world.config('busybox', { command: ['sleep', '3600'] }));
      ready(pod, shell);
    },
    tidy: async () => {
      world.closeClients();
      await world.removeContainers(shell);
    },
    // Sessions end asynchronously once their client is gone; then none of their pieces may be left.
    leftovers: () => world.settledSessionLeftovers(),
    cleanup: async () => {
      world.closeClients();
      await world.cleanup();
    },
  });
}

/** Writes `data` as DATA frames of at most 64 KiB. */
export async function writeChunked(stream: ClientStream, data: Buffer): Promise<void> {
  for (let i = 0; i < data.length; i += 65536) {
    stream.write(data.subarray(i, i + 65536));
    // Let the socket drain now and then: the test client does no flow control of its own.
    if (i % (1 << 20) === 0) await new Promise((r) => setImmediate(r));
  }
}

/** Waits until the text received on `stream` matches `pattern`; returns that text. */
export async function waitForText(stream: ClientStream, pattern: RegExp | string, timeoutMs = 10_000): Promise<string> {
  const test = (t: string) => (typeof pattern === 'string' ? t.includes(pattern) : pattern.test(t));
  try {
    await stream.until(() => test(stream.received.toString()), timeoutMs);
  } catch {
    throw new Error(`never saw ${pattern}; got ${JSON.stringify(stream.received.toString())}`);
  }
  return stream.received.toString();
}

/** A shell command that lists every process named `name` in the container, zombies included (as pgrep does). */
export function listProcessesNamed(name: string): string[] {
  return ['sh', '-c', `for f in /proc/[0-9]*/stat; do read -r l < $f 2>/dev/null && case "$l" in *"(${name})"*) echo "$l";; esac; done; true`];
}
