/** Responses encoded once: reused bytes, parts concatenated, unmarked messages encoded every time. */
import assert from 'node:assert/strict';
import { ListImagesResponse, RuntimeServiceService, VersionResponse } from '../../../src/gen/runtime/v1/api.js';
import { encodeAhead, encodeAsParts, encodeOnce, responsePerKey, reusingSerializer, withWireReuse } from '../../../src/api/wire-reuse.js';

describe('wire reuse', () => {
  const serializer = () => {
    let calls = 0;
    const encode = reusingSerializer((value) => {
      calls++;
      return Buffer.from(VersionResponse.encode(value as VersionResponse).finish());
    });
    return { encode, calls: () => calls };
  };

  it('encodes a marked message once and sends the same bytes again', () => {
    const s = serializer();
    const message = encodeOnce(VersionResponse.fromPartial({ version: '0.1.0', runtimeName: 'stove' }));
    const first = s.encode(message);
    assert.equal(s.encode(message), first);
    assert.equal(s.calls(), 1);
    assert.deepEqual(VersionResponse.decode(first), message);
  });

  it('sends the bytes of a message encoded ahead without encoding it at send time', () => {
    const s = serializer();
    const message = encodeAhead(VersionResponse.fromPartial({ version: '0.1.0', runtimeName: 'ahead' }), (m) => VersionResponse.encode(m).finish());
    const sent = s.encode(message);
    assert.equal(s.calls(), 0, 'encoded ahead, not at send time');
    assert.deepEqual(VersionResponse.decode(sent), message);
    assert.equal(s.encode(message), sent);
    assert.equal(s.calls(), 0);
  });

  it('encodes an unmarked message on every send, so a modified one is never stale', () => {
    const s = serializer();
    const message = VersionResponse.fromPartial({ runtimeName: 'stove' });
    s.encode(message);
    message.runtimeName = 'changed';
    assert.equal(VersionResponse.decode(s.encode(message)).runtimeName, 'changed');
    assert.equal(s.calls(), 2);
  });

  it('encodes a message made of parts as their concatenation, which decodes to the whole message', () => {
    const encode = reusingSerializer((value) => Buffer.from(ListImagesResponse.encode(value as ListImagesResponse).finish()));
    const a = encodeOnce(ListImagesResponse.fromPartial({ images: [{ id: 'sha256:a', repoTags: ['a:1'], size: 10n }] }));
    const b = encodeOnce(ListImagesResponse.fromPartial({ images: [{ id: 'sha256:b', repoTags: ['b:1'], size: 20n }] }));
    const whole = encodeAsParts({ images: [a.images[0]!, b.images[0]!] }, [a, b]);
    assert.deepEqual(ListImagesResponse.decode(encode(whole)), ListImagesResponse.fromPartial(whole));
    assert.deepEqual(ListImagesResponse.decode(encode(encodeAsParts({ images: [] }, []))).images, []);
  });

  it('builds one response per key object: a new key (a changed record) gets a new response', () => {
    let built = 0;
    const answer = responsePerKey((record: { name: string }) => {
      built++;
      return VersionResponse.fromPartial({ runtimeName: record.name });
    });
    const record = { name: 'one' };
    assert.equal(answer(record), answer(record));
    const changed = { ...record, name: 'two' };
    assert.equal(answer(changed).runtimeName, 'two');
    assert.equal(built, 2);
  });

  it('wraps every response serializer of a service, leaving the rest of the definition alone', () => {
    const wrapped = withWireReuse(RuntimeServiceService);
    assert.deepEqual(Object.keys(wrapped), Object.keys(RuntimeServiceService));
    assert.equal(wrapped.version!.path, RuntimeServiceService.version.path);
    assert.equal(wrapped.version!.requestDeserialize, RuntimeServiceService.version.requestDeserialize);
    const bytes = wrapped.version!.responseSerialize(VersionResponse.fromPartial({ runtimeName: 'stove' }));
    assert.equal(VersionResponse.decode(bytes).runtimeName, 'stove');
  });
});
