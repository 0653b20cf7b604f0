import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { Metadata, status } from '@grpc/grpc-js';
import type { CallMetadata, CallStatus, UnaryCall } from '../../../src/api/grpc-http2.js';
import { InMemorySpanExporter } from '@opentelemetry/sdk-trace';
import { implement } from '../../../src/api/services.js';
import { notFound } from '../../../src/common/errors.js';
import { createLogger } from '../../../src/common/logger.js';
import { RuntimeServiceService } from '../../../src/gen/runtime/v1/api.js';
import { NO_METRICS, NO_TRACING, type MetricsRecorder, type Tracer } from '../../../src/observability/hooks.js';
import { OtelTracing, tracesUrl } from '../../../src/observability/tracing.js';
import { StepTimer } from '../../../src/observability/steps.js';

const log = createLogger('error');

type Unary = (call: Partial<UnaryCall>, cb: (err: CallStatus | null, res?: unknown) => void) => void;

function call(handler: unknown, request: unknown, metadata = new Metadata()): Promise<{ err: CallStatus | null; res?: unknown }> {
  return new Promise((resolve) => (handler as Unary)({ request, metadata: metadata as unknown as CallMetadata }, (err, res) => resolve({ err, res })));
}

describe('observability: the server edge', () => {
  const exporter = new InMemorySpanExporter();
  let tracing: OtelTracing;
  const recorded: [string, string, number | undefined][] = [];
  const recorder: MetricsRecorder = { ...NO_METRICS, criRequest: (method, code, seconds) => void recorded.push([method, code, seconds]) };
  // What daemon.ts passes in: the tracer is put in once made, as start.ts does.
  const telemetry: { metrics: MetricsRecorder; tracer: Tracer } = { metrics: recorder, tracer: NO_TRACING };

  before(() => {
    tracing = new OtelTracing({ endpoint: 'http://127.0.0.1:1', sampleRatio: 1, serviceName: 'stove-test', serviceVersion: '0', log, exporter });
    telemetry.tracer = tracing;
  });
  after(async () => {
    telemetry.tracer = NO_TRACING;
    await tracing.shutdown();
  });
  beforeEach(async () => {
    await tracing.flush();
    exporter.reset();
    recorded.length = 0;
  });

  const impl = implement(
    RuntimeServiceService,
    {
      runPodSandbox: async () => {
        const timer = new StepTimer(telemetry);
        await Promise.all([timer.time('netns', async () => {}), timer.time('cni', async () => timer.time('inner', async () => {}))]);
        return { podSandboxId: 'p1' };
      },
      streamContainers: async (_r: unknown, sink: { write(m: unknown): boolean }) => {
        sink.write({ containers: [] });
      },
      getContainerEvents: () => {},
      containerStatus: async (r: { containerId: string }) => {
        throw notFound(`container "${r.containerId}" not found`);
      },
    },
    log,
    telemetry,
  );

  it('counts each call by full method name and status name', async () => {
    await call(impl.runPodSandbox, {});
    const { err } = await call(impl.containerStatus, { containerId: 'c9' });
    assert.equal(err?.code, status.NOT_FOUND);
    await call(impl.version, {});
    assert.deepEqual(
      recorded.map(([m, c]) => [m, c]),
      [
        ['/runtime.v1.RuntimeService/RunPodSandbox', 'OK'],
        ['/runtime.v1.RuntimeService/ContainerStatus', 'NOT_FOUND'],
        ['/runtime.v1.RuntimeService/Version', 'UNIMPLEMENTED'],
      ],
    );
    assert.ok(recorded.every(([, , s]) => typeof s === 'number' && s >= 0 && s < 5));
  });

  it('a bounded stream is counted and timed when it ends; an endless one is counted once open', async () => {
    const stream = () => {
      const s = Object.assign(new EventEmitter(), { request: {}, metadata: new Metadata(), writableNeedDrain: false, written: [] as unknown[], ended: false, headersSent: 0 });
      return Object.assign(s, { write: (m: unknown) => (s.written.push(m), true), end: () => void (s.ended = true), sendHeaders: () => void s.headersSent++, fail: () => void (s.ended = true) });
    };
    const bounded = stream();
    (impl.streamContainers as (c: unknown) => void)(bounded);
    const endless = stream();
    (impl.getContainerEvents as (c: unknown) => void)(endless);
    await new Promise((r) => setImmediate(r));
    assert.ok(bounded.ended, 'the bounded stream was ended');
    assert.equal(bounded.written.length, 1);
    assert.ok(!endless.ended);
    assert.equal(endless.headersSent, 1, 'an open-ended stream sends its headers once it is live');
    const byMethod = new Map(recorded.map(([m, c, s]) => [m, [c, s]]));
    const [code, seconds] = byMethod.get('/runtime.v1.RuntimeService/StreamContainers')!;
    assert.equal(code, 'OK');
    assert.equal(typeof seconds, 'number');
    assert.deepEqual(byMethod.get('/runtime.v1.RuntimeService/GetContainerEvents'), ['OK', undefined]);
  });

  it('a call is a server span under the caller\'s traceparent, its steps are children', async () => {
    const metadata = new Metadata();
    metadata.set('traceparent', '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01');
    await call(impl.runPodSandbox, { config: {} }, metadata);
    await tracing.flush();
    const spans = exporter.getFinishedSpans();
    const server = spans.find((s) => s.name === 'runtime.v1.RuntimeService/RunPodSandbox')!;
    assert.ok(server);
    assert.equal(server.spanContext().traceId, '0af7651916cd43dd8448eb211c80319c');
    assert.equal(server.parentSpanContext?.spanId, 'b7ad6b7169203331');
    assert.equal(server.attributes['sandbox.id'], 'p1');
    assert.equal(server.attributes['rpc.service'], 'runtime.v1.RuntimeService');
    const byName = new Map(spans.map((s) => [s.name, s]));
    assert.equal(byName.get('netns')!.parentSpanContext?.spanId, server.spanContext().spanId);
    assert.equal(byName.get('cni')!.parentSpanContext?.spanId, server.spanContext().spanId);
    assert.equal(byName.get('inner')!.parentSpanContext?.spanId, byName.get('cni')!.spanContext().spanId);
  });

  it('a call without a traceparent starts a trace; a failure is recorded on its span', async () => {
    await call(impl.containerStatus, { containerId: 'c9' });
    await tracing.flush();
    const [span] = exporter.getFinishedSpans();
    assert.equal(span!.parentSpanContext, undefined);
    assert.equal(span!.status.code, 2);
    assert.match(span!.status.message!, /not found/);
    assert.equal(span!.attributes['container.id'], 'c9');
    assert.equal(span!.attributes['rpc.grpc.status_code'], status.NOT_FOUND);
    assert.equal(span!.events[0]!.name, 'exception');
  });

  it('a malformed traceparent is ignored, a sampled-out one is not recorded', async () => {
    const bad = new Metadata();
    bad.set('traceparent', '00-zz-b7ad6b7169203331-01');
    await call(impl.containerStatus, {}, bad);
    const unsampled = new Metadata();
    unsampled.set('traceparent', '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00');
    await call(impl.containerStatus, {}, unsampled);
    await tracing.flush();
    const spans = exporter.getFinishedSpans();
    assert.equal(spans.length, 1);
    assert.equal(spans[0]!.parentSpanContext, undefined);
  });

  it('request-sized attributes and error messages are cut', async () => {
    const long = 'a'.repeat(100_000);
    await call(impl.containerStatus, { containerId: long });
    await tracing.flush();
    const [span] = exporter.getFinishedSpans();
    assert.equal(String(span!.attributes['container.id']).length, 256);
    assert.ok(span!.status.message!.length <= 1024);
  });

  it('the traces URL gets OTLP\'s path when the endpoint has none', () => {
    assert.equal(tracesUrl('http://127.0.0.1:4318'), 'http://127.0.0.1:4318/v1/traces');
    assert.equal(tracesUrl('https://collector:4318/'), 'https://collector:4318/v1/traces');
    assert.equal(tracesUrl('http://gw/otlp/v1/traces'), 'http://gw/otlp/v1/traces');
  });
});
