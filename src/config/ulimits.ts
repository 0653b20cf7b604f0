/**
 * Node-wide default rlimits (`runtime.default_ulimits`), in CRI-O's `name=soft:hard` form: `nofile`
 * → RLIMIT_NOFILE. Checked when the config loads; the spec builder applies them (withDefaultRlimits).
 */
/** One rlimit as the OCI spec's process.rlimits holds it. */
export interface Rlimit {
  type: string;
  hard: number;
  soft: number;
}

/** The rlimit names `setrlimit(2)` knows, as `ulimit` spells them. */
const RLIMIT_NAMES = [
  'as', 'core', 'cpu', 'data', 'fsize', 'locks', 'memlock', 'msgqueue', 'nice', 'nofile', 'nproc', 'rss', 'rtprio', 'rttime',
  'sigpending', 'stack',
] as const;

/** Parses `name=soft:hard` (or `name=limit` for both); throws an Error saying what is wrong. */
export function parseUlimit(text: string): Rlimit {
  const m = /^([a-z]+)=(\d{1,20})(?::(\d{1,20}))?$/.exec(text.trim());
  if (!m) throw new Error(`"${text}" is not of the form name=soft:hard (e.g. "nofile=1048576:1048576")`);
  const name = m[1]!;
  if (!(RLIMIT_NAMES as readonly string[]).includes(name)) throw new Error(`"${text}": unknown rlimit "${name}" (one of ${RLIMIT_NAMES.join(', ')})`);
  const soft = Number(m[2]);
  const hard = m[3] === undefined ? soft : Number(m[3]);
  if (!Number.isSafeInteger(soft) || !Number.isSafeInteger(hard)) throw new Error(`"${text}": limit too large`);
  if (soft > hard) throw new Error(`"${text}": soft limit ${soft} is above the hard limit ${hard}`);
  return { type: `RLIMIT_${name.toUpperCase()}`, soft, hard };
}

/** Parses every entry; a name given twice is an error (which one wins would be a guess). */
export function parseUlimits(entries: readonly string[]): Rlimit[] {
  const out = entries.map(parseUlimit);
  const seen = new Set<string>();
  for (const r of out) {
    if (seen.has(r.type)) throw new Error(`${r.type.slice(7).toLowerCase()} is set twice`);
    seen.add(r.type);
  }
  return out;
}
