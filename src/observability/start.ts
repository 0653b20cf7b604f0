/**
 * Turns metrics and tracing on as configured: loads prom-client and the OpenTelemetry SDK only for what
 * is enabled, puts them in the daemon's `Telemetry` (hooks.ts), and serves `/metrics` on `[metrics] address`.
 */
import type { Server } from 'node:http';
import { StoveError, messageOf } from '../common/errors.js';
import { loadPart } from '../common/lazy.js';
import type { Logger } from '../common/logger.js';
import { parseHostPort } from '../config/load.js';
import { NO_METRICS, NO_TRACING, type MetricsRecorder, type Telemetry, type Tracer } from './hooks.js';
import type { StateSource, StoveMetrics } from './metrics.js';
import type { OtelTracing } from './tracing.js';

export interface ObservabilityConfig {
  metrics: { address: string };
  tracing: { endpoint: string; sampleRatio: number; serviceName: string };
}

/** What the daemon holds: where the gauges read from, the `/metrics` listener, reloads, and the way out. */
export interface Observability {
  /** What daemon.ts passes to the services: the recorder and tracer in use, no-ops for what is off. */
  readonly telemetry: Telemetry;
  /** Serves `/metrics` (when metrics are on) with gauges read from `source`; returns the bound address. */
  listen(source: StateSource): Promise<string | undefined>;
  /**
   * Applies changed `[metrics]` and `[tracing]` tables (a config reload): the listener moves or stops,
   * counters carry on; a new tracer replaces the old one once that has sent its last spans.
   */
  reconfigure(next: ObservabilityConfig): Promise<void>;
  /** Closes the listener, sends the last spans, and puts the no-ops back in `telemetry`. */
  stop(): Promise<void>;
}

export async function startObservability(config: ObservabilityConfig, version: string, log: Logger): Promise<Observability> {
  const runtime = new ObservabilityRuntime(version, log);
  await runtime.apply(config);
  return runtime;
}

class ObservabilityRuntime implements Observability {
  private config: ObservabilityConfig = { metrics: { address: '' }, tracing: { endpoint: '', sampleRatio: 1, serviceName: 'stove' } };
  private metrics: StoveMetrics | undefined;
  private tracing: OtelTracing | undefined;
  private server: Server | undefined;
  private source: StateSource | undefined;
  /** The one object handed out; apply() and stop() swap its fields. */
  readonly telemetry: { metrics: MetricsRecorder; tracer: Tracer } = { metrics: NO_METRICS, tracer: NO_TRACING };

  constructor(
    private readonly version: string,
    private readonly log: Logger,
  ) {}

  /** Loads what `next` turns on (only then), puts it in `telemetry`; the listener waits for listen(). */
  async apply(next: ObservabilityConfig): Promise<void> {
    if (next.metrics.address) await this.metricsRegistry();
    else this.metrics = undefined;
    if (JSON.stringify(next.tracing) !== JSON.stringify(this.config.tracing)) {
      const old = this.tracing;
      this.tracing = undefined;
      await old?.shutdown().catch((err: unknown) => this.log.warn('tracing: could not send the last spans', { error: messageOf(err) }));
      if (next.tracing.endpoint) {
        const { OtelTracing } = await loadPart('tracing', () => import('./tracing.js'));
        this.tracing = new OtelTracing({ ...next.tracing, serviceVersion: this.version, log: this.log });
        this.log.info('tracing on', { endpoint: next.tracing.endpoint, sampleRatio: next.tracing.sampleRatio });
      } else if (old) this.log.info('tracing off');
    }
    this.config = { metrics: { ...next.metrics }, tracing: { ...next.tracing } };
    this.telemetry.metrics = this.metrics ?? NO_METRICS;
    this.telemetry.tracer = this.tracing ?? NO_TRACING;
  }

  async listen(source: StateSource): Promise<string | undefined> {
    this.source = source;
    if (!this.metrics) return undefined;
    this.metrics.setStateSource(source);
    this.server = await this.serve(this.metrics, this.config.metrics.address);
    return addressOf(this.server);
  }

