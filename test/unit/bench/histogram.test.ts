/** bench/lib/histogram.ts: a kubelet's histograms read from /metrics text, differenced and estimated. */
import assert from 'node:assert/strict';
import { difference, histograms, mean, quantile } from '../../../bench/lib/histogram.js';

const scrape = (counts: number[], sum: number, extra = '') => `# HELP kubelet_pod_start_sli_duration_seconds [ALPHA] Duration
# TYPE kubelet_pod_start_sli_duration_seconds histogram
${[0.5, 1, 2, 5].map((le, i) => `kubelet_pod_start_sli_duration_seconds_bucket{le="${le}"} ${counts[i]}`).join('\n')}
kubelet_pod_start_sli_duration_seconds_bucket{le="+Inf"} ${counts[4]}
kubelet_pod_start_sli_duration_seconds_sum ${sum}
kubelet_pod_start_sli_duration_seconds_count ${counts[4]}
kubelet_pod_start_sli_duration_seconds_total_other 7
${extra}`;

describe('bench histograms', () => {
  it('reads the series of one histogram, keyed by its labels but le', () => {
    const text = `kubelet_runtime_operations_duration_seconds_bucket{operation_type="run_podsandbox",le="0.1"} 3
kubelet_runtime_operations_duration_seconds_bucket{operation_type="run_podsandbox",le="+Inf"} 4
kubelet_runtime_operations_duration_seconds_sum{operation_type="run_podsandbox"} 0.9
kubelet_runtime_operations_duration_seconds_count{operation_type="run_podsandbox"} 4
kubelet_runtime_operations_duration_seconds_bucket{le="+Inf",operation_type="version"} 1
`;
    const h = histograms(text, 'kubelet_runtime_operations_duration_seconds');
    assert.deepEqual([...h.keys()], ['operation_type="run_podsandbox"', 'operation_type="version"']);
    assert.deepEqual(h.get('operation_type="run_podsandbox"'), { buckets: [{ le: 0.1, count: 3 }, { le: Infinity, count: 4 }], sum: 0.9, count: 4 });
    assert.equal(histograms(scrape([0, 0, 0, 0, 0], 0), 'kubelet_pod_start_sli_duration_seconds').size, 1);
  });

  it('takes what one round added: the difference of two scrapes, its mean and quantiles', () => {
    const name = 'kubelet_pod_start_sli_duration_seconds';
    const before = histograms(scrape([0, 1, 1, 1, 1], 0.8), name).get('')!;
    // 10 more pods: 2 in (0.5, 1], 6 in (1, 2], 2 in (2, 5]
    const after = histograms(scrape([0, 3, 9, 11, 11], 17.8), name).get('')!;
    const d = difference(after, before);
    assert.equal(d.count, 10);
    assert.equal(mean(d), 1.7);
    // rank 5 of 10: 3 into the (1, 2] bucket's 6 → 1.5; rank 9 → the (2, 5] bucket's first of 2 → 3.5
    assert.equal(quantile(d, 0.5), 1.5);
    assert.equal(quantile(d, 0.9), 3.5);
  });

  it('answers NaN without observations and the highest finite bound for a rank in +Inf', () => {
    const empty = { buckets: [{ le: 1, count: 0 }, { le: Infinity, count: 0 }], sum: 0, count: 0 };
    assert.ok(Number.isNaN(mean(empty)));
    assert.ok(Number.isNaN(quantile(empty, 0.5)));
    assert.equal(quantile({ buckets: [{ le: 1, count: 1 }, { le: Infinity, count: 4 }], sum: 9, count: 4 }, 0.9), 1);
  });
});
