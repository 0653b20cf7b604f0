/**
 * CreateContainer's env values read as bytes from the request (cri-api v0.37's `bytes value`, the same
 * wire as v0.36's `string`): UTF-8 passes unchanged, binary data and NUL bytes are refused naming the
 * variable and never showing its value.
 */
import assert from 'node:assert/strict';
import { ContainerConfig, CreateContainerRequest } from '../../../src/gen/runtime/v1/api.js';
import { BinaryWriter } from '@bufbuild/protobuf/wire';
import { ContainerEnvs } from '../../../src/gen/stove/v1/wire.js';
import { checkEnvValues, createContainer } from '../../../src/cri/create-container.js';
import { StoveError } from '../../../src/common/errors.js';

/**
 * A request whose env values are raw bytes, as a kubelet with cri-api v0.37 sends them: the config's
 * fields, then its envs as the view encodes them (one message: the repeated field's entries append).
 */
function requestBytes(envs: { key: string; value: Buffer }[], config = ContainerConfig.fromPartial({ metadata: { name: 'web' }, image: { image: 'x' } })): Buffer {
  const configBytes = Buffer.concat([ContainerConfig.encode(config).finish(), ContainerEnvs.encode({ envs }).finish()]);
  return Buffer.from(new BinaryWriter().uint32(10).string('p').uint32(18).bytes(configBytes).finish());
}

describe('cri: CreateContainer env values as bytes', () => {
  it('lets UTF-8 text through, U+FFFD and control characters included, and decodes it unchanged', () => {
    const value = Buffer.from('a€\u{1F600}\uFFFD\n\t\x01\x7f', 'utf8');
    const bytes = requestBytes([{ key: 'TEXT', value }]);
    checkEnvValues(bytes, 'web');
    assert.deepEqual(Buffer.from(CreateContainerRequest.decode(bytes).config!.envs[0]!.value, 'utf8'), value);
  });

  it('refuses binary data with INVALID_ARGUMENT naming the variable and container, not the value', async () => {
    const bytes = requestBytes([{ key: 'OK', value: Buffer.from('fine') }, { key: 'P12', value: Buffer.from([0x30, 0x82, 0xff, 0xc3, 0x28]) }]);
    let called = false;
    const pods = { createContainer: () => ((called = true), Promise.reject(new Error('not reached'))) };
    await assert.rejects(createContainer(pods, CreateContainerRequest.decode(bytes), bytes), (err: unknown) => {
      assert.ok(err instanceof StoveError);
      assert.equal(err.kind, 'InvalidArgument');
      assert.match(err.message, /environment variable "P12" of container "web": its value is binary data, not UTF-8 text/);
      assert.match(err.message, /U\+FFFD/);
      assert.doesNotMatch(err.message, /\x30\x82|fine/);
      return true;
    });
    assert.equal(called, false, 'nothing is created');
  });

  it('refuses a NUL byte', () => {
    assert.throws(() => checkEnvValues(requestBytes([{ key: 'Z', value: Buffer.from('a\0b') }]), 'web'), /"Z" of container "web": its value contains a NUL byte/);
  });
});
