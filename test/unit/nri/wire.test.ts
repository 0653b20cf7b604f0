/**
 * The wire format byte for byte: ttrpc frames, mux chunks and the ttrpc envelope checked against
 * frames built by hand from the formats' definitions, and a registration driven over a real socket
 * with hand-built bytes only.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { once } from 'node:events';
import { ConfigureRequest, SynchronizeRequest } from '../../../src/gen/nri/api.js';
import { Request, Response } from '../../../src/gen/nri/ttrpc.js';
import { silentLogger } from '../../../src/common/logger.js';
import { encodeTtrpcFrame, TtrpcFrameReader, TtrpcProtocolError, TTRPC_MAX_MESSAGE } from '../../../src/nri/ttrpc-frame.js';
import { encodeMuxChunk, Mux } from '../../../src/nri/mux.js';
import { NriAdaptation } from '../../../src/nri/adaptation.js';
import { PassThrough, Duplex } from 'node:stream';
import { eventually } from '../../integration/sandbox/world.js';

/** A protobuf string/bytes field: tag, length, bytes (lengths under 128 here). */
function ld(field: number, bytes: number[] | string): number[] {
  const b = typeof bytes === 'string' ? [...Buffer.from(bytes)] : bytes;
  return [(field << 3) | 2, b.length, ...b];
}

function u32(n: number): number[] {
  return [(n >>> 24) & 0xff, (n >>> 16) & 0xff, (n >>> 8) & 0xff, n & 0xff];
}

/** A ttrpc frame by hand: length, stream id, type, flags, payload. */
function frame(streamId: number, type: number, flags: number, payload: number[]): number[] {
  return [...u32(payload.length), ...u32(streamId), type, flags, ...payload];
}

/** A mux chunk by hand: connection id, length, payload. */
function chunk(connId: number, payload: number[]): number[] {
  return [...u32(connId), ...u32(payload.length), ...payload];
}

