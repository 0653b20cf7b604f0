/**
 * Prometheus histograms from a text exposition (a kubelet's /metrics): the series of one histogram,
 * the difference of two scrapes, and its mean and quantiles as Prometheus estimates them.
 */

/** One series of a histogram: cumulative bucket counts by upper bound (ascending, +Inf last), sum and count. */
export interface Histogram {
  buckets: { le: number; count: number }[];
  sum: number;
  count: number;
}

const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/;
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;

/**
 * The series of histogram `name` in `text`, keyed by their labels other than `le` (`a="1",b="2"`, sorted;
 * '' for a histogram without labels).
 */
export function histograms(text: string, name: string): Map<string, Histogram> {
  const out = new Map<string, Histogram>();
  const series = (key: string) => {
    let h = out.get(key);
    if (!h) out.set(key, (h = { buckets: [], sum: 0, count: 0 }));
    return h;
  };
  for (const line of text.split('\n')) {
    if (!line.startsWith(name)) continue;
    const m = SAMPLE.exec(line);
    if (!m) continue;
    const [, metric, labelText = '', valueText] = m;
    const labels = [...labelText.matchAll(LABEL)].map(([, k, v]) => [k!, v!] as const);
    const key = labels.filter(([k]) => k !== 'le').map(([k, v]) => `${k}="${v}"`).sort().join(',');
    const value = Number(valueText);
    if (metric === `${name}_bucket`) {
      const le = labels.find(([k]) => k === 'le')?.[1];
      if (le !== undefined) series(key).buckets.push({ le: le === '+Inf' ? Infinity : Number(le), count: value });
    } else if (metric === `${name}_sum`) series(key).sum = value;
    else if (metric === `${name}_count`) series(key).count = value;
  }
  for (const h of out.values()) h.buckets.sort((a, b) => a.le - b.le);
  return out;
}

/** What was observed between two scrapes of one series (`before` missing: nothing before). */
export function difference(after: Histogram, before: Histogram | undefined): Histogram {
  if (!before) return after;
  return {
    buckets: after.buckets.map((b) => ({ le: b.le, count: b.count - (before.buckets.find((x) => x.le === b.le)?.count ?? 0) })),
    sum: after.sum - before.sum,
    count: after.count - before.count,
  };
}

/** sum / count (NaN without observations). */
export function mean(h: Histogram): number {
  return h.count > 0 ? h.sum / h.count : NaN;
}

/**
 * The q-quantile as Prometheus' histogram_quantile estimates it: linear within the bucket the rank
 * falls in (from 0 for the first bucket); in the +Inf bucket, the highest finite bound.
 */
export function quantile(h: Histogram, q: number): number {
  const total = h.buckets.at(-1)?.count ?? 0;
  if (total <= 0) return NaN;
  const rank = q * total;
  let lower = 0;
  let below = 0;
  for (const b of h.buckets) {
    if (b.count >= rank) {
      if (b.le === Infinity) return lower;
      const inBucket = b.count - below;
      return inBucket > 0 ? lower + ((b.le - lower) * (rank - below)) / inBucket : b.le;
    }
    lower = b.le;
    below = b.count;
  }
  return lower;
}
