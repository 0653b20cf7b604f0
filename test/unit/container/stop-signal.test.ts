import assert from 'node:assert/strict';
import { Signal } from '../../../src/gen/runtime/v1/api.js';
import {
  criSignalName,
  effectiveStopSignal,
  parseImageStopSignal,
  runtimeSignalArg,
  signalNumber,
  toCriSignal,
} from '../../../src/container/stop-signal.js';

describe('stop signal', () => {
  it('prefers the request, then the image, then SIGTERM', () => {
    assert.equal(effectiveStopSignal(Signal.SIGUSR1, 'SIGINT'), 'SIGUSR1');
    assert.equal(effectiveStopSignal(Signal.RUNTIME_DEFAULT, 'SIGINT'), 'SIGINT');
    assert.equal(effectiveStopSignal(Signal.RUNTIME_DEFAULT, undefined), 'SIGTERM');
    assert.equal(effectiveStopSignal(Signal.RUNTIME_DEFAULT, ''), 'SIGTERM');
  });

  it('reads an image StopSignal as Docker writes it', () => {
    assert.equal(parseImageStopSignal('usr2'), 'SIGUSR2');
    assert.equal(parseImageStopSignal('SIGQUIT'), 'SIGQUIT');
    assert.equal(parseImageStopSignal('9'), 'SIGKILL');
    assert.equal(parseImageStopSignal('SIGRTMIN+3'), 'SIGRTMIN+3');
    assert.equal(parseImageStopSignal('RTMAX-1'), 'SIGRTMAX-1');
    assert.equal(parseImageStopSignal('50'), 'SIGRTMAX-14');
    assert.equal(parseImageStopSignal('SIGRTMIN+30'), 'SIGRTMAX');
    assert.throws(() => parseImageStopSignal('SIGNOPE'), /StopSignal "SIGNOPE" is not a signal/);
    assert.throws(() => parseImageStopSignal('0'), /not a signal number/);
    assert.throws(() => parseImageStopSignal('SIGRTMIN+31'), /not a signal/);
  });

  it('maps the CRI enum to names and Linux numbers both ways', () => {
    assert.equal(criSignalName(Signal.RUNTIME_DEFAULT), undefined);
    assert.equal(criSignalName(Signal.SIGRTMINPLUS3), 'SIGRTMIN+3');
    assert.equal(criSignalName(Signal.SIGRTMAXMINUS1), 'SIGRTMAX-1');
    assert.throws(() => criSignalName(99 as Signal), /stop_signal 99/);
    for (let v = 1; v <= 65; v++) {
      const name = criSignalName(v as Signal)!;
      assert.equal(toCriSignal(name), v, name);
      assert.ok(signalNumber(name)! >= 1 && signalNumber(name)! <= 64, name);
    }
    assert.equal(signalNumber('SIGTERM'), 15);
    assert.equal(signalNumber('SIGUSR1'), 10);
    assert.equal(signalNumber('SIGRTMIN'), 34);
    assert.equal(signalNumber('SIGRTMAX-14'), 50);
    assert.equal(toCriSignal('SIGTERM'), Signal.SIGTERM);
    assert.equal(runtimeSignalArg('SIGUSR1'), 'SIGUSR1');
    assert.equal(runtimeSignalArg('SIGRTMIN+3'), '37');
  });
});
