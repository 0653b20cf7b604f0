import assert from 'node:assert/strict';
import { StoveMetrics, type StateSource } from '../../../src/observability/metrics.js';

function source(over: Partial<StateSource> = {}): StateSource {
  return {
    containerStates: () => ['running', 'running', 'exited', 'created'],
    podSandboxStates: () => ['ready', 'notready', 'ready'],
    imageCount: () => 7,
    streamingSessions: () => ({ exec: 2, attach: 0, portforward: 1 }),
    quarantinedRecords: () => 3,
    ...over,
  };
}

/** The value of one sample line of the Prometheus text format. */
function sample(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(series + ' '));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

describe('observability: metrics', () => {
  it('counts calls by method and code and times unary ones', async () => {
    const m = new StoveMetrics();
    m.criRequest('/runtime.v1.RuntimeService/Version', 'OK', 0.002);
    m.criRequest('/runtime.v1.RuntimeService/Version', 'OK', 0.004);
    m.criRequest('/runtime.v1.RuntimeService/ContainerStatus', 'NOT_FOUND', 0.001);
    m.criRequest('/runtime.v1.RuntimeService/GetContainerEvents', 'OK');
    const { contentType, body } = await m.scrape(undefined);
    assert.match(contentType, /^text\/plain; version=0\.0\.4/);
    assert.equal(sample(body, 'stove_cri_requests_total{method="/runtime.v1.RuntimeService/Version",code="OK"}'), 2);
    assert.equal(sample(body, 'stove_cri_requests_total{method="/runtime.v1.RuntimeService/ContainerStatus",code="NOT_FOUND"}'), 1);
    assert.equal(sample(body, 'stove_cri_request_duration_seconds_count{method="/runtime.v1.RuntimeService/Version"}'), 2);
    assert.equal(sample(body, 'stove_cri_request_duration_seconds_bucket{le="0.0025",method="/runtime.v1.RuntimeService/Version"}'), 1);
    assert.equal(sample(body, 'stove_cri_request_duration_seconds_bucket{le="0.005",method="/runtime.v1.RuntimeService/Version"}'), 2);
    // A stream is counted, not timed.
    assert.equal(sample(body, 'stove_cri_requests_total{method="/runtime.v1.RuntimeService/GetContainerEvents",code="OK"}'), 1);
    assert.ok(!body.includes('stove_cri_request_duration_seconds_count{method="/runtime.v1.RuntimeService/GetContainerEvents"}'));
  });

  it('reads the state gauges from the source at scrape time, zeros included', async () => {
    const m = new StoveMetrics();
    let running = 2;
    m.setStateSource(source({ containerStates: () => Array<string>(running).fill('running') }));
    let body = (await m.scrape(undefined)).body;
    assert.equal(sample(body, 'stove_containers{state="running"}'), 2);
    assert.equal(sample(body, 'stove_containers{state="exited"}'), 0);
    assert.equal(sample(body, 'stove_pod_sandboxes{state="ready"}'), 2);
    assert.equal(sample(body, 'stove_pod_sandboxes{state="notready"}'), 1);
    assert.equal(sample(body, 'stove_images'), 7);
    assert.equal(sample(body, 'stove_streaming_sessions{kind="exec"}'), 2);
    assert.equal(sample(body, 'stove_streaming_sessions{kind="attach"}'), 0);
    assert.equal(sample(body, 'stove_quarantined_records'), 3);
    running = 0;
    body = (await m.scrape(undefined)).body;
    assert.equal(sample(body, 'stove_containers{state="running"}'), 0);
  });

  it('adds CreateContainer and StartContainer of one container; pod start with its steps', async () => {
    const m = new StoveMetrics();
    m.containerCreated('a', 0.04);
    m.containerCreated('b', 0.05);
    m.containerStarted('a', 0.01);
    m.containerStarted('c', 0.01); // created before the daemon started: not a start to time
    m.podSandboxStarted(0.045, { netns: 2.5, cni: 30, pauseCreate: 33.2 });
    const { body } = await m.scrape(undefined);
    assert.equal(sample(body, 'stove_container_start_duration_seconds_count'), 1);
    assert.ok(Math.abs(sample(body, 'stove_container_start_duration_seconds_sum')! - 0.05) < 1e-9);
    assert.equal(sample(body, 'stove_container_start_duration_seconds_bucket{le="0.05"}'), 1);
    assert.equal(sample(body, 'stove_pod_sandbox_start_duration_seconds_count'), 1);
    assert.equal(sample(body, 'stove_pod_sandbox_step_duration_seconds_count{step="cni"}'), 1);
    assert.equal(sample(body, 'stove_pod_sandbox_step_duration_seconds_sum{step="cni"}'), 0.03);
    assert.equal(sample(body, 'stove_pod_sandbox_step_duration_seconds_bucket{le="0.025",step="cni"}'), 0);
  });

  it('counts pulls, bytes, layer jobs, ExecSync results, OOM kills and recovery', async () => {
    const m = new StoveMetrics();
    m.imagePull('success', 1.5);
    m.imagePull('failure', 0.2);
    m.imagePullBytes(1000);
    m.imagePullBytes(24);
    m.layerUnpacked(0.3);
    m.execSync('ok');
    m.execSync('timeout');
    m.containerOom();
    m.recovered(0.25);
    const { body } = await m.scrape(undefined);
    assert.equal(sample(body, 'stove_image_pulls_total{result="success"}'), 1);
    assert.equal(sample(body, 'stove_image_pulls_total{result="failure"}'), 1);
    assert.equal(sample(body, 'stove_image_pull_bytes_total'), 1024);
    assert.equal(sample(body, 'stove_image_pull_duration_seconds_count{result="success"}'), 1);
    assert.equal(sample(body, 'stove_image_unpack_duration_seconds_count'), 1);
    assert.equal(sample(body, 'stove_exec_sync_total{result="ok"}'), 1);
    assert.equal(sample(body, 'stove_exec_sync_total{result="nonzero_exit"}'), 0);
    assert.equal(sample(body, 'stove_exec_sync_total{result="timeout"}'), 1);
    assert.equal(sample(body, 'stove_container_oom_events_total'), 1);
    assert.equal(sample(body, 'stove_recovery_duration_seconds'), 0.25);
    assert.ok(sample(body, 'process_resident_memory_bytes')! > 0);
    assert.ok(body.includes('# TYPE nodejs_eventloop_lag_seconds gauge'));
  });

  it('serves OpenMetrics when asked, and the Prometheus format again afterwards', async () => {
    const m = new StoveMetrics();
    m.criRequest('/runtime.v1.RuntimeService/Version', 'OK', 0.001);
    const om = await m.scrape('application/openmetrics-text; version=1.0.0; charset=utf-8');
    assert.match(om.contentType, /^application\/openmetrics-text/);
    assert.match(om.body, /^# TYPE stove_cri_requests counter$/m);
    assert.match(om.body, /^stove_cri_requests_total\{method="\/runtime.v1.RuntimeService\/Version",code="OK"\} 1$/m);
    assert.ok(om.body.endsWith('# EOF\n'));
    const plain = await m.scrape('text/plain');
    assert.match(plain.body, /^# TYPE stove_cri_requests_total counter$/m);
    assert.equal(sample(plain.body, 'stove_cri_requests_total{method="/runtime.v1.RuntimeService/Version",code="OK"}'), 1);
  });

  // How long a scrape takes is measured by bench/observability.ts, not asserted here.
  it('counts 100 running containers at scrape time without a label per container', async () => {
    const m = new StoveMetrics();
    const states = [...Array<string>(100).fill('running'), 'exited', 'created'];
    m.setStateSource(source({ containerStates: () => states, podSandboxStates: () => [...Array<string>(50).fill('ready'), 'notready'] }));
    const { body } = await m.scrape(undefined);
    assert.equal(sample(body, 'stove_containers{state="running"}'), 100);
    assert.equal(sample(body, 'stove_containers{state="exited"}'), 1);
    assert.equal(sample(body, 'stove_pod_sandboxes{state="ready"}'), 50);
    const series = body.split('\n').filter((l) => l.startsWith('stove_containers{'));
    assert.ok(series.length <= 4, `one series per state, got ${series.length}`);
  });
});
