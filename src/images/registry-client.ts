/**
 * The OCI distribution (registry v2) client, on undici: manifests and blobs from a registry and its
 * configured mirrors. Handles auth challenges, redirects to blob storage (dropping Authorization
 * when the origin changes), retries with backoff on connection errors and 429/5xx, resumes broken
 * blob downloads with Range, and fails a transfer that stalls.
 */
import type { Agent, Dispatcher } from 'undici';
import { setTimeout as wait } from 'node:timers/promises';
import { undici } from './http.js';
import { StoveError, messageOf } from '../common/errors.js';
import type { Logger } from '../common/logger.js';
import { DEFAULT_DOMAIN, type ImageReference } from './reference.js';
import {
  TokenCache,
  basicAuthorization,
  credentialsLabel,
  errorSummary,
  fetchToken,
  parseWwwAuthenticate,
  type Challenge,
  type Credentials,
} from './auth.js';
import type { RegistryConfig } from '../config/schema.js';
import { StallError, readBounded } from './bounded-body.js';

export { StallError };
import type { CertsDirs, HostTls } from './trust/certs.js';
import { TlsAgents, connectOptions, describeTlsFailure, mayHideTlsAlert, probeTlsAlert } from './trust/tls.js';

export interface RegistryClientOptions {
  registries: Record<string, RegistryConfig>;
  /** A transfer with no bytes for this long fails. */
  stallTimeoutMs: number;
  log: Logger;
  /** Retries after the first attempt, for connection errors and 429/5xx. */
  retries?: number;
  /** First backoff delay; doubles each retry. */
  retryBaseMs?: number;
  /** Per-host CAs and client certificates (Docker's certs.d layout). */
  certs?: CertsDirs;
}

/** One place to fetch from: a mirror or the registry itself. */
export interface Endpoint {
  /** Base URL without a trailing slash (`https://registry-1.docker.io`). */
  base: string;
  /** host[:port], for credentials and messages. */
  host: string;
  mirror: boolean;
  /** Accept any TLS certificate. */
  insecureTls: boolean;
  /** The host's certs dir material and the agent built from it, when it has one. */
  tls?: HostTls;
  agent?: Dispatcher;
}

export const MANIFEST_MEDIA_TYPES = {
  ociIndex: 'application/vnd.oci.image.index.v1+json',
  ociManifest: 'application/vnd.oci.image.manifest.v1+json',
  dockerList: 'application/vnd.docker.distribution.manifest.list.v2+json',
  dockerManifest: 'application/vnd.docker.distribution.manifest.v2+json',
  dockerSchema1: 'application/vnd.docker.distribution.manifest.v1+json',
  dockerSchema1Signed: 'application/vnd.docker.distribution.manifest.v1+prettyjws',
} as const;

const ACCEPT = [
  MANIFEST_MEDIA_TYPES.ociIndex,
  MANIFEST_MEDIA_TYPES.dockerList,
  MANIFEST_MEDIA_TYPES.ociManifest,
  MANIFEST_MEDIA_TYPES.dockerManifest,
  // Asked for only so that a schema 1 image is recognised and refused with a clear message.
  `${MANIFEST_MEDIA_TYPES.dockerSchema1Signed};q=0.5`,
  `${MANIFEST_MEDIA_TYPES.dockerSchema1};q=0.5`,
].join(', ');

const MAX_MANIFEST_BYTES = 4 << 20;
const MAX_REDIRECTS = 5;
const RETRY_STATUS = new Set([429, 500, 502, 503, 504]);
const RETRY_CODES = new Set([
  'ECONNRESET',
  'ECONNREFUSED',
  'ECONNABORTED',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EAI_AGAIN',
  'UND_ERR_SOCKET',
  'UND_ERR_CLOSED',
  'UND_ERR_CONNECT_TIMEOUT',
  'UND_ERR_HEADERS_TIMEOUT',
  'UND_ERR_BODY_TIMEOUT',
]);

