/**
 * Stove's Prometheus metrics (prom-client): the families of docs/observability.md, the process and
 * Node.js defaults, and gauges of containers, pods and images counted from the in-memory stores when
 * scraped. Loaded only when `[metrics] address` is set. No family has a per-container label: per-container
 * figures belong to the CRI stats RPCs.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics, type RegistryContentType } from 'prom-client';
import type { ExecSyncResult, MetricsRecorder } from './hooks.js';

/** What the state gauges read at scrape time; each call must be cheap (a pass over in-memory records). */
export interface StateSource {
  containerStates(): Iterable<string>;
  podSandboxStates(): Iterable<string>;
  imageCount(): number;
  streamingSessions(): Readonly<Record<string, number>>;
  quarantinedRecords(): number;
}

/** Label values reported even at zero, so a dashboard sees every series from the first scrape. */
const CONTAINER_STATES = ['created', 'running', 'exited'];
const POD_SANDBOX_STATES = ['ready', 'notready'];
const STREAMING_KINDS = ['exec', 'attach', 'portforward'];
const EXEC_SYNC_RESULTS: ExecSyncResult[] = ['ok', 'nonzero_exit', 'timeout', 'error'];

const RPC_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];
const START_BUCKETS = [0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 2, 5, 10, 30];
const STEP_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
const PULL_BUCKETS = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600];
const UNPACK_BUCKETS = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];

const EVENT_LOOP_SAMPLE_MS = 50;

/** Creates between CreateContainer and StartContainer waiting to be added up; bounded against leaks. */
const MAX_PENDING_CREATES = 4096;

function countInto(gauge: Gauge<'state'>, known: string[], values: Iterable<string>): void {
  const counts = new Map<string, number>(known.map((k) => [k, 0]));
  for (const v of values) counts.set(v, (counts.get(v) ?? 0) + 1);
  for (const [state, n] of counts) gauge.set({ state }, n);
}

export class StoveMetrics implements MetricsRecorder {
  readonly registry = new Registry<RegistryContentType>();
  private source: StateSource | undefined;
  private readonly pendingCreates = new Map<string, number>();
  private scrapeChain: Promise<unknown> = Promise.resolve();

  private readonly requests: Counter<'method' | 'code'>;
  private readonly requestDuration: Histogram<'method'>;
  private readonly podStart: Histogram;
  private readonly podStep: Histogram<'step'>;
  private readonly containerStart: Histogram;
  private readonly pulls: Counter<'result'>;
  private readonly pullBytes: Counter;
  private readonly pullDuration: Histogram<'result'>;
  private readonly unpackDuration: Histogram;
  private readonly execSyncs: Counter<'result'>;
  private readonly ooms: Counter;
  private readonly recovery: Gauge;

  constructor() {
    const registers = [this.registry];
    // The event-loop histogram samples every 50 ms rather than prom-client's 10 ms: an idle daemon is
    // woken 20 times a second instead of 100, and lag worth an alert is far longer than either.
    collectDefaultMetrics({ register: this.registry, eventLoopMonitoringPrecision: EVENT_LOOP_SAMPLE_MS });
    this.requests = new Counter({
      name: 'stove_cri_requests_total',
      help: 'CRI calls by full gRPC method name and gRPC status code name.',
      labelNames: ['method', 'code'],
      registers,
    });
    this.requestDuration = new Histogram({
      name: 'stove_cri_request_duration_seconds',
      help: 'Duration of unary CRI calls by full gRPC method name.',
      labelNames: ['method'],
      buckets: RPC_BUCKETS,
      registers,
    });
    this.podStart = new Histogram({
      name: 'stove_pod_sandbox_start_duration_seconds',
      help: 'Duration of successful RunPodSandbox calls.',
      buckets: START_BUCKETS,
      registers,
    });
    this.podStep = new Histogram({
      name: 'stove_pod_sandbox_step_duration_seconds',
      help: 'Duration of each step of successful RunPodSandbox calls (some steps run at the same time).',
      labelNames: ['step'],
      buckets: STEP_BUCKETS,
      registers,
    });
    this.containerStart = new Histogram({
      name: 'stove_container_start_duration_seconds',
      help: 'CreateContainer plus StartContainer of a container, both successful.',
      buckets: START_BUCKETS,
      registers,
    });
    this.pulls = new Counter({ name: 'stove_image_pulls_total', help: 'Image pulls by result (success or failure).', labelNames: ['result'], registers });
    this.pullBytes = new Counter({ name: 'stove_image_pull_bytes_total', help: 'Layer bytes received from registries.', registers });
    this.pullDuration = new Histogram({
      name: 'stove_image_pull_duration_seconds',
      help: 'Duration of image pulls by result, including pulls of images already present.',
      labelNames: ['result'],
      buckets: PULL_BUCKETS,
      registers,
    });
    this.unpackDuration = new Histogram({
      name: 'stove_image_unpack_duration_seconds',
      help: 'Duration of each layer job: download, verify and unpack in one pass, or unpack of a stored blob.',
      buckets: UNPACK_BUCKETS,
      registers,
    });
    this.execSyncs = new Counter({ name: 'stove_exec_sync_total', help: 'ExecSync calls by result.', labelNames: ['result'], registers });
    this.ooms = new Counter({ name: 'stove_container_oom_events_total', help: 'Container exits caused by the kernel OOM killer.', registers });
    this.recovery = new Gauge({
      name: 'stove_recovery_duration_seconds',
      help: 'How long the recovery of pods and containers took when the daemon started.',
      registers,
    });
    for (const result of EXEC_SYNC_RESULTS) this.execSyncs.inc({ result }, 0);
    for (const result of ['success', 'failure']) this.pulls.inc({ result }, 0);

    const metricsOf = this;
    new Gauge({
      name: 'stove_containers',
      help: 'Containers by state (created, running, exited).',
      labelNames: ['state'],
      registers,
      collect() {
        if (metricsOf.source) countInto(this, CONTAINER_STATES, metricsOf.source.containerStates());
      },
    });
    new Gauge({
      name: 'stove_pod_sandboxes',
      help: 'Pod sandboxes by state (ready, notready).',
      labelNames: ['state'],
      registers,
      collect() {
        if (metricsOf.source) countInto(this, POD_SANDBOX_STATES, metricsOf.source.podSandboxStates());
      },
    });
    new Gauge({
      name: 'stove_images',
      help: 'Images in the image store.',
      registers,
      collect() {
        if (metricsOf.source) this.set(metricsOf.source.imageCount());
      },
    });
    new Gauge({
      name: 'stove_streaming_sessions',
      help: 'Live exec, attach and port-forward sessions by kind.',
      labelNames: ['kind'],
      registers,
      collect() {
        if (!metricsOf.source) return;
        const sessions = metricsOf.source.streamingSessions();
        for (const kind of STREAMING_KINDS) this.set({ kind }, sessions[kind] ?? 0);
      },
    });
    new Gauge({
      name: 'stove_quarantined_records',
      help: 'State records set aside because they could not be read or trusted.',
      registers,
      collect() {
        if (metricsOf.source) this.set(metricsOf.source.quarantinedRecords());
      },
    });
  }

