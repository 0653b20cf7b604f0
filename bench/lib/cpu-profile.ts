/**
 * A V8 CPU profile (`.cpuprofile`, what `node --cpu-prof` and daemon-probe.ts write) of Stove's daemon,
 * summed up: where its time went by CRI adapter (the `cri/<rpc>.js` file on a sample's stack: that
 * RPC's own work), by the transport (`api/` without an adapter), by module for the rest, and the
 * functions with the most self time.
 */
import { readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { SourceMap } from 'node:module';
import { fileURLToPath } from 'node:url';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number; columnNumber: number };
  children?: number[];
}

interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
  startTime: number;
  endTime: number;
}

export interface ProfileSummary {
  /** Wall time the profile covers, and CPU time sampled in it (ms; idle samples excluded). */
  wallMs: number;
  busyMs: number;
  /** ms per part: `cri/<file>` (an RPC's adapter and everything under it), `api/ (transport)`, `<module>/`, V8's own entries. */
  parts: Map<string, number>;
  /** The functions with the most self time: `name (file:line)` → ms. */
  selfTop: [string, number][];
}

const maps = new Map<string, SourceMap | undefined>();

/** The bundle's source map of `url` (the daemon runs dist/bundle-*, scripts/bundle.mjs, maps beside it). */
function mapOf(url: string): SourceMap | undefined {
  if (!maps.has(url)) {
    let map: SourceMap | undefined;
    try {
      map = new SourceMap(JSON.parse(readFileSync(`${fileURLToPath(url)}.map`, 'utf8')) as ConstructorParameters<typeof SourceMap>[0]);
    } catch {
      map = undefined;
    }
    maps.set(url, map);
  }
  return maps.get(url);
}

/** The path below `src/` of a frame's source (through the bundle's source map), '' for node's own code and V8's entries. */
function srcPath(frame: ProfileNode['callFrame']): string {
  const { url } = frame;
  const at = url.indexOf('/dist/src/');
  if (at >= 0) return url.slice(at + '/dist/src/'.length);
  if (!url.includes('/dist/bundle')) return '';
  const entry = mapOf(url)?.findEntry(frame.lineNumber, frame.columnNumber);
  const source = entry && 'originalSource' in entry ? entry.originalSource : '';
  const src = source.lastIndexOf('src/');
  return src >= 0 && !source.includes('node_modules') ? source.slice(src + 4) : '';
}

export async function summarizeProfile(path: string, top = 15): Promise<ProfileSummary> {
  const profile = JSON.parse(await readFile(path, 'utf8')) as Profile;
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const parts = new Map<string, number>();
  const self = new Map<string, number>();
  const add = (m: Map<string, number>, k: string, us: number) => m.set(k, (m.get(k) ?? 0) + us / 1000);
  let busyMs = 0;
  profile.samples.forEach((id, i) => {
    const us = profile.timeDeltas[i] ?? 0;
    const leaf = byId.get(id)!;
    if (leaf.callFrame.functionName === '(idle)') return;
    busyMs += us / 1000;
    const leafSrc = srcPath(leaf.callFrame);
    add(self, `${leaf.callFrame.functionName || '(anonymous)'} (${leafSrc || leaf.callFrame.url.replace(/^.*\/(node_modules|dist)\//, '') || 'native'})`, us);
    let adapter = '';
    let transport = false;
    let module = '';
    for (let n: number | undefined = id; n !== undefined; n = parent.get(n)) {
      const src = srcPath(byId.get(n)!.callFrame);
      // The innermost adapter: every handler is also under cri/rpc-table.ts (the table's lambdas).
      if (src.startsWith('cri/') && (!adapter || adapter === 'cri/rpc-table.ts')) adapter = src;
      else if (src.startsWith('api/')) transport = true;
      if (src && !module) module = `${src.split('/')[0]}/`;
    }
    const v8 = leaf.callFrame.functionName.startsWith('(') ? leaf.callFrame.functionName : '';
    add(parts, adapter ? adapter.replace(/\.js$/, '') : transport ? 'api/ (transport)' : module || v8 || 'node and libraries', us);
  });
  const selfTop = [...self].sort((a, b) => b[1] - a[1]).slice(0, top);
  return { wallMs: (profile.endTime - profile.startTime) / 1000, busyMs, parts, selfTop };
}