/** The registry's own v2 endpoint for a domain (`docker.io` is served by `registry-1.docker.io`). */
function upstreamHost(domain: string): string {
  return domain === DEFAULT_DOMAIN ? 'registry-1.docker.io' : domain;
}

/** Loopback registries speak plain http, as with containerd and Docker. */
export function isLocalHost(host: string): boolean {
  const name = host.startsWith('[') ? host.slice(0, host.indexOf(']') + 1) : host.split(':')[0]!;
  return name === 'localhost' || name === '127.0.0.1' || name === '[::1]' || /^127\.\d+\.\d+\.\d+$/.test(name);
}

/** An error from talking to a registry that is worth retrying. */
function isRetryable(err: unknown): boolean {
  const e = err as { code?: string; cause?: { code?: string } };
  return RETRY_CODES.has(e?.code ?? '') || RETRY_CODES.has(e?.cause?.code ?? '') || err instanceof EarlyEndError;
}

class EarlyEndError extends Error {}

/** An HTTP-level answer (not a connection problem): worth reporting over a mirror's network error. */
class HttpStatusError extends StoveError {}

/** Waits `ms`, or rejects with the signal's reason once it aborts. */
const sleep = (ms: number, signal?: AbortSignal) => wait(ms, undefined, { signal });

export interface ManifestResponse {
  body: Buffer;
  mediaType: string;
  endpoint: Endpoint;
}

export class RegistryClient {
  readonly tokens = new TokenCache();
  /** The last challenge each endpoint sent, so later pulls can authenticate up front. */
  readonly challenges = new Map<string, Challenge>();
  /** The shared agents, made with the first request (see http.ts). */
  private agents?: Promise<{ verified: Agent; insecure: Agent }>;
  private readonly agentSettings: { keepAliveTimeout: number; headersTimeout: number; bodyTimeout: number; connections: number };
  private readonly tlsAgents?: TlsAgents;
  readonly retries: number;
  readonly retryBaseMs: number;

  constructor(readonly options: RegistryClientOptions) {
    const common = { keepAliveTimeout: 30_000, headersTimeout: options.stallTimeoutMs, bodyTimeout: 0, connections: 32 };
    this.agentSettings = common;
    if (options.certs) this.tlsAgents = new TlsAgents(options.certs, common);
    this.retries = options.retries ?? 4;
    this.retryBaseMs = options.retryBaseMs ?? 250;
  }

  /** Replaces the per-registry settings (a config reload); pulls that start later use them. */
  setRegistries(registries: Record<string, RegistryConfig>): void {
    this.options.registries = registries;
  }

  async dispatcher(endpoint: Endpoint): Promise<Dispatcher> {
    if (endpoint.agent) return endpoint.agent;
    this.agents ??= undici().then(({ Agent }) => ({
      verified: new Agent(this.agentSettings),
      insecure: new Agent({ ...this.agentSettings, connect: { rejectUnauthorized: false } }),
    }));
    const agents = await this.agents;
    return endpoint.insecureTls ? agents.insecure : agents.verified;
  }

  /** Gives https endpoints the agent of their host's certs dir (re-read if its files changed). */
  private async withTls(endpoints: Endpoint[]): Promise<Endpoint[]> {
    if (!this.tlsAgents) return endpoints;
    return Promise.all(
      endpoints.map(async (endpoint) => {
        // A loopback registry with a certs dir of its own speaks TLS: the operator said so.
        const loopback = !endpoint.mirror && endpoint.base.startsWith('http:') && isLocalHost(endpoint.host);
        if (!endpoint.base.startsWith('https:') && !loopback) return endpoint;
        const got = await this.tlsAgents!.agentFor(new URL(endpoint.base).host, endpoint.insecureTls);
        if (!got) return endpoint;
        return { ...endpoint, base: endpoint.base.replace(/^http:/, 'https:'), agent: got.agent, tls: got.tls };
      }),
    );
  }

