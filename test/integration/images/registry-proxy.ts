/**
 * A small HTTP proxy in front of a test registry, for faults the registry itself cannot produce:
 * bearer-token auth with its own token endpoint, connections cut mid-blob, stalls, slow drips, an
 * endless token reply, request counting, and canned responses (e.g. a schema 1 manifest).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { request } from 'undici';
import type { TestRegistry } from '../../helpers/registry.js';

export interface ProxyOptions {
  /** Demand bearer tokens from our own /token endpoint (optionally for these credentials only). */
  token?: { username?: string; password?: string; expiresIn?: number };
  /** For the first N GETs of blobs (per digest), send `cutAfter` bytes then drop the connection. */
  cut?: { digest?: string; cutAfter: number; times: number };
  /** Drop Range headers (a registry without resume support). */
  ignoreRange?: boolean;
  /** After this many bytes of a blob, stop sending without closing (until releaseStalls()). */
  stall?: { digest?: string; after: number };
  /** GETs whose path matches: send the body one byte per `intervalMs` (never a full stall). */
  drip?: { path: RegExp; intervalMs: number };
  /** The token endpoint answers 200 with a JSON body that never ends (bytes until the client leaves). */
  tokenBomb?: boolean;
  /** Canned answers by path (checked first). */
  canned?: Record<string, { status: number; headers: Record<string, string>; body: string }>;
}

export interface RegistryProxy {
  host: string;
  url: string;
  /** Requests seen: `METHOD path` → count. */
  counts: Map<string, number>;
  /** Blob GETs per digest. */
  blobGets(digest: string): number;
  tokensIssued: number;
  /** Range headers received (for resume checks). */
  ranges: string[];
  /** Blob GETs whose connection is still open (a client that stops a download closes it). */
  openBlobGets(): number;
  /** Stalled blobs send the rest of their bytes, and no blob stalls from now on. */
  releaseStalls(): void;
  options: ProxyOptions;
  stop(): Promise<void>;
}

const TOKEN = 'test-token-' + Math.random().toString(36).slice(2);

