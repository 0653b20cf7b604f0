/** Small statistics for benchmark tables. */
export function median(values: number[]): number {
  const s = [...values].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

export function p90(values: number[]): number {
  const s = [...values].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil(s.length * 0.9) - 1)]!;
}

/** Milliseconds as a short human string. */
export function ms(value: number): string {
  if (value >= 1000) return `${(value / 1000).toFixed(2)} s`;
  return `${value.toFixed(value < 1 ? 2 : value < 10 ? 1 : 0)} ms`;
}

/** A Markdown table. */
export function table(rows: string[][]): string {
  const widths = rows[0]!.map((_c, i) => Math.max(...rows.map((r) => r[i]!.length)));
  const line = (r: string[]) => `| ${r.map((c, i) => c.padEnd(widths[i]!)).join(' | ')} |`;
  return [line(rows[0]!), `|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`, ...rows.slice(1).map(line)].join('\n');
}

/**
 * The rows of a containerd vs Stove table: median and p90 per key for each runtime that ran ('-' for
 * one that did not), and the ratio of the medians.
 */
export function comparisonRows<K extends string>(
  header: string,
  keys: readonly K[],
  containerd: Record<K, number[]> | undefined,
  stove: Record<K, number[]> | undefined,
  label: (key: K) => string = (key) => key,
): string[][] {
  const rows = [[header, 'containerd median', 'containerd p90', 'stove median', 'stove p90', 'stove/containerd']];
  for (const key of keys) {
    const cell = (times: Record<K, number[]> | undefined, f: (v: number[]) => number) => (times ? ms(f(times[key])) : '-');
    const ratio = stove && containerd ? `${(median(stove[key]) / median(containerd[key])).toFixed(2)}×` : '-';
    rows.push([label(key), cell(containerd, median), cell(containerd, p90), cell(stove, median), cell(stove, p90), ratio]);
  }
  return rows;
}

/** How a series sampled along a run moves (in its own unit; `x` is e.g. the lifecycle count). */
export interface Growth {
  /** Last value minus first. */
  change: number;
  /** One-off moves between consecutive samples of at least the threshold: where they end and by how much. */
  steps: { x: number; by: number }[];
  /** Least-squares slope per unit of `x` of the series with those steps taken out. */
  slope: number;
}

/**
 * Separates a trend from one-off steps: every move of at least `stepAtLeast` (in either direction)
 * between two consecutive samples is a step and is taken out of the series (the samples after it
 * shifted back by its size); what remains is fitted with a least-squares line.
 */
export function growth(points: { x: number; y: number }[], stepAtLeast: number): Growth {
  const steps: Growth['steps'] = [];
  const level: { x: number; y: number }[] = [];
  let shift = 0;
  points.forEach((p, i) => {
    const by = i > 0 ? p.y - points[i - 1]!.y : 0;
    if (i > 0 && Math.abs(by) >= stepAtLeast) {
      steps.push({ x: p.x, by });
      shift += by;
    }
    level.push({ x: p.x, y: p.y - shift });
  });
  const n = level.length;
  const mx = level.reduce((s, p) => s + p.x, 0) / n;
  const my = level.reduce((s, p) => s + p.y, 0) / n;
  const sxx = level.reduce((s, p) => s + (p.x - mx) ** 2, 0);
  const slope = n > 1 && sxx > 0 ? level.reduce((s, p) => s + (p.x - mx) * (p.y - my), 0) / sxx : 0;
  return { change: n ? points[n - 1]!.y - points[0]!.y : 0, steps, slope };
}