  /** A message naming the certs file to add, for a TLS failure with an endpoint. */
  async tlsFailure(err: unknown, endpoint: Endpoint): Promise<string | undefined> {
    if (!endpoint.base.startsWith('https:') || !this.options.certs) return undefined;
    const host = new URL(endpoint.base).host;
    const direct = describeTlsFailure(err, host, this.options.certs, endpoint.tls);
    if (direct || !mayHideTlsAlert(err)) return direct;
    const alert = await probeTlsAlert(endpoint.base, connectOptions(endpoint.tls, endpoint.insecureTls));
    return alert ? describeTlsFailure(alert, host, this.options.certs, endpoint.tls) : undefined;
  }

  /** Mirrors (in config order), then the registry itself. */
  endpointsFor(domain: string): Endpoint[] {
    const settings = this.options.registries[domain];
    const endpoints: Endpoint[] = [];
    for (const mirror of settings?.mirrors ?? []) {
      const url = new URL(mirror);
      const path = url.pathname.replace(/\/+$/, '').replace(/\/v2$/, '');
      endpoints.push({
        base: `${url.protocol}//${url.host}${path}`,
        host: url.host,
        mirror: true,
        insecureTls: url.protocol === 'https:' && !!this.options.registries[url.host]?.insecure,
      });
    }
    const host = upstreamHost(domain);
    if (isLocalHost(host)) {
      endpoints.push({ base: `http://${host}`, host: domain, mirror: false, insecureTls: false });
    } else if (settings?.insecure) {
      // Insecure: TLS without verification first, then plain http.
      endpoints.push({ base: `https://${host}`, host: domain, mirror: false, insecureTls: true });
      endpoints.push({ base: `http://${host}`, host: domain, mirror: false, insecureTls: false });
    } else {
      endpoints.push({ base: `https://${host}`, host: domain, mirror: false, insecureTls: false });
    }
    return endpoints;
  }

  /** Credentials for an endpoint: the request's for the registry itself, else the config file's. */
  credentialsFor(endpoint: Endpoint, requestCreds: Credentials | undefined): Credentials | undefined {
    if (!endpoint.mirror && requestCreds) return requestCreds;
    const s = this.options.registries[endpoint.host];
    if (!s) return undefined;
    if (s.username) return { username: s.username, password: s.password };
    if (s.auth) {
      const text = Buffer.from(s.auth, 'base64').toString('utf8');
      const colon = text.indexOf(':');
      if (colon > 0) return { username: text.slice(0, colon), password: text.slice(colon + 1) };
    }
    if (s.identityToken) return { identityToken: s.identityToken };
    return undefined;
  }

  async session(ref: ImageReference, creds?: Credentials): Promise<RegistrySession> {
    return new RegistrySession(this, ref, await this.withTls(this.endpointsFor(ref.domain)), creds);
  }

  async close(): Promise<void> {
    const agents = await this.agents;
    await Promise.all([agents?.verified.close(), agents?.insecure.close(), this.tlsAgents?.close()]);
  }
}

interface SendOptions {
  method: 'GET' | 'HEAD';
  /** The caller reads the body with its own stall timer (blob streams, whose consumer may pause). */
  stream?: boolean;
  headers?: Record<string, string>;
  /** What is being fetched, for messages (`manifest latest`, `blob sha256:…`). */
  what: string;
  /** Aborts the request, its body and any retry (the pull's callers all left). */
  signal?: AbortSignal;
}

/** Everything one pull says to the registry (and its mirrors) for one repository. */
export class RegistrySession {
  private readonly authorization = new Map<string, string>();
  /** Endpoints in the order to try; the one that served the manifest moves to the front. */
  private endpoints: Endpoint[];
  private readonly log: Logger;

  constructor(
    private readonly client: RegistryClient,
    readonly ref: ImageReference,
    endpoints: Endpoint[],
    private readonly creds?: Credentials,
  ) {
    this.endpoints = endpoints;
    this.log = client.options.log;
  }

  private get scope(): string {
    return `repository:${this.ref.path}:pull`;
  }

  private url(endpoint: Endpoint, path: string): string {
    return `${endpoint.base}/v2/${this.ref.path}/${path}`;
  }