export async function startRegistryProxy(registry: TestRegistry, options: ProxyOptions = {}): Promise<RegistryProxy> {
  const counts = new Map<string, number>();
  const cutsDone = new Map<string, number>();
  const sockets = new Set<Socket>();
  const state = { tokensIssued: 0, ranges: [] as string[], openBlobGets: 0, stallsReleased: false, stalled: [] as (() => void)[] };
  /** True once releaseStalls() was called, false when the client left first. */
  const resumeOrLeave = (res: ServerResponse) =>
    new Promise<boolean>((resolve) => {
      if (res.destroyed) return resolve(false);
      state.stalled.push(() => resolve(true));
      res.once('close', () => resolve(false));
    });
  let url = '';

  const handler = async (req: IncomingMessage, res: ServerResponse) => {
    const path = req.url ?? '/';
    const key = `${req.method} ${path.split('?')[0]}`;
    counts.set(key, (counts.get(key) ?? 0) + 1);

    if (path.startsWith('/token')) {
      const want = options.token;
      if (want?.username) {
        const expected = 'Basic ' + Buffer.from(`${want.username}:${want.password}`).toString('base64');
        if (req.headers.authorization !== expected) {
          res.writeHead(401, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ errors: [{ code: 'UNAUTHORIZED', message: 'bad credentials' }] }));
          return;
        }
      }
      state.tokensIssued++;
      if (options.tokenBomb) {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.write('{"token":"');
        const block = Buffer.alloc(1 << 20, 'a');
        const pump = () => {
          while (!res.destroyed && res.write(block));
          if (!res.destroyed) res.once('drain', pump);
        };
        res.on('close', () => res.removeAllListeners('drain'));
        pump();
        return;
      }
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ token: TOKEN, expires_in: want?.expiresIn ?? 300, issued_at: new Date().toISOString() }));
      return;
    }
    const canned = options.canned?.[path.split('?')[0]!];
    if (canned) {
      res.writeHead(canned.status, canned.headers);
      res.end(req.method === 'HEAD' ? undefined : canned.body);
      return;
    }
    if (options.token && path !== '/v2/' && req.headers.authorization !== `Bearer ${TOKEN}`) {
      const repo = /^\/v2\/(.+)\/(manifests|blobs)\//.exec(path)?.[1] ?? '';
      res.writeHead(401, {
        'content-type': 'application/json',
        'www-authenticate': `Bearer realm="${url}/token",service="stove-test",scope="repository:${repo}:pull"`,
      });
      res.end(JSON.stringify({ errors: [{ code: 'UNAUTHORIZED', message: 'authentication required' }] }));
      return;
    }

    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(req.headers)) {
      if (typeof v === 'string' && !['host', 'authorization', 'connection'].includes(k)) headers[k] = v;
    }
    if (headers.range) state.ranges.push(headers.range);
    if (options.ignoreRange) delete headers.range;
    const upstreamAuth = registry.authorization();
    if (upstreamAuth) headers.authorization = upstreamAuth;
    const upstream = await request(`${registry.url}${path}`, { method: req.method as 'GET', headers });
    const outHeaders: Record<string, string | string[]> = {};
    for (const [k, v] of Object.entries(upstream.headers)) if (v !== undefined && k !== 'connection' && k !== 'keep-alive') outHeaders[k] = v;
    res.writeHead(upstream.statusCode, outHeaders);

    const blob = /\/blobs\/(sha256:[a-f0-9]{64})$/.exec(path.split('?')[0]!)?.[1];
    const cut = options.cut;
    const doCut = blob && req.method === 'GET' && cut && (!cut.digest || cut.digest === blob) && (cutsDone.get(blob) ?? 0) < cut.times;
    let stall = blob && req.method === 'GET' && !state.stallsReleased && options.stall && (!options.stall.digest || options.stall.digest === blob) ? options.stall : undefined;
    if (blob && req.method === 'GET') {
      state.openBlobGets++;
      res.once('close', () => state.openBlobGets--);
    }
    if (doCut) cutsDone.set(blob, (cutsDone.get(blob) ?? 0) + 1);
    const drip = req.method === 'GET' && options.drip?.path.test(path.split('?')[0]!) ? options.drip : undefined;
    if (drip) {
      const body = Buffer.from(await upstream.body.arrayBuffer());
      for (let i = 0; i < body.length && !res.destroyed; i++) {
        res.write(body.subarray(i, i + 1));
        await new Promise((r) => setTimeout(r, drip.intervalMs));
      }
      res.end();
      return;
    }
    let sent = 0;
    for await (const chunk of upstream.body) {
      let data = chunk as Buffer;
      const limit = doCut ? cut.cutAfter : stall ? stall.after : Infinity;
      let rest: Buffer | undefined;
      if (sent + data.length > limit) {
        rest = data.subarray(limit - sent);
        data = data.subarray(0, limit - sent);
      }
      sent += data.length;
      const cutNow = doCut && sent >= limit;
      // Before a cut, wait until the last bytes have been handed to the socket, then drop it mid-body.
      if (data.length && cutNow) await new Promise<void>((r) => res.write(data, () => r()));
      else if (data.length) res.write(data);
      if (sent >= limit) {
        if (cutNow) req.socket.destroy();
        // A stall keeps the connection open and sends nothing more, unless released.
        if (cutNow || !(await resumeOrLeave(res))) {
          upstream.body.destroy();
          return;
        }
        stall = undefined;
        if (rest?.length) {
          res.write(rest);
          sent += rest.length;
        }
      }
    }
    res.end();
  };

  const server: Server = createServer((req, res) => {
    handler(req, res).catch(() => {
      if (!res.headersSent) res.writeHead(502);
      res.end();
    });
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  url = `http://127.0.0.1:${port}`;
  return {
    host: `127.0.0.1:${port}`,
    url,
    counts,
    blobGets: (digest) => [...counts.entries()].filter(([k]) => k.startsWith('GET ') && k.endsWith(`/blobs/${digest}`)).reduce((a, [, n]) => a + n, 0),
    get tokensIssued() {
      return state.tokensIssued;
    },
    ranges: state.ranges,
    openBlobGets: () => state.openBlobGets,
    releaseStalls() {
      state.stallsReleased = true;
      for (const resume of state.stalled.splice(0)) resume();
    },
    options,
    async stop() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}
