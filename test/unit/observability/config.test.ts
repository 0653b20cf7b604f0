import assert from 'node:assert/strict';
import { applyOverrides, configToToml, ConfigError, parseConfig, parseHostPort } from '../../../src/config/load.js';
import { defaultConfig } from '../../../src/config/schema.js';

describe('observability: config', () => {
  it('is off by default', () => {
    const c = defaultConfig();
    assert.equal(c.metrics.address, '');
    assert.deepEqual(c.tracing, { endpoint: '', sampleRatio: 1, serviceName: 'stove' });
    assert.match(configToToml(c), /\[tracing\]\nendpoint = ""\nsample_ratio = 1\nservice_name = "stove"/);
  });

  it('reads [metrics] and [tracing], with a fractional sample ratio', () => {
    const c = parseConfig('[metrics]\naddress = "127.0.0.1:9099"\n[tracing]\nendpoint = "http://127.0.0.1:4318"\nsample_ratio = 0.25\nservice_name = "node-a"\n', 't.toml');
    assert.equal(c.metrics.address, '127.0.0.1:9099');
    assert.deepEqual(c.tracing, { endpoint: 'http://127.0.0.1:4318', sampleRatio: 0.25, serviceName: 'node-a' });
    assert.equal(parseConfig('[tracing]\nsample_ratio = 0\n', 't.toml').tracing.sampleRatio, 0);
  });

  it('refuses bad values, naming the key', () => {
    const bad: [string, RegExp][] = [
      ['[metrics]\naddress = "9099"\n', /"metrics.address" must be host:port/],
      ['[metrics]\naddress = "localhost:70000"\n', /"metrics.address" must be host:port/],
      ['[tracing]\nendpoint = "127.0.0.1:4318"\n', /"tracing.endpoint" must be an http/],
      ['[tracing]\nsample_ratio = 1.5\n', /"tracing.sample_ratio" must be between 0 and 1/],
      ['[tracing]\nsample_ratio = "all"\n', /"tracing.sample_ratio" must be a number/],
      ['[tracing]\nservice_name = ""\n', /"tracing.service_name" must not be empty/],
      ['[streaming]\nport = 1.5\n', /"streaming.port" must be a non-negative integer/],
    ];
    for (const [toml, message] of bad) assert.throws(() => parseConfig(toml, 't.toml'), (e: Error) => e instanceof ConfigError && message.test(e.message), toml);
  });

  it('--metrics-address overrides the file', () => {
    const c = defaultConfig();
    applyOverrides(c, { metricsAddress: '[::1]:9099' });
    assert.equal(c.metrics.address, '[::1]:9099');
    assert.throws(() => applyOverrides(c, { metricsAddress: 'nope' }), /metrics.address/);
  });

  it('parses host:port and [v6]:port', () => {
    assert.deepEqual(parseHostPort('0.0.0.0:9099'), { host: '0.0.0.0', port: 9099 });
    assert.deepEqual(parseHostPort('[::1]:0'), { host: '::1', port: 0 });
    assert.deepEqual(parseHostPort('node.local:80'), { host: 'node.local', port: 80 });
    for (const bad of ['', ':80', '::1:80', 'a:b', 'a:123456', 'a/b:80']) assert.equal(parseHostPort(bad), undefined, bad);
  });
});