  /** Tries each endpoint in turn; a mirror's failure moves on to the next. */
  private async onEndpoints<T>(what: string, body: (endpoint: Endpoint) => Promise<T>, signal?: AbortSignal): Promise<T> {
    let best: unknown;
    for (const endpoint of this.endpoints) {
      try {
        const result = await body(endpoint);
        if (endpoint !== this.endpoints[0]) this.endpoints = [endpoint, ...this.endpoints.filter((e) => e !== endpoint)];
        return result;
      } catch (err) {
        if (err instanceof StallError) throw err;
        signal?.throwIfAborted();
        // Prefer an HTTP answer (401, 404) over a connection error when reporting.
        if (best === undefined || (err instanceof HttpStatusError && !(best instanceof HttpStatusError))) best = err;
        if (this.endpoints.length > 1)
          this.log.debug('registry endpoint failed, trying the next', { endpoint: endpoint.base, what, error: messageOf(err) });
      }
    }
    throw best;
  }

  /** Authorization for an endpoint from what we already know (a cached token or basic scheme). */
  private knownAuthorization(endpoint: Endpoint): string | undefined {
    const have = this.authorization.get(endpoint.base);
    if (have) return have;
    const creds = this.client.credentialsFor(endpoint, this.creds);
    if (creds?.registryToken) return `Bearer ${creds.registryToken}`;
    const challenge = this.client.challenges.get(endpoint.base);
    if (!challenge) return undefined;
    if (challenge.scheme === 'basic') return creds ? basicAuthorization(creds) : undefined;
    if (challenge.scheme === 'bearer') {
      const token = this.client.tokens.get(this.tokenKey(endpoint, challenge, creds));
      return token ? `Bearer ${token}` : undefined;
    }
    return undefined;
  }

  private tokenKey(endpoint: Endpoint, challenge: Challenge, creds: Credentials | undefined): string {
    const who = creds ? `${credentialsLabel(creds)}:${creds.password ?? ''}${creds.identityToken ?? ''}` : 'anonymous';
    return [endpoint.base, challenge.params.realm, challenge.params.service, this.scope, who].join('|');
  }

  /** Answers a 401: returns the Authorization to retry with, or throws a clear error. */
  private async authenticate(endpoint: Endpoint, header: string | undefined, refused: boolean): Promise<string> {
    const challenges = parseWwwAuthenticate(header ?? '');
    const challenge = challenges.find((c) => c.scheme === 'bearer') ?? challenges.find((c) => c.scheme === 'basic');
    const creds = this.client.credentialsFor(endpoint, this.creds);
    const image = `${this.ref.domain}/${this.ref.path}`;
    if (!challenge) throw new HttpStatusError('FailedPrecondition', `${endpoint.host} answered 401 Unauthorized for ${image} with no usable challenge`);
    this.client.challenges.set(endpoint.base, challenge);
    if (refused) {
      // Credentials (or the token they bought) were refused.
      throw new HttpStatusError(
        'FailedPrecondition',
        creds
          ? `pull access denied for ${image}: ${endpoint.host} rejected the credentials (${credentialsLabel(creds)}): 401 Unauthorized`
          : `pull access denied for ${image}: ${endpoint.host} requires authentication (401 Unauthorized) and no credentials were given`,
      );
    }
    let authorization: string | undefined;
    if (challenge.scheme === 'basic') {
      authorization = creds ? basicAuthorization(creds) : undefined;
      if (!authorization)
        throw new HttpStatusError(
          'FailedPrecondition',
          `pull access denied for ${image}: ${endpoint.host} requires authentication (401 Unauthorized, Basic) and no credentials were given`,
        );
    } else {
      const scopes = [this.scope];
      if (challenge.params.scope && !scopes.includes(challenge.params.scope)) scopes.push(challenge.params.scope);
      const key = this.tokenKey(endpoint, challenge, creds);
      // A cached token was just refused (or never existed): always ask for a new one.
      let token: string | undefined;
      {
        const got = await fetchToken({
          challenge,
          scopes,
          creds,
          dispatcher: await this.client.dispatcher(endpoint),
          host: endpoint.host,
          headersTimeout: this.client.options.stallTimeoutMs,
        });
        this.client.tokens.set(key, got.token, got.expiresIn, got.issuedAt);
        token = got.token;
      }
      authorization = `Bearer ${token}`;
    }
    this.authorization.set(endpoint.base, authorization);
    return authorization;
  }