describe('nri wire format', () => {
  it('encodes a ttrpc frame as the 10-byte header and payload', () => {
    const bytes = encodeTtrpcFrame({ streamId: 3, type: 1, flags: 0, payload: Buffer.from([0x0a, 0x01, 0x41]) });
    assert.deepEqual([...bytes], [0, 0, 0, 3, 0, 0, 0, 3, 1, 0, 0x0a, 0x01, 0x41]);
  });

  it('reads frames split at any byte and back to back', () => {
    const bytes = Buffer.from([...frame(1, 2, 0, [1, 2, 3]), ...frame(3, 2, 4, [])]);
    for (let cut = 0; cut <= bytes.length; cut++) {
      const r = new TtrpcFrameReader();
      const frames = [...r.push(bytes.subarray(0, cut)), ...r.push(bytes.subarray(cut))];
      assert.deepEqual(
        frames.map((f) => [f.streamId, f.type, f.flags, [...f.payload]]),
        [
          [1, 2, 0, [1, 2, 3]],
          [3, 2, 4, []],
        ],
      );
    }
  });

  it('refuses a frame over 4 MiB from its header alone', () => {
    const r = new TtrpcFrameReader();
    assert.throws(() => r.push(Buffer.from(frame(1, 1, 0, []).map((b, i) => (i < 4 ? u32(TTRPC_MAX_MESSAGE + 1)[i] : b)))), TtrpcProtocolError);
    assert.throws(() => encodeTtrpcFrame({ streamId: 1, type: 1, flags: 0, payload: Buffer.alloc(TTRPC_MAX_MESSAGE + 1) }), TtrpcProtocolError);
  });

  it('encodes a mux chunk as connection id, length and payload', () => {
    assert.deepEqual([...encodeMuxChunk(2, Buffer.from([9, 8]))], [0, 0, 0, 2, 0, 0, 0, 2, 9, 8]);
  });

  it('closes the mux on a chunk announcing more than a ttrpc message', async () => {
    const trunk = new PassThrough();
    const mux = new Mux(Duplex.from({ readable: trunk, writable: new PassThrough() }));
    const closed = new Promise<Error | undefined>((r) => mux.onClose(r));
    trunk.write(Buffer.from([0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff]));
    assert.match(String((await closed)?.message), /over the/);
  });

  it('encodes the ttrpc envelope with the field numbers of request.proto', () => {
    const req = Request.encode(Request.fromPartial({ service: 'S', method: 'M', payload: Buffer.from([7]), timeoutNano: 5n })).finish();
    assert.deepEqual([...req], [...ld(1, 'S'), ...ld(2, 'M'), ...ld(3, [7]), 0x20, 5]);
    const res = Response.decode(Buffer.from([...ld(1, [0x08, 5, ...ld(2, 'no')]), ...ld(2, [1])]));
    assert.equal(res.status?.code, 5);
    assert.equal(res.status?.message, 'no');
    assert.deepEqual([...res.payload], [1]);
  });

  describe('registration over a socket, bytes by hand', () => {
    let dir: string;
    let nri: NriAdaptation;
    let client: Socket;

    beforeEach(async () => {
      dir = await mkdtemp(join(tmpdir(), 'stove-nri-wire-'));
      nri = new NriAdaptation({
        socketPath: join(dir, 'nri.sock'),
        pluginPath: join(dir, 'plugins'),
        pluginConfigPath: join(dir, 'conf.d'),
        disableConnections: false,
        timeouts: { registrationMs: 2000, requestMs: 2000 },
        runtimeName: 'stove',
        runtimeVersion: '9.9.9',
        host: { snapshot: async () => ({ pods: [], containers: [] }), updateContainer: async () => {} },
        log: silentLogger,
      });
      await nri.start();
    });

    afterEach(async () => {
      client?.destroy();
      await nri.stop();
      await rm(dir, { recursive: true, force: true });
    });

    /** Reads exactly n bytes from the socket. */
    async function read(n: number): Promise<Buffer> {
      let buf = Buffer.alloc(0);
      while (buf.length < n) {
        const chunkRead = client.read(n - buf.length) as Buffer | null;
        if (chunkRead) buf = Buffer.concat([buf, chunkRead]);
        else if (client.readableEnded || client.destroyed) throw new Error('connection closed');
        else await Promise.race([once(client, 'readable'), once(client, 'end'), once(client, 'close')]);
      }
      return buf;
    }

    /** One mux chunk carrying one ttrpc frame: [connId, streamId, type, flags, payload]. */
    async function readFrame(): Promise<[number, number, number, number, Buffer]> {
      const muxHeader = await read(8);
      const body = await read(muxHeader.readUInt32BE(4));
      assert.equal(body.readUInt32BE(0), body.length - 10, 'ttrpc length covers the rest of the chunk');
      return [muxHeader.readUInt32BE(0), body.readUInt32BE(4), body[8], body[9], body.subarray(10)];
    }

    it('registers, configures and synchronizes a plugin that speaks only hand-built bytes', async () => {
      client = connect(join(dir, 'nri.sock'));
      await once(client, 'connect');
      client.pause();
      // RegisterPlugin("raw", "07") on the runtime's connection (2), stream 1.
      const register = [...ld(1, 'nri.pkg.api.v1alpha1.Runtime'), ...ld(2, 'RegisterPlugin'), ...ld(3, [...ld(1, 'raw'), ...ld(2, '07')])];
      client.write(Buffer.from(chunk(2, frame(1, 1, 0, register))));

      // Two frames, in either order: the answer to RegisterPlugin (a response on stream 1 of connection 2
      // with an OK status, an empty Status message) and Configure on the plugin's connection (1).
      const frames = [await readFrame(), await readFrame()].sort((a, b) => b[0] - a[0]);
      const [conn1, stream1, type1, flags1, payload1] = frames[0];
      assert.deepEqual([conn1, stream1, type1, flags1], [2, 1, 2, 0]);
      assert.deepEqual([...payload1], [0x0a, 0x00]);

      // Configure: the first stream the runtime opens.
      const [conn2, stream2, type2, , payload2] = frames[1];
      assert.deepEqual([conn2, stream2, type2], [1, 1, 1]);
      const configure = Request.decode(payload2);
      assert.equal(configure.service, 'nri.pkg.api.v1alpha1.Plugin');
      assert.equal(configure.method, 'Configure');
      const cfg = ConfigureRequest.decode(configure.payload);
      assert.equal(cfg.runtimeName, 'stove');
      assert.equal(cfg.runtimeVersion, '9.9.9');
      assert.equal(cfg.requestTimeout, 2000n);
      // Subscribe to StartContainer only: events = 1 << (6 - 1) = 32, field 2.
      client.write(Buffer.from(chunk(1, frame(1, 2, 0, ld(2, [0x10, 32])))));

      const [conn3, stream3, , , payload3] = await readFrame();
      assert.deepEqual([conn3, stream3], [1, 3]);
      const sync = Request.decode(payload3);
      assert.equal(sync.method, 'Synchronize');
      assert.deepEqual(SynchronizeRequest.decode(sync.payload), { pods: [], containers: [], more: false });
      client.write(Buffer.from(chunk(1, frame(3, 2, 0, ld(2, [])))));

      await eventually('the plugin to be listed', async () => nri.list().length > 0, 2000);
      assert.deepEqual(nri.list(), [{ name: 'raw', index: '07', kind: 'external', pid: undefined, events: 32 }]);
    });

    it('refuses a registration with an invalid index and drops the connection', async () => {
      client = connect(join(dir, 'nri.sock'));
      await once(client, 'connect');
      client.pause();
      const register = [...ld(1, 'nri.pkg.api.v1alpha1.Runtime'), ...ld(2, 'RegisterPlugin'), ...ld(3, [...ld(1, 'raw'), ...ld(2, '7')])];
      client.write(Buffer.from(chunk(2, frame(1, 1, 0, register))));
      const [, , type, , payload] = await readFrame().catch(() => [0, 0, 0, 0, Buffer.alloc(0)] as const);
      if (type === 2) assert.equal(Response.decode(payload).status?.code, 3);
      await once(client, 'close');
      assert.deepEqual(nri.list(), []);
    });
  });
});