  /** Where the state gauges read from, once the services exist. */
  setStateSource(source: StateSource): void {
    this.source = source;
  }

  /**
   * The exposition for one scrape: OpenMetrics when the scraper asks for it in `Accept`, else the
   * Prometheus text format. Scrapes run one at a time (the registry's format is switched per scrape).
   */
  scrape(accept: string | undefined): Promise<{ contentType: string; body: string }> {
    const openMetrics = (accept ?? '').includes('application/openmetrics-text');
    const run = this.scrapeChain.then(async () => {
      this.registry.setContentType(openMetrics ? Registry.OPENMETRICS_CONTENT_TYPE : Registry.PROMETHEUS_CONTENT_TYPE);
      // prom-client 15 renames counters in place for OpenMetrics (drops `_total`); put the names back.
      const names = this.registry.getMetricsAsArray().map((m) => [m, m.name] as const);
      try {
        return { contentType: this.registry.contentType, body: await this.registry.metrics() };
      } finally {
        for (const [m, name] of names) (m as { name: string }).name = name;
      }
    });
    this.scrapeChain = run.catch(() => {});
    return run;
  }

  criRequest(method: string, code: string, seconds?: number): void {
    this.requests.inc({ method, code });
    if (seconds !== undefined) this.requestDuration.observe({ method }, seconds);
  }

  podSandboxStarted(seconds: number, stepsMs: Readonly<Record<string, number>>): void {
    this.podStart.observe(seconds);
    for (const [step, ms] of Object.entries(stepsMs)) this.podStep.observe({ step }, ms / 1000);
  }

  containerCreated(id: string, seconds: number): void {
    if (this.pendingCreates.size >= MAX_PENDING_CREATES) {
      // Containers created and never started: forget the oldest.
      const oldest = this.pendingCreates.keys().next().value;
      if (oldest !== undefined) this.pendingCreates.delete(oldest);
    }
    this.pendingCreates.set(id, seconds);
  }

  containerStarted(id: string, seconds: number): void {
    const created = this.pendingCreates.get(id);
    if (created === undefined) return; // created before this daemon started
    this.pendingCreates.delete(id);
    this.containerStart.observe(created + seconds);
  }

  imagePull(result: 'success' | 'failure', seconds: number): void {
    this.pulls.inc({ result });
    this.pullDuration.observe({ result }, seconds);
  }

  imagePullBytes(bytes: number): void {
    this.pullBytes.inc(bytes);
  }

  layerUnpacked(seconds: number): void {
    this.unpackDuration.observe(seconds);
  }

  execSync(result: ExecSyncResult): void {
    this.execSyncs.inc({ result });
  }

  containerOom(): void {
    this.ooms.inc();
  }

  recovered(seconds: number): void {
    this.recovery.set(seconds);
  }
}