  /**
   * One request to one endpoint, with auth, redirects and retries. Returns a 2xx/3xx-final response
   * whose body the caller consumes; other statuses become errors.
   */
  private async send(endpoint: Endpoint, path: string, opts: SendOptions): Promise<Dispatcher.ResponseData> {
    let attempt = 0;
    let authenticated = false;
    for (;;) {
      let response: Dispatcher.ResponseData;
      try {
        const authorization = this.knownAuthorization(endpoint);
        response = await this.follow(endpoint, this.url(endpoint, path), opts, authorization);
        if (response.statusCode === 401) {
          await discardBody(response.body, this.client.options.stallTimeoutMs);
          const header = response.headers['www-authenticate'];
          this.authorization.delete(endpoint.base);
          await this.authenticate(endpoint, Array.isArray(header) ? header.join(', ') : header, authenticated);
          authenticated = true;
          continue;
        }
      } catch (err) {
        opts.signal?.throwIfAborted();
        // A certificate problem does not go away by retrying: say which file is missing.
        const tlsProblem = await this.client.tlsFailure(err, endpoint);
        if (tlsProblem) throw new StoveError('FailedPrecondition', `${opts.what} from ${endpoint.base}: ${tlsProblem}`, { cause: err });
        // A mirror that refuses connections is skipped at once: the next endpoint is the fallback.
        const refused = endpoint.mirror && ((err as { code?: string }).code ?? (err as { cause?: { code?: string } }).cause?.code) === 'ECONNREFUSED';
        if (!isRetryable(err) || attempt >= this.client.retries || refused) {
          if (err instanceof StoveError) throw err;
          throw new StoveError('Unavailable', `${opts.what} from ${endpoint.base}: ${messageOf(err)}`, { cause: err });
        }
        attempt++;
        const delay = this.client.retryBaseMs * 2 ** (attempt - 1) * (0.75 + Math.random() / 2);
        this.log.warn('registry request failed, retrying', { url: this.url(endpoint, path), attempt, delayMs: Math.round(delay), error: messageOf(err) });
        await sleep(delay, opts.signal);
        continue;
      }
      if (response.statusCode >= 200 && response.statusCode < 300) return response;
      const text = opts.method === 'HEAD' ? '' : await readLimited(response.body, 64 << 10, this.client.options.stallTimeoutMs).then((b) => b.toString(), () => '');
      if (opts.method === 'HEAD') await discardBody(response.body, this.client.options.stallTimeoutMs);
      if (RETRY_STATUS.has(response.statusCode) && attempt < this.client.retries) {
        attempt++;
        const retryAfter = Number(response.headers['retry-after']);
        const delay = Number.isFinite(retryAfter) && retryAfter > 0
          ? Math.min(retryAfter * 1000, 10_000)
          : this.client.retryBaseMs * 2 ** (attempt - 1) * (0.75 + Math.random() / 2);
        this.log.warn('registry answered an error, retrying', { url: this.url(endpoint, path), status: response.statusCode, attempt, delayMs: Math.round(delay) });
        await sleep(delay, opts.signal);
        continue;
      }
      const image = `${this.ref.domain}/${this.ref.path}`;
      if (response.statusCode === 404)
        throw new HttpStatusError('NotFound', `${opts.what} of ${image} not found on ${endpoint.host}${errorSummary(text)}`);
      if (response.statusCode === 403)
        throw new HttpStatusError('FailedPrecondition', `pull access denied for ${image} on ${endpoint.host}: 403 Forbidden${errorSummary(text)}`);
      throw new HttpStatusError(
        RETRY_STATUS.has(response.statusCode) ? 'Unavailable' : 'Internal',
        `${opts.what} of ${image} from ${endpoint.host}: HTTP ${response.statusCode}${errorSummary(text)}`,
      );
    }
  }

