/** bench/lib/results.ts: a benchmark's report replaces its previous one between its markers. */
import assert from 'node:assert/strict';
import { withResults } from '../../../bench/lib/results.js';

describe('bench results file', () => {
  const doc = '# Results\n\nintro\n\n<!-- bench:pull -->\nold table\n<!-- /bench:pull -->\n\nwhat it showed\n';

  it("replaces only what is between the script's markers", () => {
    const next = withResults(doc, 'pull', '\nnew heading\n\n| a |\n');
    assert.equal(next, '# Results\n\nintro\n\n<!-- bench:pull -->\nnew heading\n\n| a |\n<!-- /bench:pull -->\n\nwhat it showed\n');
    assert.equal(withResults(next, 'pull', 'third'), doc.replace('old table', 'third'));
  });

  it('adds a section with markers for a script that has none yet', () => {
    const next = withResults(doc, 'memory', 'rss table');
    assert.ok(next.startsWith(doc.trimEnd()));
    assert.match(next, /## `bench\/memory\.ts`: the latest run\n\n<!-- bench:memory -->\nrss table\n<!-- \/bench:memory -->\n$/);
  });

  it('refuses markers that are not a pair in order', () => {
    assert.throws(() => withResults('<!-- /bench:pull -->\n<!-- bench:pull -->', 'pull', 'x'), /not a pair/);
    assert.throws(() => withResults('<!-- bench:pull -->\n', 'pull', 'x'), /not a pair/);
  });
});
