import assert from 'node:assert/strict';
import { join } from 'node:path';
import { CniError, CniExec, pluginFailureMessage, type CniInvocation } from '../../../src/network/cni-exec.js';
import { silentLogger } from '../../../src/common/logger.js';
import { FakeCni } from './fake-cni.js';

const call: CniInvocation = { command: 'ADD', containerId: 'c1', netns: '/proc/self/ns/net', ifName: 'eth0', cniArgs: 'IgnoreUnknown=1;K8S_POD_NAME=p' };

describe('network/cni-exec', () => {
  let fake: FakeCni;
  let exec: CniExec;
  beforeEach(async () => {
    fake = await FakeCni.create(['fake-a']);
    exec = new CniExec({ binDirs: ['/nonexistent/cni', fake.binDir], timeoutSeconds: 2, log: silentLogger });
  });
  afterEach(async () => fake.cleanup());

  it('finds plugins in the bin dirs in order and explains a missing one as libcni does', async () => {
    assert.equal(await exec.findPlugin('fake-a'), join(fake.binDir, 'fake-a'));
    await assert.rejects(exec.findPlugin('nope'), (e) => {
      assert.ok(e instanceof CniError && !e.executed);
      assert.equal(e.message, `failed to find plugin "nope" in path [/nonexistent/cni ${fake.binDir}]`);
      return true;
    });
    await assert.rejects(exec.findPlugin('../fake-a'), /invalid plugin name/);
  });

  it('passes the CNI_* environment and the config on stdin, and parses the ADD result', async () => {
    await fake.answer('fake-a', 'ADD', { out: { cniVersion: '1.0.0', ips: [{ address: '10.0.0.2/24' }] } });
    const result = await exec.invoke(join(fake.binDir, 'fake-a'), call, { cniVersion: '1.0.0', name: 'n', type: 'fake-a' });
    assert.deepEqual(result, { cniVersion: '1.0.0', ips: [{ address: '10.0.0.2/24' }] });
    assert.deepEqual(await fake.env(1), {
      CNI_ARGS: 'IgnoreUnknown=1;K8S_POD_NAME=p',
      CNI_COMMAND: 'ADD',
      CNI_CONTAINERID: 'c1',
      CNI_IFNAME: 'eth0',
      CNI_NETNS: '/proc/self/ns/net',
      CNI_PATH: `/nonexistent/cni:${fake.binDir}`,
    });
    assert.deepEqual(await fake.stdin(1), { cniVersion: '1.0.0', name: 'n', type: 'fake-a' });
  });

  it('ignores stdout for DEL and CHECK', async () => {
    await fake.answer('fake-a', 'DEL', { out: 'not json at all' });
    assert.equal(await exec.invoke(join(fake.binDir, 'fake-a'), { ...call, command: 'DEL', netns: '' }, {}), undefined);
    assert.equal((await fake.env(1)).CNI_NETNS, '');
  });

  it('turns the plugin JSON error into its message (msg; details)', async () => {
    await fake.answer('fake-a', 'ADD', { out: { code: 7, msg: 'bad config', details: 'field x' }, exit: 1 });
    await assert.rejects(exec.invoke(join(fake.binDir, 'fake-a'), call, {}), (e) => {
      assert.ok(e instanceof CniError && e.executed);
      assert.equal(e.message, 'bad config; field x');
      assert.equal(e.kind, 'Internal');
      return true;
    });
  });

  it('maps error code 11 (try again later) to Unavailable', async () => {
    await fake.answer('fake-a', 'ADD', { out: { code: 11, msg: 'busy' }, exit: 1 });
    await assert.rejects(exec.invoke(join(fake.binDir, 'fake-a'), call, {}), (e) => (e as CniError).kind === 'Unavailable');
  });

  it('formats failures without a JSON error as libcni does', () => {
    assert.deepEqual(pluginFailureMessage(2, '', ''), { message: 'netplugin failed with no error message: exit status 2' });
    assert.deepEqual(pluginFailureMessage(1, '', 'oops\n'), { message: 'netplugin failed: "oops\\n"' });
    assert.match(pluginFailureMessage(1, 'garbage', '').message, /^netplugin failed but error parsing its diagnostic message "garbage": /);
    assert.deepEqual(pluginFailureMessage(1, '{"code":3,"msg":"gone"}', ''), { message: 'gone', code: 3 });
    assert.deepEqual(pluginFailureMessage(1, '{"code":4}', ''), { message: 'netplugin failed: "{\\"code\\":4}"', code: 4 });
  });

  it('reports stderr when the plugin printed nothing on stdout', async () => {
    await fake.answer('fake-a', 'ADD', { out: '', err: 'segfault', exit: 2 });
    await assert.rejects(exec.invoke(join(fake.binDir, 'fake-a'), call, {}), { message: 'netplugin failed: "segfault"' });
  });

  it('rejects an ADD result that is not a JSON object', async () => {
    await fake.answer('fake-a', 'ADD', { out: '[1,2]' });
    await assert.rejects(exec.invoke(join(fake.binDir, 'fake-a'), call, {}), /plugin returned an invalid result "\[1,2\]"/);
  });

  it('kills a plugin that exceeds the timeout', async () => {
    const quick = new CniExec({ binDirs: [fake.binDir], timeoutSeconds: 0.3, log: silentLogger });
    await fake.answer('fake-a', 'ADD', { sleep: 5 });
    const started = Date.now();
    await assert.rejects(quick.invoke(join(fake.binDir, 'fake-a'), call, {}), (e) => {
      assert.equal((e as CniError).kind, 'DeadlineExceeded');
      assert.equal((e as Error).message, 'timed out after 0.3s');
      return true;
    });
    assert.ok(Date.now() - started < 3000, 'did not wait for the plugin');
  });

  it('asks a plugin for its versions', async () => {
    const info = await exec.version(join(fake.binDir, 'fake-a'), '1.0.0');
    assert.deepEqual(info.supportedVersions, ['0.3.0', '0.3.1', '0.4.0', '1.0.0']);
    assert.equal((await fake.env(1)).CNI_COMMAND, 'VERSION');
    assert.deepEqual(await fake.stdin(1), { cniVersion: '1.0.0' });
  });
});