  /** Follows redirects by hand so Authorization never goes to another origin. */
  private async follow(endpoint: Endpoint, url: string, opts: SendOptions, authorization: string | undefined): Promise<Dispatcher.ResponseData> {
    const origin = new URL(url).origin;
    let current = url;
    for (let hop = 0; ; hop++) {
      const headers: Record<string, string> = { ...opts.headers };
      if (authorization && new URL(current).origin === origin) headers.authorization = authorization;
      const { request } = await undici();
      const response = await request(current, {
        method: opts.method,
        headers,
        dispatcher: await this.client.dispatcher(endpoint),
        headersTimeout: this.client.options.stallTimeoutMs,
        signal: opts.signal,
        // undici's body timeout runs even while a consumer applies backpressure: streams time themselves.
        bodyTimeout: opts.stream ? 0 : this.client.options.stallTimeoutMs,
      });
      if (![301, 302, 303, 307, 308].includes(response.statusCode)) return response;
      await discardBody(response.body, this.client.options.stallTimeoutMs);
      const location = response.headers.location;
      if (!location || hop >= MAX_REDIRECTS) throw new StoveError('Internal', `${opts.what}: too many redirects from ${endpoint.host}`);
      current = new URL(String(location), current).toString();
    }
  }

  /** HEAD a manifest: its digest if the registry says, without fetching the body. */
  async headManifest(reference: string, signal?: AbortSignal): Promise<{ digest?: string; mediaType?: string }> {
    return this.onEndpoints(`manifest ${reference}`, async (endpoint) => {
      const res = await this.send(endpoint, `manifests/${reference}`, { method: 'HEAD', headers: { accept: ACCEPT }, what: `manifest "${reference}"`, signal });
      await discardBody(res.body, this.client.options.stallTimeoutMs);
      const digest = res.headers['docker-content-digest'];
      const type = res.headers['content-type'];
      return { digest: typeof digest === 'string' ? digest : undefined, mediaType: typeof type === 'string' ? type : undefined };
    }, signal);
  }

  /** GET a manifest (tag or digest); the caller verifies digests. */
  async getManifest(reference: string, maxBytes = MAX_MANIFEST_BYTES, signal?: AbortSignal): Promise<ManifestResponse> {
    return this.onEndpoints(`manifest ${reference}`, async (endpoint) => {
      const res = await this.send(endpoint, `manifests/${reference}`, { method: 'GET', headers: { accept: ACCEPT }, what: `manifest "${reference}"`, signal });
      const body = await readLimited(res.body, maxBytes, this.client.options.stallTimeoutMs, `manifest "${reference}"`);
      const type = res.headers['content-type'];
      return { body, mediaType: typeof type === 'string' ? type.split(';')[0]!.trim() : '', endpoint };
    }, signal);
  }

  /** GET a small blob (an image config) into memory. */
  async getBlob(digest: string, maxBytes: number, signal?: AbortSignal): Promise<Buffer> {
    return this.onEndpoints(`blob ${digest}`, async (endpoint) => {
      const res = await this.send(endpoint, `blobs/${digest}`, { method: 'GET', what: `blob ${digest}`, signal });
      return readLimited(res.body, maxBytes, this.client.options.stallTimeoutMs, `blob ${digest}`);
    }, signal);
  }

