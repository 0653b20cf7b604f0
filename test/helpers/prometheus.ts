/**
 * A real Prometheus (Debian's package) for metrics tests: its own temp config and TSDB, a free loopback
 * port, scraping the given targets every second; `query` asks its HTTP API.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { access, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { freePort } from './registry.js';
import { stopChild, waitUntilServing } from './child.js';

export const PROMETHEUS_BIN = process.env.PROMETHEUS_BIN ?? '/usr/bin/prometheus';

/** One series of an instant vector: its labels and value. */
export interface Sample {
  metric: Record<string, string>;
  value: number;
}

export interface TestPrometheus {
  url: string;
  /** An instant query (PromQL) through `/api/v1/query`. */
  query(expr: string): Promise<Sample[]>;
  /** The state of the scrape targets (`/api/v1/targets`). */
  targets(): Promise<{ job: string; health: string; lastError: string; scrapeUrl: string }[]>;
  /** The loaded alerting rules and how their last evaluation went (`/api/v1/rules`). */
  rules(): Promise<{ name: string; health: string; lastError: string; state: string }[]>;
  output(): string;
  stop(): Promise<void>;
}

export async function prometheusMissing(): Promise<string | undefined> {
  return access(PROMETHEUS_BIN).then(
    () => undefined,
    () => `${PROMETHEUS_BIN} is missing (make setup installs Debian's prometheus)`,
  );
}

/** The `/metrics` address a daemon logged (`serving metrics`), e.g. for `[metrics] address = "127.0.0.1:0"`. */
export function metricsAddressOf(daemonOutput: string): string {
  const m = /"msg":"serving metrics".*?"address":"([^"]+)"/.exec(daemonOutput);
  if (!m) throw new Error(`the daemon logged no metrics address:\n${daemonOutput}`);
  return m[1]!;
}

const live = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of live) child.kill('SIGKILL');
});

async function getJson<T>(url: string): Promise<T> {
  const res = await request(url, { headersTimeout: 5000, bodyTimeout: 5000 });
  const body = (await res.body.json()) as { status: string; data: T; error?: string };
  if (res.statusCode !== 200 || body.status !== 'success') throw new Error(`${url}: ${res.statusCode} ${body.error ?? ''}`);
  return body.data;
}

/** Starts Prometheus scraping `targets` (host:port, path /metrics) as job `job` every second, with `ruleFiles` loaded. */
export async function startPrometheus(job: string, targets: string[], ruleFiles: string[] = []): Promise<TestPrometheus> {
  const dir = await mkdtemp(join(tmpdir(), 'stove-prometheus-'));
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const config = [
    'global:',
    '  scrape_interval: 1s',
    '  scrape_timeout: 1s',
    '  evaluation_interval: 1s',
    ...(ruleFiles.length ? ['rule_files:', ...ruleFiles.map((f) => `  - ${JSON.stringify(f)}`)] : []),
    'scrape_configs:',
    `  - job_name: ${job}`,
    '    static_configs:',
    `      - targets: [${targets.map((t) => JSON.stringify(t)).join(', ')}]`,
    '',
  ].join('\n');
  await writeFile(join(dir, 'prometheus.yml'), config);
  const child = spawn(
    PROMETHEUS_BIN,
    [
      `--config.file=${join(dir, 'prometheus.yml')}`,
      `--storage.tsdb.path=${join(dir, 'data')}`,
      `--web.listen-address=127.0.0.1:${port}`,
      '--log.level=warn',
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  live.add(child);
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
  child.once('exit', () => live.delete(child));

  const stop = async () => {
    await stopChild(child);
    await rm(dir, { recursive: true, force: true });
  };

  try {
    await waitUntilServing(`prometheus on ${url}`, child, () => out, () =>
      request(`${url}/-/ready`, { headersTimeout: 1000, bodyTimeout: 1000 }).then(async (r) => (await r.body.dump(), r.statusCode === 200)), 20_000);
  } catch (err) {
    await stop();
    throw err;
  }

  return {
    url,
    async query(expr) {
      const data = await getJson<{ resultType: string; result: { metric: Record<string, string>; value: [number, string] }[] }>(
        `${url}/api/v1/query?query=${encodeURIComponent(expr)}`,
      );
      if (data.resultType !== 'vector') throw new Error(`${expr}: expected a vector, got ${data.resultType}`);
      return data.result.map((r) => ({ metric: r.metric, value: Number(r.value[1]) }));
    },
    async targets() {
      const data = await getJson<{ activeTargets: { labels: Record<string, string>; health: string; lastError: string; scrapeUrl: string }[] }>(
        `${url}/api/v1/targets`,
      );
      return data.activeTargets.map((t) => ({ job: t.labels.job ?? '', health: t.health, lastError: t.lastError, scrapeUrl: t.scrapeUrl }));
    },
    async rules() {
      const data = await getJson<{ groups: { rules: { name: string; health: string; lastError?: string; state?: string }[] }[] }>(`${url}/api/v1/rules`);
      return data.groups.flatMap((g) => g.rules.map((r) => ({ name: r.name, health: r.health, lastError: r.lastError ?? '', state: r.state ?? '' })));
    },
    output: () => out,
    stop,
  };
}
