/** Splitting conmon's CRI log back into stdout and stderr. */
import assert from 'node:assert/strict';
import { parseCriLog } from '../../../src/monitor/cri-log.js';

const TS = '2026-11-30T08:51:44.441246495+00:00';

describe('monitor/cri-log', () => {
  it('joins F lines with newlines and P chunks without conmon\'s added newline', () => {
    const log = Buffer.from(
      [`${TS} stdout F hello`, `${TS} stdout P par`, `${TS} stderr F oops`, `${TS} stdout P tial`, `${TS} stdout F `, `${TS} stdout F end\r`, ''].join('\n'),
    );
    const parsed = parseCriLog(log);
    assert.equal(parsed.stdout.toString(), 'hello\npartial\nend\r\n');
    assert.equal(parsed.stderr.toString(), 'oops\n');
    assert.equal(parsed.truncated, false);
  });

  it('keeps binary content and skips malformed lines', () => {
    const bytes = Buffer.concat([Buffer.from(`${TS} stdout P `), Buffer.from([0, 255, 1]), Buffer.from(`\ngarbage\n${TS} other F x\n`)]);
    assert.deepEqual([...parseCriLog(bytes).stdout], [0, 255, 1]);
  });

  it('caps the total output and reports truncation', () => {
    const log = Buffer.from(`${TS} stdout F 0123456789\n${TS} stderr F abcdefghij\n`);
    const parsed = parseCriLog(log, 15);
    assert.equal(parsed.stdout.toString(), '0123456789\n');
    assert.equal(parsed.stderr.toString(), 'abcd');
    assert.equal(parsed.truncated, true);
    assert.equal(parseCriLog(log, 22).truncated, false);
  });
});
