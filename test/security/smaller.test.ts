/**
 * The smaller guarantees: the CRI socket is never wider than 0660 and lives in a directory only root
 * can write; request annotations reach the OCI spec only through runtime.allowed_annotations; one hung
 * mount request does not hold up the others; an oversized spawn request is an error, not the spawn
 * helper's exit; a user string starting with `bigint:` stays a string across persistence; `stove
 * config` never prints registry passwords; `stove pull` never takes a password from argv.
 */
import assert from 'node:assert/strict';
import { chmod, chown, lstat, mkdir, symlink, writeFile } from 'node:fs/promises';
import net from 'node:net';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { checkSocketDir, serveGrpc } from '../../src/api/server.js';
import { criServices } from '../../src/api/services.js';
import { parseJson, stringifyJson } from '../../src/common/json.js';
import { silentLogger } from '../../src/common/logger.js';
import { NO_TELEMETRY } from '../../src/observability/hooks.js';
import { configToToml, parseConfig } from '../../src/config/load.js';
import { withCriAnnotations } from '../../src/oci/annotations.js';
import type { Spec } from '../../src/oci/types.js';
import { MountHelper, SyscallError } from '../../src/platform/mount-helper.js';
import { DEFAULT_SPAWN_HELPER, SpawnHelper } from '../../src/platform/spawn-helper.js';
import { pullCredentials } from '../../src/cli/images.js';
import { runStoveCli } from '../helpers/stove-process.js';
import { waitFor } from '../helpers/wait.js';
import { VersionRequest, VersionResponse } from '../../src/gen/runtime/v1/api.js';
import { tempDirPerTest } from '../helpers/temp-dir.js';

/** Calls one connection may have in flight, as docs/security.md states. */
const CALLS_IN_FLIGHT = 1000;

const [HEADERS, RST_STREAM, SETTINGS, GOAWAY, DATA] = [0x1, 0x3, 0x4, 0x7, 0x0];
const [END_STREAM, END_HEADERS] = [0x1, 0x4];
const SETTINGS_MAX_CONCURRENT_STREAMS = 0x3;
const REFUSED_STREAM = 0x7;

interface SeenFrame {
  type: number;
  stream: number;
  /** The error code of RST_STREAM and GOAWAY. */
  code?: number;
  endStream?: boolean;
}

/**
 * An HTTP/2 client written by hand, which does what Node's own never does: it opens streams beyond the
 * server's SETTINGS_MAX_CONCURRENT_STREAMS (and never acknowledges the SETTINGS). It records the frames
 * the server sends.
 */
class RawHttp2Peer {
  readonly frames: SeenFrame[] = [];
  readonly settings = new Map<number, number>();
  private buffered = Buffer.alloc(0);

  private constructor(private readonly socket: net.Socket) {
    socket.on('data', (chunk: Buffer) => this.take(chunk));
    socket.on('error', () => {});
  }

  static async connect(path: string): Promise<RawHttp2Peer> {
    const socket = net.connect(path);
    await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
    socket.write('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');
    const peer = new RawHttp2Peer(socket);
    peer.send(SETTINGS, 0, 0, Buffer.alloc(0));
    return peer;
  }

  /** HEADERS of a gRPC call, its request still to come. */
  openCall(stream: number, path: string): void {
    // HPACK: :method POST and :scheme http from the static table, the others as literals.
    const literal = (nameIndex: number, value: string) => {
      const prefix = nameIndex < 15 ? [nameIndex] : [15, nameIndex - 15];
      return Buffer.concat([Buffer.from(prefix), Buffer.from([value.length]), Buffer.from(value)]);
    };
    const block = Buffer.concat([Buffer.from([0x83, 0x86]), literal(4, path), literal(1, 'localhost'), literal(31, 'application/grpc')]);
    this.send(HEADERS, END_HEADERS, stream, block);
  }

  /** The call's request message, which ends the client's side of the stream. */
  sendRequest(stream: number, message: Uint8Array): void {
    const prefix = Buffer.alloc(5);
    prefix.writeUInt32BE(message.length, 1);
    this.send(DATA, END_STREAM, stream, Buffer.concat([prefix, message]));
  }

