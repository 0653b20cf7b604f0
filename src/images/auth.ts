/**
 * Registry authentication: WWW-Authenticate challenges (Basic and Bearer), the token endpoint flow
 * of the distribution spec (anonymous, basic credentials, OAuth2 refresh token), a token cache keyed
 * by scope, and credentials from the CRI AuthConfig or the config file.
 */
import type { Dispatcher } from 'undici';
import { undici } from './http.js';
import { StoveError, failedPrecondition, messageOf } from '../common/errors.js';
import { readBounded } from './bounded-body.js';

export interface Challenge {
  /** Lower-case scheme: `basic`, `bearer`, … */
  scheme: string;
  params: Record<string, string>;
}

const TOKEN_RE = /^[A-Za-z0-9!#$%&'*+.^_`|~-]+/;

/** Parses a WWW-Authenticate header that may carry several challenges. */
export function parseWwwAuthenticate(header: string): Challenge[] {
  const challenges: Challenge[] = [];
  let s = header;
  const skip = (re: RegExp) => {
    const m = re.exec(s);
    if (m) s = s.slice(m[0].length);
  };
  for (;;) {
    skip(/^[\s,]+/);
    const scheme = TOKEN_RE.exec(s);
    if (!scheme) break;
    s = s.slice(scheme[0].length);
    const challenge: Challenge = { scheme: scheme[0].toLowerCase(), params: {} };
    challenges.push(challenge);
    for (;;) {
      skip(/^[\s,]+/);
      const name = TOKEN_RE.exec(s);
      if (!name) break;
      const after = s.slice(name[0].length).replace(/^\s*/, '');
      if (!after.startsWith('=')) break; // a new challenge's scheme
      s = after.slice(1).replace(/^\s*/, '');
      let value = '';
      if (s.startsWith('"')) {
        let i = 1;
        while (i < s.length && s[i] !== '"') {
          if (s[i] === '\\' && i + 1 < s.length) i++;
          value += s[i];
          i++;
        }
        s = s.slice(i + 1);
      } else {
        const v = /^[^\s,]*/.exec(s)![0];
        value = v;
        s = s.slice(v.length);
      }
      challenge.params[name[0].toLowerCase()] = value;
    }
  }
  return challenges;
}

/** What a registry may be given to prove who is pulling. */
export interface Credentials {
  username?: string;
  password?: string;
  /** An OAuth2 refresh token for the registry's token endpoint. */
  identityToken?: string;
  /** A bearer token to send as is. */
  registryToken?: string;
}

/** The CRI AuthConfig fields (as ts-proto names them). */
export interface AuthConfigLike {
  username?: string;
  password?: string;
  auth?: string;
  serverAddress?: string;
  identityToken?: string;
  registryToken?: string;
}

/** Decodes docker's `auth` field (base64 of `user:password`). */
function decodeAuth(auth: string): { username: string; password: string } {
  const text = Buffer.from(auth, 'base64').toString('utf8');
  const colon = text.indexOf(':');
  if (colon <= 0) throw new StoveError('InvalidArgument', 'auth.auth must be base64 of "username:password"');
  return { username: text.slice(0, colon), password: text.slice(colon + 1) };
}

/** Credentials from a CRI AuthConfig, or undefined if it carries none. */
export function credentialsFromAuthConfig(auth: AuthConfigLike | undefined): Credentials | undefined {
  if (!auth) return undefined;
  const creds: Credentials = {};
  if (auth.username) {
    creds.username = auth.username;
    creds.password = auth.password ?? '';
  } else if (auth.auth) {
    Object.assign(creds, decodeAuth(auth.auth));
  }
  if (auth.identityToken) creds.identityToken = auth.identityToken;
  if (auth.registryToken) creds.registryToken = auth.registryToken;
  return Object.keys(creds).length > 0 ? creds : undefined;
}

/** A name for credentials in messages and cache keys, never the secret itself. */
export function credentialsLabel(creds: Credentials | undefined): string {
  if (!creds) return 'anonymous';
  if (creds.registryToken) return 'registry token';
  if (creds.identityToken) return `identity token${creds.username ? ` of "${creds.username}"` : ''}`;
  return `user "${creds.username}"`;
}

export function basicAuthorization(creds: Credentials): string | undefined {
  if (creds.username === undefined) return undefined;
  return 'Basic ' + Buffer.from(`${creds.username}:${creds.password ?? ''}`).toString('base64');
}

interface CachedToken {
  token: string;
  expiresAt: number;
}

/** Bearer tokens by realm, service, scope and credentials, kept until shortly before they expire. */
export class TokenCache {
  private readonly tokens = new Map<string, CachedToken>();

  constructor(private readonly now: () => number = Date.now) {}

  get(key: string): string | undefined {
    const t = this.tokens.get(key);
    if (!t) return undefined;
    if (t.expiresAt <= this.now()) {
      this.tokens.delete(key);
      return undefined;
    }
    return t.token;
  }

  set(key: string, token: string, expiresInSeconds: number, issuedAt?: string): void {
    const issued = issuedAt ? Date.parse(issuedAt) : NaN;
    const start = Number.isFinite(issued) && issued <= this.now() ? issued : this.now();
    // Renew 10% (at most 30 s) before the expiry the server gave; the spec's minimum lifetime is 60 s.
    const lifetime = Math.max(expiresInSeconds, 60) * 1000;
    this.tokens.set(key, { token, expiresAt: start + lifetime - Math.min(lifetime / 10, 30_000) });
  }
}

export interface TokenRequest {
  challenge: Challenge;
  scopes: string[];
  creds?: Credentials;
  dispatcher: Dispatcher;
  /** Who asked, for messages: the registry host. */
  host: string;
  headersTimeout: number;
}

/** Token replies are a few KiB (a JWT and some fields); a registry's is not trusted to stop. */
const MAX_TOKEN_REPLY_BYTES = 1 << 20;

/** Asks the challenge's realm for a bearer token. */
export async function fetchToken(req: TokenRequest): Promise<{ token: string; expiresIn: number; issuedAt?: string }> {
  const { challenge, creds } = req;
  const realm = challenge.params.realm;
  if (!realm) throw failedPrecondition(`${req.host} asked for a bearer token but named no realm`);
  let url: URL;
  try {
    url = new URL(realm);
  } catch {
    throw failedPrecondition(`${req.host} gave an invalid token realm "${realm}"`);
  }
  const service = challenge.params.service;
  let response: Dispatcher.ResponseData;
  try {
    if (creds?.identityToken) {
      // OAuth2 refresh-token grant, as docker does for identity tokens.
      const form = new URLSearchParams({ grant_type: 'refresh_token', refresh_token: creds.identityToken, client_id: 'stove' });
      if (service) form.set('service', service);
      if (req.scopes.length) form.set('scope', req.scopes.join(' '));
      const { request } = await undici();
      response = await request(url, {
        method: 'POST',
        dispatcher: req.dispatcher,
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: form.toString(),
        headersTimeout: req.headersTimeout,
        bodyTimeout: req.headersTimeout,
      });
    } else {
      if (service) url.searchParams.set('service', service);
      for (const scope of req.scopes) url.searchParams.append('scope', scope);
      const headers: Record<string, string> = {};
      const basic = creds ? basicAuthorization(creds) : undefined;
      if (basic) headers.authorization = basic;
      const { request } = await undici();
      response = await request(url, { method: 'GET', dispatcher: req.dispatcher, headers, headersTimeout: req.headersTimeout, bodyTimeout: req.headersTimeout });
    }
  } catch (err) {
    throw new StoveError('Unavailable', `fetching a token from ${url.origin}${url.pathname} for ${req.host}: ${messageOf(err)}`, { cause: err });
  }
  const text = (
    await readBounded(response.body, {
      max: MAX_TOKEN_REPLY_BYTES,
      what: `the token reply from ${url.origin}${url.pathname}`,
      stallMs: req.headersTimeout,
      deadlineMs: req.headersTimeout * 2,
    })
  ).toString('utf8');
  if (response.statusCode === 401 || response.statusCode === 403) {
    throw failedPrecondition(
      `${req.host}: the token server ${url.origin} rejected the credentials (${credentialsLabel(creds)}): HTTP ${response.statusCode}${errorSummary(text)}`,
    );
  }
  if (response.statusCode !== 200)
    throw new StoveError('Unavailable', `${req.host}: the token server ${url.origin} answered HTTP ${response.statusCode}${errorSummary(text)}`);
  let body: { token?: string; access_token?: string; expires_in?: number; issued_at?: string };
  try {
    body = JSON.parse(text) as typeof body;
  } catch {
    throw new StoveError('Internal', `${req.host}: the token server ${url.origin} sent a response that is not JSON`);
  }
  const token = body.token ?? body.access_token;
  if (!token) throw new StoveError('Internal', `${req.host}: the token server ${url.origin} sent no token`);
  return { token, expiresIn: body.expires_in ?? 60, issuedAt: body.issued_at };
}

/** `: <message>` from a registry error body (`{"errors":[{"code","message"}]}`), or nothing. */
export function errorSummary(text: string): string {
  try {
    const body = JSON.parse(text) as { errors?: { code?: string; message?: string }[]; details?: string };
    const first = body.errors?.[0];
    if (first) return `: ${[first.code, first.message].filter(Boolean).join(': ')}`;
  } catch {
    // not JSON
  }
  const line = text.trim().split('\n')[0] ?? '';
  return line ? `: ${line.slice(0, 200)}` : '';
}
