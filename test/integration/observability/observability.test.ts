/**
 * Metrics and traces of a real `stove serve` (the container tests' world: its own CNI bridge, loopback
 * registry, busybox images) with `[metrics]` and `[tracing]` on: a real Prometheus scrapes it every
 * second and is asked through its HTTP API, and an OTLP/HTTP receiver decodes the spans it exports.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readdir, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Metadata, status, type ServiceError } from '@grpc/grpc-js';
import { request } from 'undici';
import { ImageSpec, PodSandboxConfig, RunPodSandboxRequest, RunPodSandboxResponse } from '../../../src/gen/runtime/v1/api.js';
import { pushBusyboxImage } from '../../helpers/image-builder.js';
import { freePort } from '../../helpers/registry.js';
import { startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from '../../helpers/otlp-receiver.js';
import { metricsAddressOf, prometheusMissing, startPrometheus, type Sample, type TestPrometheus } from '../../helpers/prometheus.js';
import { REPO_ROOT, startStove } from '../../helpers/stove-process.js';
import { suiteHooks } from '../../helpers/suite.js';
import { ContainerWorld, eventually, skipReason as containerSkipReason } from '../container/world.js';

const RUNTIME = '/runtime.v1.RuntimeService';
const IMAGE = '/runtime.v1.ImageService';

class ObservedWorld extends ContainerWorld {
  /** The address the daemon's log says it serves metrics on. */
  metricsAddress(): string {
    return metricsAddressOf(this.daemon.output());
  }
}

/** RunPodSandbox with gRPC metadata, as a kubelet with tracing on sends it. */
function runPodWithMetadata(world: ObservedWorld, config: PodSandboxConfig, metadata: Metadata): Promise<string> {
  return new Promise((resolve, reject) =>
    world.daemon.clients.rawRuntime.runPodSandbox(
      RunPodSandboxRequest.fromPartial({ config }),
      metadata,
      (err: ServiceError | null, res?: RunPodSandboxResponse) => (err ? reject(err) : resolve(res!.podSandboxId)),
    ),
  );
}