  destroy(): void {
    this.socket.destroy();
  }

  private send(type: number, flags: number, stream: number, payload: Buffer): void {
    const header = Buffer.alloc(9);
    header.writeUIntBE(payload.length, 0, 3);
    header[3] = type;
    header[4] = flags;
    header.writeUInt32BE(stream, 5);
    this.socket.write(Buffer.concat([header, payload]));
  }

  private take(chunk: Buffer): void {
    this.buffered = Buffer.concat([this.buffered, chunk]);
    while (this.buffered.length >= 9) {
      const length = this.buffered.readUIntBE(0, 3);
      if (this.buffered.length < 9 + length) return;
      const [type, flags] = [this.buffered[3]!, this.buffered[4]!];
      const stream = this.buffered.readUInt32BE(5) & 0x7fffffff;
      const payload = this.buffered.subarray(9, 9 + length);
      this.buffered = this.buffered.subarray(9 + length);
      if (type === SETTINGS) for (let at = 0; at + 6 <= payload.length; at += 6) this.settings.set(payload.readUInt16BE(at), payload.readUInt32BE(at + 2));
      else if (type === RST_STREAM) this.frames.push({ type, stream, code: payload.readUInt32BE(0) });
      else if (type === GOAWAY) this.frames.push({ type, stream: payload.readUInt32BE(0) & 0x7fffffff, code: payload.readUInt32BE(4) });
      else this.frames.push({ type, stream, endStream: (flags & END_STREAM) !== 0 });
    }
  }
}