  /**
   * A blob's bytes as they arrive. A broken connection is retried and resumed at the byte where it
   * broke (Range; a registry that ignores Range is re-read from the start and the known part
   * skipped), so the consumer sees one continuous stream. No bytes for the stall timeout → error.
   * `signal` ends the download (the connection is closed) with its reason.
   */
  async *blobStream(digest: string, size: number, onBytes?: (n: number) => void, signal?: AbortSignal): AsyncGenerator<Buffer> {
    let offset = 0;
    let failures = 0;
    const stallMs = this.client.options.stallTimeoutMs;
    for (;;) {
      const headers: Record<string, string> = {};
      if (offset > 0) headers.range = `bytes=${offset}-`;
      const res = await this.onEndpoints(`blob ${digest}`, (endpoint) =>
        this.send(endpoint, `blobs/${digest}`, { method: 'GET', headers, what: `blob ${digest}`, stream: true, signal }).then((r) => ({ r, endpoint })),
      signal);
      const { r: response, endpoint } = res;
      let skip = 0;
      if (offset > 0) {
        const range = String(response.headers['content-range'] ?? '');
        const start = /^bytes (\d+)-/.exec(range)?.[1];
        if (response.statusCode !== 206 || Number(start) !== offset) {
          skip = offset;
          if (response.statusCode === 206) {
            await discardBody(response.body, this.client.options.stallTimeoutMs);
            throw new StoveError('Internal', `blob ${digest}: ${endpoint.host} answered a resume at ${offset} with "${range}"`);
          }
        }
      }
      const iterator = response.body[Symbol.asyncIterator]();
      try {
        for (;;) {
          const timer = setTimeout(() => {
            response.body.destroy(
              new StallError(
                `downloading blob ${digest} from ${endpoint.host} stalled: no data for ${stallMs / 1000}s at byte ${offset} of ${size} (images.stall_timeout_seconds)`,
              ),
            );
          }, stallMs);
          let next: IteratorResult<Buffer>;
          try {
            next = (await iterator.next()) as IteratorResult<Buffer>;
          } finally {
            clearTimeout(timer);
          }
          if (next.done) break;
          let chunk = next.value;
          if (skip > 0) {
            if (chunk.length <= skip) {
              skip -= chunk.length;
              continue;
            }
            chunk = chunk.subarray(skip);
            skip = 0;
          }
          offset += chunk.length;
          if (size >= 0 && offset > size) throw new StoveError('Internal', `blob ${digest} from ${endpoint.host} is larger than the ${size} bytes its descriptor says`);
          onBytes?.(chunk.length);
          yield chunk;
        }
        if (size >= 0 && offset < size) throw new EarlyEndError(`connection closed at byte ${offset} of ${size}`);
        return;
      } catch (err) {
        signal?.throwIfAborted();
        const stalled = err instanceof StallError || (err as { cause?: unknown })?.cause instanceof StallError;
        if (stalled) throw err instanceof StallError ? err : (err as { cause: StallError }).cause;
        if (!isRetryable(err) || failures >= this.client.retries) {
          if (err instanceof StoveError) throw err;
          throw new StoveError('Unavailable', `downloading blob ${digest} from ${endpoint.host}: ${messageOf(err)} (at byte ${offset} of ${size})`, { cause: err });
        }
        failures++;
        const delay = this.client.retryBaseMs * 2 ** (failures - 1);
        this.log.warn('blob download interrupted, resuming', { digest, offset, size, attempt: failures, error: messageOf(err) });
        await sleep(delay, signal);
      } finally {
        response.body.destroy();
      }
    }
  }
}

/** Drops a body we do not need (a 401's, a redirect's), giving it at most one stall timeout. */
async function discardBody(body: Dispatcher.ResponseData['body'], stallMs: number): Promise<void> {
  await body.dump({ limit: 128 * 1024, signal: AbortSignal.timeout(stallMs) }).catch(() => {});
}

/** Small bodies (manifests, configs, error texts) must arrive within this many stall timeouts. */
const SMALL_BODY_STALLS = 2;

/** Reads a body up to a limit, with the stall timer and a deadline (a registry is not trusted to send a sane size, or at all). */
function readLimited(body: Dispatcher.ResponseData['body'], max: number, stallMs: number, what = 'response'): Promise<Buffer> {
  return readBounded(body, { max, what, stallMs, deadlineMs: stallMs * SMALL_BODY_STALLS });
}
