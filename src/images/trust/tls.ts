/**
 * HTTPS agents per registry host from its certs dir (a private CA, a client certificate), and TLS
 * failures turned into messages that say which file to add where.
 */
import { connect, rootCertificates, type ConnectionOptions } from 'node:tls';
import type { Agent } from 'undici';
import { undici } from '../http.js';
import type { CertsDirs, HostTls } from './certs.js';

export interface AgentSettings {
  keepAliveTimeout: number;
  headersTimeout: number;
  bodyTimeout: number;
  connections: number;
}

/** One agent per host dir, replaced (the old one drained and closed) when its files change. */
export class TlsAgents {
  private readonly agents = new Map<string, { key: string; agent: Agent }>();

  constructor(
    readonly certs: CertsDirs,
    private readonly settings: AgentSettings,
  ) {}

  /** The agent for a host with its own TLS material, or undefined for the default agents. */
  async agentFor(host: string, insecureTls: boolean): Promise<{ agent: Agent; tls: HostTls } | undefined> {
    const tls = await this.certs.forHost(host);
    if (!tls) return undefined;
    const { Agent } = await undici();
    const slot = `${tls.dir}|${insecureTls}`;
    const key = tls.fingerprint;
    const have = this.agents.get(slot);
    if (have?.key === key) return { agent: have.agent, tls };
    const agent = new Agent({ ...this.settings, connect: connectOptions(tls, insecureTls) });
    this.agents.set(slot, { key, agent });
    // Pulls still using the old agent finish on it; it closes when they are done.
    if (have) void have.agent.close().catch(() => {});
    return { agent, tls };
  }

  async close(): Promise<void> {
    await Promise.all([...this.agents.values()].map((a) => a.agent.close().catch(() => {})));
    this.agents.clear();
  }
}

/** Node TLS options from a host's certs dir material. */
export function connectOptions(tls: HostTls | undefined, insecureTls: boolean): ConnectionOptions {
  return {
    // Node's `ca` replaces the built-in roots; a certs dir adds to them, as with Docker.
    ca: tls?.ca.length ? [...rootCertificates, ...tls.ca] : undefined,
    cert: tls?.client?.cert,
    key: tls?.client?.key,
    rejectUnauthorized: !insecureTls,
  };
}

/** Connection errors that may hide a TLS alert the HTTP client did not report. */
const CLOSED = new Set(['UND_ERR_SOCKET', 'ECONNRESET', 'EPIPE', 'UND_ERR_CLOSED']);

/**
 * With TLS 1.3 a server checks the client certificate after the client considers the handshake
 * done, and its alert arrives as a closed connection to the HTTP client. One short connection that
 * sends a request and listens for the alert tells what happened.
 */
export async function probeTlsAlert(url: string, options: ConnectionOptions, timeoutMs = 3000): Promise<unknown> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const socket = connect({ ...options, host: hostname.replace(/^\[|\]$/g, ''), port: Number(port || 443), servername: /^[\d.]+$|:/.test(hostname) ? undefined : hostname });
    const done = (result: unknown) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(result);
    };
    const timer = setTimeout(() => done(undefined), timeoutMs);
    socket.once('secureConnect', () => socket.write(`GET /v2/ HTTP/1.1\r\nHost: ${hostname}\r\nConnection: close\r\n\r\n`));
    socket.once('error', (err) => done(err));
    socket.once('data', () => done(undefined));
    socket.once('close', () => done(undefined));
  });
}

/** True for an error that may be a TLS alert in disguise. */
export function mayHideTlsAlert(err: unknown): boolean {
  return CLOSED.has(errorCode(err));
}

const UNKNOWN_AUTHORITY = new Set([
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'UNABLE_TO_GET_ISSUER_CERT',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
]);
const EXPIRED = new Set(['CERT_HAS_EXPIRED', 'CERT_NOT_YET_VALID']);
/**
 * Alerts a server sends about the client certificate: none sent (certificate_required, or
 * bad_certificate / handshake_failure from older stacks), or one it refused. OpenSSL 3 spells them
 * `ERR_SSL_SSL/TLS_ALERT_…`, older versions `ERR_SSL_SSLV3_ALERT_…` or `ERR_SSL_TLSV13_ALERT_…`.
 */
const CLIENT_CERT_ALERT = /^ERR_SSL_.*ALERT_(CERTIFICATE_REQUIRED|BAD_CERTIFICATE|HANDSHAKE_FAILURE|UNKNOWN_CA|CERTIFICATE_UNKNOWN|CERTIFICATE_EXPIRED|CERTIFICATE_REVOKED|UNSUPPORTED_CERTIFICATE|DECRYPT_ERROR|ACCESS_DENIED)$/;

function errorCode(err: unknown): string {
  const e = err as { code?: unknown; cause?: { code?: unknown } };
  const code = e?.code ?? e?.cause?.code;
  return typeof code === 'string' ? code : '';
}

/**
 * A message for a TLS failure with `host` that names what to put where, or undefined when the error
 * is not about certificates.
 */
export function describeTlsFailure(err: unknown, host: string, certs: CertsDirs, tls: HostTls | undefined): string | undefined {
  const code = errorCode(err);
  const from = tls?.caFiles.length ? ` (CAs from ${tls.caFiles.join(', ')})` : '';
  if (UNKNOWN_AUTHORITY.has(code))
    return `x509: certificate signed by unknown authority (${host})${from}; add its CA as ${certs.caHint(host)}`;
  if (EXPIRED.has(code)) return `x509: the certificate of ${host} has expired or is not yet valid (${code})`;
  if (code === 'ERR_TLS_CERT_ALTNAME_INVALID') {
    const reason = (err as Error)?.message ?? '';
    return `x509: the certificate of ${host} is not valid for that name: ${reason}`;
  }
  if (CLIENT_CERT_ALERT.test(code)) {
    const alert = ((err as Error).message.match(/alert [a-z ]+/) ?? [code])[0];
    return tls?.client
      ? `${host} rejected the client certificate ${tls.client.certFile} (TLS ${alert})`
      : `${host} requires a client certificate and none is configured (TLS ${alert}); put a pair as ${certs.clientHint(host)}`;
  }
  return undefined;
}