  async reconfigure(next: ObservabilityConfig): Promise<void> {
    const moved = next.metrics.address !== this.config.metrics.address;
    // The new listener first: an address that cannot be had keeps the old one serving.
    const server = moved && next.metrics.address && this.source ? await this.serveFor(next.metrics.address) : undefined;
    if (moved) {
      await closeServer(this.server);
      this.server = server;
      if (!next.metrics.address) this.log.info('metrics off');
    }
    await this.apply(next);
  }

  async stop(): Promise<void> {
    this.telemetry.metrics = NO_METRICS;
    this.telemetry.tracer = NO_TRACING;
    await closeServer(this.server);
    this.server = undefined;
    await this.tracing?.shutdown().catch((err: unknown) => this.log.warn('tracing: could not send the last spans', { error: messageOf(err) }));
    this.tracing = undefined;
  }

  /** A listener for `address` over the existing (or a new) registry. */
  private async serveFor(address: string): Promise<Server> {
    return this.serve(await this.metricsRegistry(), address);
  }

  /** The metrics registry, loaded and made on first use, reading the state source once there is one. */
  private async metricsRegistry(): Promise<StoveMetrics> {
    if (!this.metrics) {
      const { StoveMetrics } = await loadPart('metrics', () => import('./metrics.js'));
      this.metrics = new StoveMetrics();
      if (this.source) this.metrics.setStateSource(this.source);
    }
    return this.metrics;
  }

  private async serve(metrics: StoveMetrics, address: string): Promise<Server> {
    const parsed = parseHostPort(address);
    if (!parsed) throw new StoveError('InvalidArgument', `metrics.address "${address}" is not host:port`);
    const server = await serveMetrics(metrics, parsed.host, parsed.port, this.log);
    this.log.info('serving metrics', { address: addressOf(server) });
    return server;
  }
}

function addressOf(server: Server): string {
  const bound = server.address();
  if (typeof bound !== 'object' || !bound) return String(bound);
  return `${bound.family === 'IPv6' ? `[${bound.address}]` : bound.address}:${bound.port}`;
}

async function closeServer(server: Server | undefined): Promise<void> {
  if (!server) return;
  const closed = new Promise<void>((resolve) => server.close(() => resolve()));
  server.closeAllConnections();
  await closed;
}

/** `GET /metrics` and nothing else. */
async function serveMetrics(metrics: StoveMetrics, host: string, port: number, log: Logger): Promise<Server> {
  // Not `import('node:http')`: its ESM namespace loads Node's bundled undici (see streaming/server.ts).
  const { createServer } = process.getBuiltinModule('node:http');
  const server = createServer((req, res) => {
    const path = (req.url ?? '').split('?')[0];
    if (path !== '/metrics') {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('404 page not found: metrics are at /metrics\n');
      return;
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD', 'content-type': 'text/plain' }).end('405 method not allowed\n');
      return;
    }
    metrics.scrape(req.headers.accept).then(
      ({ contentType, body }) => res.writeHead(200, { 'content-type': contentType }).end(req.method === 'HEAD' ? undefined : body),
      (err: unknown) => {
        log.error('metrics scrape failed', { error: messageOf(err) });
        res.writeHead(500, { 'content-type': 'text/plain' }).end('metrics collection failed\n');
      },
    );
  });
  // Scrapers keep a connection open between scrapes; slow or idle clients cannot pile up.
  server.keepAliveTimeout = 30_000;
  server.headersTimeout = 5_000;
  server.requestTimeout = 10_000;
  server.maxConnections = 64;
  server.maxHeadersCount = 32;
  await new Promise<void>((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) =>
      reject(new StoveError('FailedPrecondition', `cannot serve metrics on ${host}:${port}: ${err.code === 'EADDRINUSE' ? 'the address is in use' : err.message}`)),
    );
    server.listen(port, host, () => resolve());
  });
  return server;
}
