/**
 * Turns metrics and tracing on as configured: loads prom-client and the OpenTelemetry SDK only for what
 * is enabled, installs them behind hooks.ts, and serves `/metrics` on `[metrics] address`.
 */
import type { Server } from 'node:http';
import { StoveError, messageOf } from '../common/errors.js';
import type { Logger } from '../common/logger.js';
import { parseHostPort } from '../config/load.js';
import { NO_METRICS, NO_TRACING, installObservability } from './hooks.js';
import type { StateSource, StoveMetrics } from './metrics.js';
import type { OtelTracing } from './tracing.js';

export interface ObservabilityConfig {
  metrics: { address: string };
  tracing: { endpoint: string; sampleRatio: number; serviceName: string };
}

/** What the daemon holds: where the gauges read from, the `/metrics` listener, and the way out. */
export interface Observability {
  /** Serves `/metrics` (when metrics are on) with gauges read from `source`; returns the bound address. */
  listen(source: StateSource): Promise<string | undefined>;
  /** Closes the listener, sends the last spans, and puts the no-op hooks back. */
  stop(): Promise<void>;
}

export async function startObservability(config: ObservabilityConfig, version: string, log: Logger): Promise<Observability> {
  let metrics: StoveMetrics | undefined;
  let tracing: OtelTracing | undefined;
  if (config.metrics.address) {
    const { StoveMetrics } = await import('./metrics.js');
    metrics = new StoveMetrics();
  }
  if (config.tracing.endpoint) {
    const { OtelTracing } = await import('./tracing.js');
    tracing = new OtelTracing({ ...config.tracing, serviceVersion: version, log });
    log.info('tracing on', { endpoint: config.tracing.endpoint, sampleRatio: config.tracing.sampleRatio });
  }
  installObservability(metrics ?? NO_METRICS, tracing ?? NO_TRACING);
  let server: Server | undefined;
  return {
    async listen(source) {
      if (!metrics) return undefined;
      metrics.setStateSource(source);
      const parsed = parseHostPort(config.metrics.address);
      if (!parsed) throw new StoveError('InvalidArgument', `metrics.address "${config.metrics.address}" is not host:port`);
      const { host, port } = parsed;
      server = await serveMetrics(metrics, host, port, log);
      const bound = server.address();
      const where = typeof bound === 'object' && bound ? `${bound.family === 'IPv6' ? `[${bound.address}]` : bound.address}:${bound.port}` : config.metrics.address;
      log.info('serving metrics', { address: where });
      return where;
    },
    async stop() {
      installObservability(NO_METRICS, NO_TRACING);
      if (server) {
        const closed = new Promise<void>((resolve) => server!.close(() => resolve()));
        server.closeAllConnections();
        await closed;
      }
      await tracing?.shutdown().catch((err: unknown) => log.warn('tracing: could not send the last spans', { error: messageOf(err) }));
    },
  };
}

/** `GET /metrics` and nothing else. */
async function serveMetrics(metrics: StoveMetrics, host: string, port: number, log: Logger): Promise<Server> {
  const { createServer } = await import('node:http');
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