describe('security: smaller guarantees', function () {
  this.timeout(30_000);
  const dir = tempDirPerTest('stove-sec-');

  describe('the CRI socket', () => {
    it('is bound under a umask that keeps it within 0660, and the process umask comes back', async () => {
      const seen: number[] = [];
      const real = process.umask.bind(process);
      const before = real(0);
      (process as { umask: (mask?: number) => number }).umask = (mask?: number) => {
        if (mask !== undefined) seen.push(mask);
        return mask === undefined ? real() : real(mask);
      };
      let endpoint;
      try {
        endpoint = await serveGrpc(join(dir(), 'cri.sock'), [], silentLogger);
      } finally {
        (process as { umask: (mask?: number) => number }).umask = real;
      }
      try {
        assert.ok(seen.length >= 1 && (seen[0]! & 0o117) === 0o117, `umask during bind: ${seen.map((m) => m.toString(8))}`);
        assert.equal(real(), 0, 'the umask is restored');
        assert.equal((await lstat(join(dir(), 'cri.sock'))).mode & 0o777, 0o660);
      } finally {
        real(before);
        await endpoint.shutdown(100);
      }
    });

    it(`refuses call ${CALLS_IN_FLIGHT + 1} in flight on one connection, and answers the others`, async () => {
      const services = criServices({ version: async () => VersionResponse.fromPartial({ runtimeName: 'stove-test' }) }, {}, silentLogger, NO_TELEMETRY);
      const endpoint = await serveGrpc(join(dir(), 'cri.sock'), services, silentLogger);
      const peer = await RawHttp2Peer.connect(join(dir(), 'cri.sock'));
      try {
        // Version calls whose request never comes: each stays in flight. Node's own client would hold
        // back the last one itself, as the server's SETTINGS ask; this one does not.
        const last = 2 * CALLS_IN_FLIGHT + 1;
        for (let stream = 1; stream <= last; stream += 2) peer.openCall(stream, '/runtime.v1.RuntimeService/Version');
        const refusal = await waitFor(`stream ${last} to be refused`, () => peer.frames.find((f) => (f.type === RST_STREAM || f.type === GOAWAY) && f.code !== 0), 15_000);
        assert.equal(peer.settings.get(SETTINGS_MAX_CONCURRENT_STREAMS), CALLS_IN_FLIGHT);
        assert.deepEqual(refusal, { type: RST_STREAM, stream: last, code: REFUSED_STREAM });
        // The calls before it are live: the first one's request comes, and it is answered.
        peer.sendRequest(1, VersionRequest.encode({ version: 'v1' }).finish());
        await waitFor('the answer on stream 1', () => peer.frames.find((f) => f.stream === 1 && f.type === HEADERS && f.endStream));
        assert.deepEqual(peer.frames.filter((f) => f.type === RST_STREAM || f.type === GOAWAY), [refusal]);
      } finally {
        peer.destroy();
        await endpoint.shutdown(100);
      }
    });

    it('refuses a socket directory that others could write to, that is not root\'s, or that is a symlink', async () => {
      const open = join(dir(), 'open');
      await mkdir(open);
      await chmod(open, 0o777);
      await assert.rejects(checkSocketDir(open), /the socket directory .*\/open is writable by others \(mode 0777\)/);
      const theirs = join(dir(), 'theirs');
      await mkdir(theirs, { mode: 0o755 });
      await chown(theirs, 65534, 65534);
      await assert.rejects(checkSocketDir(theirs), /the socket directory .*\/theirs is owned by uid 65534/);
      const link = join(dir(), 'link');
      await symlink(theirs, link);
      await assert.rejects(checkSocketDir(link), /the socket directory .*\/link is not a directory/);
      const fine = join(dir(), 'fine');
      await checkSocketDir(fine);
      assert.equal((await lstat(fine)).mode & 0o777, 0o755);
    });
  });

  it('request annotations reach the spec only through runtime.allowed_annotations', () => {
    const request = { 'io.kubernetes.cri.container-type': 'sandbox', 'run.oci.keep_original_groups': '1', 'example.com/a': 'x', mine: 'y' };
    const fixed = { 'io.kubernetes.cri.container-type': 'container' };
    const spec = (allowed?: string[]) => {
      const s = {} as Spec;
      withCriAnnotations(request, fixed, allowed)(s);
      return s.annotations;
    };
    assert.deepEqual(spec(), fixed);
    assert.deepEqual(spec(['example.com/*', 'mine', 'io.kubernetes.cri.container-type']), { 'example.com/a': 'x', mine: 'y', ...fixed });
    assert.deepEqual(parseConfig('[runtime]\nallowed_annotations = ["example.com/*"]\n', 't.toml').runtime.allowedAnnotations, ['example.com/*']);
  });

  it('a mount request that hangs fails after the timeout; the others go on meanwhile', async () => {
    // A stand-in helper speaking the same protocol that never answers a request naming "hang".
    const script = join(dir(), 'fake-helper.mjs');
    await writeFile(
      script,
      `let buf = Buffer.alloc(0);
process.stdin.on('data', (c) => {
  buf = Buffer.concat([buf, c]);
  while (buf.length >= 4 && buf.length >= 4 + buf.readUInt32LE(0)) {
    const len = buf.readUInt32LE(0);
    const [, id, ...args] = buf.subarray(4, 4 + len).toString().split('\\0');
    buf = buf.subarray(4 + len);
    if (args.some((a) => a.includes('hang'))) continue;
    const body = Buffer.from(id + '\\0' + '0\\0\\0');
    const head = Buffer.alloc(4);
    head.writeUInt32LE(body.length);
    process.stdout.write(Buffer.concat([head, body]));
  }
});
`,
    );
    const wrapper = join(dir(), 'fake-helper');
    await writeFile(wrapper, `#!/bin/sh\nexec '${process.execPath}' '${script}'\n`, { mode: 0o755 });
    const helper = new MountHelper(wrapper, 1500);
    const hung = helper.mount('x', join(dir(), 'hang'), 'tmpfs', 0, '');
    hung.catch(() => {});
    const started = performance.now();
    for (let i = 0; i < 5; i++) await helper.mount('x', join(dir(), `ok${i}`), 'tmpfs', 0, '');
    assert.ok(performance.now() - started < 1000, 'mounts behind the hung one were held up');
    await assert.rejects(hung, (err: unknown) => err instanceof SyscallError && err.errno === 110 && /within 1\.5s; the helper was replaced/.test(err.message));
    await helper.umount(join(dir(), 'ok0'), 0);
  });

  it('a spawn request over the helper\'s limits is E2BIG; the helper and its other sessions live on', async () => {
    const helper = new SpawnHelper(DEFAULT_SPAWN_HELPER);
    const parentOf = () =>
      new Promise<string>((resolve, reject) => {
        const p = helper.spawn('/bin/sh', ['-c', 'echo $PPID'], { stdio: ['ignore', 'pipe', 'ignore'] });
        let out = '';
        p.stdout!.on('data', (d: Buffer) => (out += d.toString()));
        p.once('error', reject);
        p.once('close', () => resolve(out.trim()));
      });
    const pid = await parentOf();
    const big = helper.spawn('/bin/true', [], { stdio: ['ignore'], env: { HUGE: 'x'.repeat(2 << 20) } });
    await new Promise<void>((resolve) =>
      big.once('error', (err: NodeJS.ErrnoException) => {
        assert.equal(err.code, 'E2BIG');
        assert.match(err.message, /argument list too long/);
        resolve();
      }),
    );
    const many = helper.spawn('/bin/true', Array<string>(5000).fill('a'), { stdio: ['ignore'] });
    await new Promise<void>((resolve) => many.once('error', (err: NodeJS.ErrnoException) => (assert.equal(err.code, 'E2BIG'), resolve())));
    assert.equal(await parentOf(), pid, 'the same helper answered after the oversized requests');
  });

  it('a user string starting with "bigint:" stays a string through persistence', () => {
    const record = { label: 'bigint:12345', other: '\u0000x', plain: 'hello', size: 12345n, nested: { a: ['bigint:-1', 7n] } };
    const back = parseJson<typeof record>(stringifyJson(record));
    assert.deepEqual(back, record);
    assert.equal(typeof back.label, 'string');
    // Records written before: tagged numbers still read as bigint.
    assert.deepEqual(parseJson('{"n":"bigint:42","s":"text"}'), { n: 42n, s: 'text' });
  });

  it('stove config never prints registry credentials', async () => {
    const toml = '[registries."r.example"]\nusername = "alice"\npassword = "hunter2"\nauth = "YWxpY2U6aHVudGVyMg=="\nidentity_token = "tok-secret"\n';
    const printed = configToToml(parseConfig(toml, 't.toml'));
    assert.doesNotMatch(printed, /hunter2|YWxpY2U6aHVudGVyMg==|tok-secret/);
    assert.match(printed, /password = "<redacted>"/);
    assert.match(printed, /username = "alice"/);
    const file = join(dir(), 'stove.toml');
    await writeFile(file, toml);
    for (const args of [['config'], ['config', '--origin']]) {
      const r = await runStoveCli([...args, '--config', file]);
      assert.equal(r.code, 0, r.stderr);
      assert.doesNotMatch(r.stdout, /hunter2|YWxpY2U6aHVudGVyMg==|tok-secret/, args.join(' '));
    }
  });

  it('stove pull takes credentials from stdin or the environment, never from argv', async () => {
    const stdin = new PassThrough();
    stdin.end('s3cret\n');
    assert.deepEqual(await pullCredentials({ username: 'alice', passwordStdin: true }, {}, stdin), { username: 'alice', password: 's3cret' });
    assert.deepEqual(await pullCredentials({ passwordStdin: false }, { STOVE_PULL_USERNAME: 'bob', STOVE_PULL_PASSWORD: 'pw' }, new PassThrough()), {
      username: 'bob',
      password: 'pw',
    });
    assert.equal(await pullCredentials({ passwordStdin: false }, {}, new PassThrough()), undefined);
    await assert.rejects(pullCredentials({ username: 'alice', passwordStdin: false }, {}, new PassThrough()), /--username needs --password-stdin/);
    const r = await runStoveCli(['pull', 'busybox', '--creds', 'alice:hunter2', '--socket', join(dir(), 'none.sock')]);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /--creds is gone: it put the password on the command line/);
  });
});
