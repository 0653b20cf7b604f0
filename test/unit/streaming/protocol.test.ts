import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { PassThrough } from 'node:stream';
import { SPDY3_DICTIONARY } from '../../../src/streaming/spdy-dictionary.js';
import { decodeHeaderBlock, encodeHeaderBlock, HeaderCodec } from '../../../src/streaming/spdy.js';
import { encodePortForwardError, encodeStatus, exitCodeStatus, internalErrorStatus, successStatus } from '../../../src/streaming/status.js';
import { commandProtocolVersion, headerValues, negotiate, SPDY_COMMAND_PROTOCOLS } from '../../../src/streaming/negotiate.js';
import { MAX_RESIZE_LINE, parseTerminalSize, readResizeStream, ResizeQueue } from '../../../src/streaming/remotecommand.js';
import { parsePort } from '../../../src/streaming/portforward.js';

describe('streaming protocol pieces', () => {
  it('builds the 1423-byte SPDY/3 dictionary byte for byte', () => {
    assert.equal(SPDY3_DICTIONARY.length, 1423);
    // SHA-256 of the dictionary in moby/spdystream and spdy-transport.
    assert.equal(createHash('sha256').update(SPDY3_DICTIONARY).digest('hex'), '51d27341373f923f3cd88e1eb7162aeaa3723d7585ff2399201dc06498407f02');
  });

  it('encodes and decodes header blocks, lowercasing names and keeping repeated values', () => {
    const block = encodeHeaderBlock({ StreamType: 'stdout', Multi: ['a', 'b'] });
    assert.equal(block.readUInt32BE(0), 2);
    const h = decodeHeaderBlock(block);
    assert.deepEqual(h.get('streamtype'), ['stdout']);
    assert.deepEqual(h.get('multi'), ['a', 'b']);
    assert.throws(() => decodeHeaderBlock(block.subarray(0, block.length - 1)), /truncated/);
  });

  it('keeps one compression context across header blocks in each direction', async () => {
    const deflate = new HeaderCodec('deflate');
    const inflate = new HeaderCodec('inflate');
    const headerSets: Record<string, string>[] = [
      { streamtype: 'error' },
      { streamtype: 'stdout' },
      { streamtype: 'stdout' },
      { port: '8080', requestid: '0', streamtype: 'data' },
      { big: 'y'.repeat(12_000) },
    ];
    const blocks = headerSets.map((h) => encodeHeaderBlock(h));
    const compressed = await Promise.all(blocks.map((b) => deflate.process(b)));
    // Repeats compress to back-references: the third block is much smaller than the first.
    assert.ok(compressed[2]!.length < compressed[0]!.length);
    const out = await Promise.all(compressed.map((c) => inflate.process(c)));
    out.forEach((o, i) => assert.ok(o.equals(blocks[i]!)));
    deflate.close();
    inflate.close();
  });

  it('rejects a corrupt header block and every block after it', async () => {
    const inflate = new HeaderCodec('inflate');
    await assert.rejects(inflate.process(Buffer.from('not zlib at all')));
    await assert.rejects(inflate.process(Buffer.from([0x78, 0xbb])));
  });

  it('writes metav1.Status documents as client-go reads them', () => {
    assert.equal(encodeStatus(successStatus(), 4).toString(), '{"metadata":{},"status":"Success"}');
    assert.deepEqual(JSON.parse(encodeStatus(exitCodeStatus(3), 5).toString()), {
      metadata: {},
      status: 'Failure',
      message: 'command terminated with non-zero exit code: exit status 3',
      reason: 'NonZeroExitCode',
      details: { causes: [{ reason: 'ExitCode', message: '3' }] },
    });
    assert.deepEqual(JSON.parse(encodeStatus(internalErrorStatus('boom'), 4).toString()), {
      metadata: {},
      status: 'Failure',
      message: 'Internal error occurred: boom',
      reason: 'InternalError',
      details: { causes: [{ message: 'boom' }] },
      code: 500,
    });
    // Before v4: text on failure, nothing on success.
    assert.equal(encodeStatus(successStatus(), 3).length, 0);
    assert.equal(encodeStatus(exitCodeStatus(2), 2).toString(), 'command terminated with non-zero exit code: exit status 2');
    assert.equal(encodePortForwardError('x', true).toString(), '{"closeConnection":true,"message":"x"}\n');
    assert.equal(encodePortForwardError('y', false).toString(), '{"message":"y"}\n');
  });

  it('negotiates the first client protocol the server supports', () => {
    assert.deepEqual(headerValues(['v4.channel.k8s.io, v3.channel.k8s.io', 'channel.k8s.io']), ['v4.channel.k8s.io', 'v3.channel.k8s.io', 'channel.k8s.io']);
    assert.equal(negotiate(['v9.channel.k8s.io', 'v3.channel.k8s.io', 'v4.channel.k8s.io'], SPDY_COMMAND_PROTOCOLS), 'v3.channel.k8s.io');
    assert.equal(negotiate(['x'], SPDY_COMMAND_PROTOCOLS), undefined);
    assert.equal(commandProtocolVersion('v5.channel.k8s.io'), 5);
    assert.equal(commandProtocolVersion('v4.base64.channel.k8s.io'), 4);
    assert.equal(commandProtocolVersion('channel.k8s.io'), 1);
    assert.equal(commandProtocolVersion(''), 1);
  });

  it('parses terminal sizes as Go decodes them', () => {
    assert.deepEqual(parseTerminalSize('{"Width":80,"Height":24}'), { width: 80, height: 24 });
    assert.deepEqual(parseTerminalSize('{"width":1,"HEIGHT":2}'), { width: 1, height: 2 });
    assert.equal(parseTerminalSize('{"Width":-1,"Height":2}'), undefined);
    assert.equal(parseTerminalSize('{"Width":70000,"Height":2}'), undefined);
    assert.equal(parseTerminalSize('nope'), undefined);
  });

  it('reads newline-delimited sizes split anywhere, keeping only the latest unread one', async () => {
    const q = new ResizeQueue();
    const s = new PassThrough();
    readResizeStream(s, q);
    s.write('{"Width":10,"Hei');
    s.write('ght":20}\n{"Width":11,"Height":21}\n');
    await new Promise((r) => setImmediate(r));
    const it = q[Symbol.asyncIterator]();
    assert.deepEqual(await it.next(), { value: { width: 11, height: 21 }, done: false });
    const pending = it.next();
    s.write('{"Width":12,"Height":22}'); // one WebSocket message: no newline
    assert.deepEqual(await pending, { value: { width: 12, height: 22 }, done: false });
    q.end();
    assert.deepEqual(await it.next(), { value: undefined, done: true });
  });

  it('stops reading sizes after a line longer than the cap, in time linear in the input', async () => {
    const q = new ResizeQueue();
    const s = new PassThrough();
    readResizeStream(s, q);
    const chunk = 'x'.repeat(64 * 1024);
    const started = performance.now();
    for (let i = 0; i < 256; i++) s.write(chunk); // 16 MiB, no newline
    s.write('\n{"Width":5,"Height":6}\n');
    await new Promise((r) => setImmediate(r));
    assert.ok(performance.now() - started < 1000, `took ${performance.now() - started} ms`);
    // The stream is broken from the overlong line on, as Go's decoder would be.
    const it = q[Symbol.asyncIterator]();
    q.end();
    assert.deepEqual(await it.next(), { value: undefined, done: true });
    assert.ok(MAX_RESIZE_LINE <= 8192);
  });

  it('refuses header blocks past the entry and value caps without quadratic work', () => {
    const many = Buffer.alloc(4);
    many.writeUInt32BE(26_000);
    assert.throws(() => decodeHeaderBlock(many), /26000 entries, more than 64/);
    const values = encodeHeaderBlock(Object.fromEntries(Array.from({ length: 60 }, (_v, i) => [`h${i}`, ['a', 'b', 'c', 'd', 'e']])));
    assert.throws(() => decodeHeaderBlock(values), /more than 256 values/);
    const repeated = Buffer.concat([encodeHeaderBlock({ a: '1' }).subarray(0, 4), ...Array<Buffer>(3).fill(encodeHeaderBlock({ a: '1' }).subarray(4))]);
    repeated.writeUInt32BE(3);
    assert.deepEqual(decodeHeaderBlock(repeated).get('a'), ['1', '1', '1']);
  });

  it('accepts port header values 1-65535 only', () => {
    assert.equal(parsePort('80'), 80);
    assert.equal(parsePort('65535'), 65535);
    for (const bad of ['0', '65536', '', '-1', '8o', '1e3', ' 80']) assert.equal(parsePort(bad), undefined, bad);
  });
});
