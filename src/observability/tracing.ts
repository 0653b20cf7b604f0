/**
 * OpenTelemetry traces: a server span per CRI call (the W3C `traceparent` in the call's gRPC metadata
 * becomes its parent, so a kubelet's pod start and Stove's steps are one trace) and child spans for the
 * steps, exported over OTLP/HTTP in batches. Loaded only when `[tracing] endpoint` is set.
 */
import { context, diag, trace, DiagLogLevel, ROOT_CONTEXT, SpanKind, SpanStatusCode, type Context, type Span, type TextMapGetter } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator, setGlobalErrorHandler } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BatchSpanProcessor, ParentBasedSampler, TraceIdRatioBasedSampler, TracerProvider, type SpanExporter } from '@opentelemetry/sdk-trace';
import { messageOf } from '../common/errors.js';
import type { Logger } from '../common/logger.js';
import type { MetadataGetter, SpanAttributes, Tracer } from './hooks.js';

export interface TracingOptions {
  /** The collector's base URL (`http://127.0.0.1:4318`) or its full traces URL (`…/v1/traces`). */
  endpoint: string;
  /** Share of new traces kept (0–1); a caller's sampled flag wins for calls that carry one. */
  sampleRatio: number;
  serviceName: string;
  serviceVersion: string;
  log: Logger;
  /** How often finished spans are sent (ms). */
  exportIntervalMs?: number;
  /** Instead of OTLP/HTTP to `endpoint` (tests). */
  exporter?: SpanExporter;
}

/** OTLP/HTTP's traces path, added to an endpoint given without a path (as OTEL_EXPORTER_OTLP_ENDPOINT). */
export function tracesUrl(endpoint: string): string {
  const url = new URL(endpoint);
  if (url.pathname === '/' || url.pathname === '') url.pathname = '/v1/traces';
  return url.toString();
}

/**
 * Attribute values and error messages come from requests (IDs, image names) and may be as long as a
 * gRPC message: they are cut so a hostile request cannot make Stove export megabytes per span.
 */
const MAX_ATTRIBUTE_CHARS = 256;
const MAX_STATUS_CHARS = 1024;

const metadataGetter: TextMapGetter<MetadataGetter> = {
  keys: () => ['traceparent', 'tracestate'],
  get: (carrier, key) => carrier(key),
};

/** At most one line a minute about the collector: a kubelet's polls make a batch every second. */
const DIAGNOSTIC_INTERVAL_MS = 60_000;

/**
 * The SDK's own complaints go to Stove's log, rate-limited: failed exports (a collector that is down)
 * through its global error handler, the rest (a dropped batch) through its diagnostic logger.
 */
function routeDiagnostics(log: Logger, url: string): void {
  let last = -Infinity;
  let suppressed = 0;
  const warn = (message: string, ...args: unknown[]) => {
    const now = performance.now();
    if (now - last < DIAGNOSTIC_INTERVAL_MS) {
      suppressed++;
      return;
    }
    last = now;
    const fields: Record<string, unknown> = args.length ? { detail: args.map((a) => messageOf(a)).join('; ').slice(0, MAX_STATUS_CHARS) } : {};
    if (suppressed) fields.similarSinceLast = suppressed;
    suppressed = 0;
    log.warn('tracing: ' + message, fields);
  };
  setGlobalErrorHandler((err) => warn(`cannot send spans to ${url}; they are dropped`, err));
  diag.setLogger(
    { error: warn, warn, info: () => {}, debug: () => {}, verbose: () => {} },
    { logLevel: DiagLogLevel.WARN, suppressOverrideMessage: true },
  );
}

export class OtelTracing implements Tracer {
  private readonly provider: TracerProvider;
  private readonly tracer;
  private readonly propagator = new W3CTraceContextPropagator();
  private readonly contextManager = new AsyncLocalStorageContextManager();

  constructor(options: TracingOptions) {
    const url = tracesUrl(options.endpoint);
    routeDiagnostics(options.log, url);
    this.provider = new TracerProvider({
      resource: resourceFromAttributes({ 'service.name': options.serviceName, 'service.version': options.serviceVersion }),
      sampler: new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(options.sampleRatio) }),
      spanLimits: { attributeValueLengthLimit: MAX_ATTRIBUTE_CHARS, attributeCountLimit: 32, eventCountLimit: 8 },
      spanProcessors: [
        new BatchSpanProcessor({
          exporter: options.exporter ?? new OTLPTraceExporter({ url }),
          scheduledDelayMillis: options.exportIntervalMs ?? 1000,
        }),
      ],
    });
    context.setGlobalContextManager(this.contextManager.enable());
    this.tracer = this.provider.getTracer('stove', options.serviceVersion);
  }

  serverCall<T>(method: string, metadata: MetadataGetter, attributes: SpanAttributes, body: () => Promise<T>): Promise<T> {
    const parent = this.propagator.extract(ROOT_CONTEXT, metadata, metadataGetter);
    const slash = method.lastIndexOf('/');
    const span = this.tracer.startSpan(
      method.replace(/^\//, ''),
      {
        kind: SpanKind.SERVER,
        attributes: { 'rpc.system': 'grpc', 'rpc.service': method.slice(1, slash), 'rpc.method': method.slice(slash + 1), ...attributes },
      },
      parent,
    );
    return this.runIn(span, trace.setSpan(parent, span), body);
  }

  span<T>(name: string, attributes: SpanAttributes, body: () => Promise<T>): Promise<T> {
    const parent = context.active();
    if (!trace.getSpan(parent)) return body(); // outside any traced call: nothing to hang it on
    const span = this.tracer.startSpan(name, { attributes }, parent);
    return this.runIn(span, trace.setSpan(parent, span), body);
  }

  step(name: string, startedMs: number, endedMs: number): void {
    const parent = context.active();
    if (!trace.getSpan(parent)) return;
    const span = this.tracer.startSpan(name, { startTime: performance.timeOrigin + startedMs }, parent);
    span.end(performance.timeOrigin + endedMs);
  }

  annotate(attributes: SpanAttributes): void {
    trace.getSpan(context.active())?.setAttributes(attributes);
  }

  /** Sends the finished spans now. */
  flush(): Promise<void> {
    return this.provider.forceFlush();
  }

  /** Sends what is left and stops. */
  async shutdown(): Promise<void> {
    await this.provider.shutdown();
    this.contextManager.disable();
    context.disable();
  }

  private async runIn<T>(span: Span, ctx: Context, body: () => Promise<T>): Promise<T> {
    try {
      return await context.with(ctx, body);
    } catch (err) {
      const message = messageOf(err).slice(0, MAX_STATUS_CHARS);
      span.recordException({ name: err instanceof Error ? err.name : 'Error', message });
      span.setStatus({ code: SpanStatusCode.ERROR, message });
      throw err;
    } finally {
      span.end();
    }
  }
}