describe('observability: Prometheus metrics and OpenTelemetry traces of a real daemon', function () {
  this.timeout(120_000);
  const world = new ObservedWorld();
  let receiver: OtlpReceiver;
  let prometheus: TestPrometheus | undefined;

  suiteHooks({
    what: 'observability tests',
    skipReason: async () => containerSkipReason() ?? (await prometheusMissing()),
    setup: async () => {
      receiver = await startOtlpReceiver();
      world.pods.extraToml = ['[metrics]', 'address = "127.0.0.1:0"', '[tracing]', `endpoint = "${receiver.url}"`, 'service_name = "stove-it"'];
      await world.start();
      prometheus = await startPrometheus('stove', [world.metricsAddress()], [join(REPO_ROOT, 'contrib/prometheus/stove-alerts.yml')]);
    },
    tidy: () => world.removeAll().catch(() => {}),
    leftovers: () => world.leftovers(),
    cleanup: async () => {
      await prometheus?.stop();
      await world.cleanup();
      await receiver?.stop();
    },
  });

  /** The samples of `expr` once `ready` holds for them (Prometheus scrapes every second). */
  async function sampled(expr: string, ready: (samples: Sample[]) => boolean = (s) => s.length > 0): Promise<Sample[]> {
    let last: Sample[] = [];
    await eventually(`${expr} in Prometheus`, async () => ready((last = await prometheus!.query(expr))), 20_000).catch(() => {
      throw new Error(`Prometheus never had the expected ${expr}; last answer: ${JSON.stringify(last)}`);
    });
    return last;
  }

  const valueOf = (samples: Sample[], labels: Record<string, string> = {}) =>
    samples.find((s) => Object.entries(labels).every(([k, v]) => s.metric[k] === v))?.value;

  it('Prometheus scrapes the daemon: calls by method and code, start histograms and steps, pulls, exec, state gauges', async () => {
    const pod = await world.pod();
    const app = await world.run(pod, world.config('sleeper'));
    assert.equal((await world.exec(app, ['true'])).exitCode, 0);
    assert.equal((await world.exec(app, ['sh', '-c', 'exit 3'])).exitCode, 3);
    await world.runtime.pull(world.image('busybox').reference);
    await assert.rejects(world.status('0'.repeat(64)), (err: ServiceError) => err.code === status.NOT_FOUND);

    const [target] = await eventually('the target to be scraped', async () => (await prometheus!.targets())[0]?.health === 'up', 20_000)
      .then(() => prometheus!.targets())
      .catch(async () => assert.fail(`the stove target never came up: ${JSON.stringify(await prometheus!.targets())}`));
    assert.equal(target!.scrapeUrl, `http://${world.metricsAddress()}/metrics`);
    assert.equal(valueOf(await sampled('up{job="stove"}')), 1);

    // Every call counted by its full method name and status code name.
    const calls = await sampled('stove_cri_requests_total', (s) =>
      (valueOf(s, { method: `${RUNTIME}/ContainerStatus`, code: 'NOT_FOUND' }) ?? 0) >= 1 && (valueOf(s, { method: `${RUNTIME}/ExecSync` }) ?? 0) >= 2,
    );
    assert.ok(valueOf(calls, { method: `${RUNTIME}/RunPodSandbox`, code: 'OK' })! >= 1);
    assert.ok(valueOf(calls, { method: `${RUNTIME}/CreateContainer`, code: 'OK' })! >= 1);
    assert.ok(valueOf(calls, { method: `${RUNTIME}/StartContainer`, code: 'OK' })! >= 1);
    assert.ok(valueOf(calls, { method: `${IMAGE}/PullImage`, code: 'OK' })! >= 5, 'the world pulled 4 images, the test one more');
    assert.ok(calls.every((s) => /^\/runtime\.v1\.(Runtime|Image)Service\/[A-Za-z]+$/.test(s.metric.method!)), 'method is the full gRPC name');
    assert.ok(calls.every((s) => /^[A-Z_]+$/.test(s.metric.code!)), 'code is the status name');

    // Histograms: cumulative buckets up to +Inf, which equals the count.
    const buckets = await sampled(`stove_cri_request_duration_seconds_bucket{method="${RUNTIME}/RunPodSandbox"}`);
    const ordered = buckets.map((b) => ({ le: Number(b.metric.le === '+Inf' ? Infinity : b.metric.le), v: b.value })).sort((a, b) => a.le - b.le);
    assert.ok(ordered.length >= 10, `buckets: ${JSON.stringify(ordered)}`);
    for (let i = 1; i < ordered.length; i++) assert.ok(ordered[i]!.v >= ordered[i - 1]!.v, 'buckets are cumulative');
    const count = valueOf(await sampled(`stove_cri_request_duration_seconds_count{method="${RUNTIME}/RunPodSandbox"}`));
    assert.equal(ordered.at(-1)!.le, Infinity);
    assert.equal(ordered.at(-1)!.v, count);
    assert.ok(ordered[0]!.v < count!, 'no RunPodSandbox took under a millisecond');

    // Pod and container starts, and RunPodSandbox's steps.
    const podStart = valueOf(await sampled('stove_pod_sandbox_start_duration_seconds_count'))!;
    assert.ok(podStart >= 1);
    const podStartSum = valueOf(await sampled('stove_pod_sandbox_start_duration_seconds_sum'))!;
    assert.ok(podStartSum > 0.005 && podStartSum / podStart < 30, `mean pod start ${podStartSum / podStart} s`);
    const steps = await sampled('stove_pod_sandbox_step_duration_seconds_count');
    for (const step of ['netns', 'cni', 'pauseCreate', 'pauseStart', 'podFiles', 'record'])
      assert.ok(valueOf(steps, { step })! >= 1, `step ${step} in ${JSON.stringify(steps.map((s) => s.metric.step))}`);
    assert.ok(valueOf(await sampled('stove_container_start_duration_seconds_count'))! >= 1);

    // Pulls: results, bytes from the registry, the layer jobs.
    const pulls = await sampled('stove_image_pulls_total');
    assert.ok(valueOf(pulls, { result: 'success' })! >= 5);
    assert.equal(valueOf(pulls, { result: 'failure' }), 0);
    const pulledBytes = world.image('busybox').layers.reduce((n, l) => n + l.blob.length, 0);
    assert.ok(valueOf(await sampled('stove_image_pull_bytes_total'))! >= pulledBytes, 'at least the busybox layer came over the wire');
    assert.ok(valueOf(await sampled('stove_image_pull_duration_seconds_count{result="success"}'))! >= 5);
    assert.ok(valueOf(await sampled('stove_image_unpack_duration_seconds_count'))! >= 1);

    // ExecSync by result, and the gauges read at scrape time.
    const execs = await sampled('stove_exec_sync_total');
    assert.ok(valueOf(execs, { result: 'ok' })! >= 1);
    assert.ok(valueOf(execs, { result: 'nonzero_exit' })! >= 1);
    assert.equal(valueOf(execs, { result: 'timeout' }), 0);
    assert.equal(valueOf(await sampled('stove_containers{state="running"}')), 1);
    assert.equal(valueOf(await sampled('stove_pod_sandboxes{state="ready"}')), 1);
    const images = (await world.daemon.clients.image.listImages({ filter: undefined })).images.length;
    assert.equal(valueOf(await sampled('stove_images', (s) => valueOf(s) === images)), images);
    assert.equal((await sampled('stove_streaming_sessions')).length, 3);
    assert.ok(valueOf(await sampled('stove_container_oom_events_total'))! >= 0); // counted in its own test
    const quarantined = (await readdir(join(world.daemon.root, 'quarantine')).catch(() => [])).filter((n) => !n.endsWith('.why')).length;
    assert.equal(valueOf(await sampled('stove_quarantined_records')), quarantined);
    assert.ok(valueOf(await sampled('stove_recovery_duration_seconds'))! > 0);

    // prom-client's process and Node.js defaults.
    assert.ok(valueOf(await sampled('process_resident_memory_bytes'))! > 10 << 20);
    assert.ok((await sampled('nodejs_eventloop_lag_seconds')).length === 1);
    assert.ok((await sampled('nodejs_gc_duration_seconds_count')).length >= 1);

    // A removed container leaves the gauges at the next scrape.
    await world.removeAll();
    await sampled('stove_containers{state="running"}', (s) => valueOf(s) === 0);
    await sampled('stove_pod_sandboxes{state="ready"}', (s) => valueOf(s) === 0);
  });

  it('the example alert rules evaluate and stay quiet; every dashboard query is valid PromQL with data', async () => {
    await world.run(await world.pod(), world.config('sleeper'));
    await sampled('stove_containers{state="running"}', (s) => valueOf(s) === 1);
    await eventually('the alert rules to be evaluated', async () => {
      const rules = await prometheus!.rules();
      return rules.length === 5 && rules.every((r) => r.health === 'ok');
    }, 20_000).catch(async () => assert.fail(`rules: ${JSON.stringify(await prometheus!.rules())}`));
    const rules = await prometheus!.rules();
    assert.deepEqual(rules.filter((r) => r.state !== 'inactive').map((r) => r.name), [], 'a healthy daemon fires no alert');

    const dashboard = JSON.parse(await readFile(join(REPO_ROOT, 'contrib/grafana/stove.json'), 'utf8')) as {
      panels: { type: string; title: string; targets?: { expr: string }[] }[];
    };
    const queries = dashboard.panels.flatMap((p) => (p.targets ?? []).map((t) => ({ panel: p.title, expr: t.expr })));
    assert.ok(queries.length >= 20);
    const empty: string[] = [];
    for (const { panel, expr } of queries) {
      const promql = expr.replaceAll('$instance', '.*').replaceAll('$__rate_interval', '1m');
      const samples = await prometheus!.query(promql).catch((err: Error) => assert.fail(`${panel}: ${promql}: ${err.message}`));
      if (samples.length === 0) empty.push(panel);
    }
    // Panels of things this daemon has not done (no error ratio without… errors, no OOM) may be empty; these may not.
    for (const panel of ['Up', 'Calls by method', 'Latency p99 by method', 'Pod sandbox start', 'Containers by state', 'Daemon memory', 'Event loop lag', 'Pulls by result'])
      assert.ok(!empty.includes(panel), `panel "${panel}" has no data`);
  });

  it('an OOM kill is counted', async () => {
    const scrapeOoms = async () => {
      const body = await (await request(`http://${world.metricsAddress()}/metrics`)).body.text();
      return Number(/^stove_container_oom_events_total (\S+)$/m.exec(body)![1]);
    };
    const before = await scrapeOoms();
    const pod = await world.pod();
    const id = await world.run(pod, world.config('busybox', { command: ['tail', '/dev/zero'], linux: { resources: { memoryLimitInBytes: 32n << 20n } } }));
    assert.equal((await world.waitExited(id, 20_000)).reason, 'OOMKilled');
    assert.equal(await scrapeOoms(), before + 1);
    await sampled('stove_container_oom_events_total', (s) => valueOf(s) === before + 1);
  });

  it('a record set aside at start shows in stove_quarantined_records', async () => {
    // A daemon of its own over a root holding an unreadable container record (no pods: no CNI needed).
    const dir = await mkdtemp(join(tmpdir(), 'stove-test-'));
    const id = randomBytes(32).toString('hex');
    await mkdir(join(dir, 'root', 'containers', id), { recursive: true });
    await writeFile(join(dir, 'root', 'containers', id, 'container.json'), '{"id": "truncated');
    const daemon = await startStove({ dir, configToml: '[metrics]\naddress = "127.0.0.1:0"\n' });
    try {
      const address = metricsAddressOf(daemon.output());
      const body = await (await request(`http://${address}/metrics`)).body.text();
      assert.match(body, /^stove_quarantined_records 1$/m);
      assert.match(body, /^stove_containers\{state="running"\} 0$/m);
    } finally {
      await daemon.stop();
      await daemon.cleanup();
    }
  });

  it('a reload (SIGHUP) turns metrics and tracing on, moves and off, counters carrying on', async () => {
    const daemon = await startStove({ configToml: '' });
    const reloadTo = async (toml: string, expect: RegExp) => {
      await writeFile(daemon.configPath, toml);
      const before = daemon.output().length;
      daemon.child.kill('SIGHUP');
      await eventually(`the log to show ${expect}`, async () => expect.test(daemon.output().slice(before)), 10_000);
      return daemon.output().slice(before);
    };
    const versionCalls = async (address: string) => {
      const body = await (await request(`http://${address}/metrics`)).body.text();
      return Number(/^stove_cri_requests_total\{method="\/runtime.v1.RuntimeService\/Version",code="OK"\} (\S+)$/m.exec(body)?.[1] ?? 0);
    };
    try {
      assert.doesNotMatch(daemon.output(), /serving metrics|tracing on/);
      const on = await reloadTo(`[metrics]\naddress = "127.0.0.1:0"\n[tracing]\nendpoint = "${receiver.url}"\nservice_name = "stove-reloaded"\n`, /serving metrics/);
      const first = metricsAddressOf(on);
      await daemon.clients.runtime.version({ version: '' });
      assert.equal(await versionCalls(first), 1);
      await eventually('a span from the reloaded tracer', async () => receiver.spans.some((sp) => sp.service === 'stove-reloaded' && sp.name.endsWith('/Version')), 10_000);

      // Another port: the same counters go on there, the old port is closed.
      const port = await freePort();
      // The new listener is logged first; `tracing off` once the old tracer has sent its last spans.
      const moved = await reloadTo(`[metrics]\naddress = "127.0.0.1:${port}"\n`, /tracing off/);
      const second = metricsAddressOf(moved);
      assert.equal(second, `127.0.0.1:${port}`);
      await daemon.clients.runtime.version({ version: '' });
      assert.equal(await versionCalls(second), 2);
      await assert.rejects(request(`http://${first}/metrics`), /ECONNREFUSED/);

      await reloadTo('', /metrics off/);
      await assert.rejects(request(`http://${second}/metrics`), /ECONNREFUSED/);
    } finally {
      await daemon.stop();
      await daemon.cleanup();
    }
  });

  it('serves OpenMetrics when asked, and only /metrics', async () => {
    const base = `http://${world.metricsAddress()}`;
    const om = await request(`${base}/metrics`, { headers: { accept: 'application/openmetrics-text; version=1.0.0' } });
    assert.match(String(om.headers['content-type']), /^application\/openmetrics-text/);
    const text = await om.body.text();
    assert.match(text, /^# TYPE stove_cri_requests counter$/m);
    assert.match(text, /^# EOF$/m);
    const plain = await request(`${base}/metrics`);
    assert.match(String(plain.headers['content-type']), /^text\/plain; version=0\.0\.4/);
    assert.match(await plain.body.text(), /^# TYPE stove_cri_requests_total counter$/m);
    const other = await request(`${base}/`);
    await other.body.dump();
    assert.equal(other.statusCode, 404);
    const post = await request(`${base}/metrics`, { method: 'POST', body: '' });
    await post.body.dump();
    assert.equal(post.statusCode, 405);
  });

  it('a pod start is one trace from the caller\'s traceparent: CRI spans with step children, errors recorded', async () => {
    const traceId = randomBytes(16).toString('hex');
    const callerSpan = randomBytes(8).toString('hex');
    const metadata = new Metadata();
    metadata.set('traceparent', `00-${traceId}-${callerSpan}-01`);
    const podConfig = world.pods.pod();
    const podId = await runPodWithMetadata(world, podConfig, metadata);

    // A fresh image (its own layer), so the pull has layer and unpack spans.
    const fresh = await pushBusyboxImage(world.registry, `trace/fresh-${randomBytes(3).toString('hex')}:1`, {
      extraFiles: [{ path: 'marker', content: randomBytes(16).toString('hex') }],
    });
    await world.runtime.pull(fresh.reference);
    await world.daemon.clients.image.removeImage({ image: ImageSpec.fromPartial({ image: fresh.reference }) });
    const containerId = await world.create({ id: podId, config: podConfig }, world.config('sleeper'));
    const unknown = 'f'.repeat(64);
    await assert.rejects(world.status(unknown), (err: ServiceError) => err.code === status.NOT_FOUND);

    const find = (pred: (s: ReceivedSpan) => boolean) => receiver.spans.find(pred);
    // Spans go out in batches, in the order they end: the failed status call ends last.
    await eventually('the spans to be exported', async () => !!find((s) => s.name === 'runtime.v1.RuntimeService/ContainerStatus' && s.attributes['container.id'] === unknown), 20_000);
    assert.deepEqual(receiver.rejected, []);

    const run = find((s) => s.traceId === traceId && s.name === 'runtime.v1.RuntimeService/RunPodSandbox');
    assert.ok(run, `no RunPodSandbox span in trace ${traceId}: ${receiver.spans.map((s) => `${s.traceId}/${s.name}`).join(', ')}`);
    assert.equal(run.parentSpanId, callerSpan, 'the caller\'s span is the parent');
    assert.equal(run.kind, 2, 'a server span');
    assert.equal(run.service, 'stove-it');
    assert.equal(run.attributes['sandbox.id'], podId);
    assert.equal(run.attributes['rpc.system'], 'grpc');
    assert.equal(run.attributes['rpc.method'], 'RunPodSandbox');
    assert.equal(run.attributes['rpc.grpc.status_code'], 0);
    const children = receiver.spans.filter((s) => s.parentSpanId === run.spanId);
    for (const step of ['netns', 'cni', 'pauseCreate', 'pauseStart', 'podFiles', 'record']) {
      const child = children.find((c) => c.name === step);
      assert.ok(child, `step ${step} among ${children.map((c) => c.name).join(', ')}`);
      assert.equal(child.traceId, traceId);
      // The SDK anchors each span's clock to Date.now(): allow its millisecond.
      const slack = 1_000_000n;
      assert.ok(child.startNs + slack >= run.startNs && child.endNs <= run.endNs + slack, `${step} lies within RunPodSandbox`);
    }

    // Without a traceparent: a root span of its own, with the create's steps as children.
    const create = find((s) => s.name === 'runtime.v1.RuntimeService/CreateContainer' && s.attributes['container.id'] === containerId);
    assert.ok(create);
    assert.equal(create.parentSpanId, '');
    const createSteps = receiver.spans.filter((s) => s.parentSpanId === create.spanId).map((s) => s.name);
    for (const step of ['rootfs', 'spec', 'conmon', 'record']) assert.ok(createSteps.includes(step), `${step} in ${createSteps.join(', ')}`);

    const pull = find((s) => s.name === 'runtime.v1.ImageService/PullImage' && s.attributes['image.name'] === fresh.reference);
    assert.ok(pull);
    const layers = receiver.spans.filter((s) => s.parentSpanId === pull.spanId && s.name === 'pullLayer');
    assert.deepEqual(layers.map((l) => l.attributes['layer.digest']).sort(), fresh.layers.map((l) => l.digest).sort());
    // The busybox layer was there already: only the new one came from the registry.
    const unpacks = receiver.spans.filter((s) => layers.some((l) => l.spanId === s.parentSpanId) && s.name === 'unpack');
    assert.deepEqual(
      unpacks.map((u) => [u.attributes['layer.digest'], u.attributes['layer.source']]),
      [[fresh.layers[1]!.digest, 'registry']],
    );

    const failed = find((s) => s.name === 'runtime.v1.RuntimeService/ContainerStatus' && s.attributes['container.id'] === unknown)!;
    assert.equal(failed.status.code, 2, 'an error status');
    assert.match(failed.status.message, /not found/);
    assert.equal(failed.attributes['rpc.grpc.status_code'], 5);
    assert.ok(failed.events.includes('exception'));
  });
});
