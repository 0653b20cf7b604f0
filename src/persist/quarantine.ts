/**
 * Nothing is destroyed because Stove could not read it. A record that cannot be read or parsed (a
 * crash, a full disk, an operator's edit) says nothing about whether what it describes is still in
 * use: a pod's pause process, netns and IP, a container's processes, mounts and writable layer, an
 * image's layers. So such a record is moved to `<root>/quarantine/` (log line naming it), and what it
 * described is left alone — recovery treats its ID as known, image garbage collection keeps what it may
 * reference (images/gc-protection.ts) — until an operator repairs the record and moves it back, or
 * cleans up by hand and deletes the entry. `stove check`, `Status` and a metric report the entries.
 *
 * An entry is `<kind>.<id>.<ms>.<file name>`, with `<same>.why` beside it (where it came from and why).
 */
import { mkdir, readdir, readFile, rename, writeFile } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { messageOf } from '../common/errors.js';
import type { Logger } from '../common/logger.js';

export type QuarantineKind = 'sandbox' | 'container' | 'image' | 'layer' | 'hold';

const KINDS: readonly QuarantineKind[] = ['sandbox', 'container', 'image', 'layer', 'hold'];

export interface QuarantineEntry {
  kind: QuarantineKind;
  /** The ID of what the record described (sandbox, container or image ID, layer chain hex). */
  id: string;
  /** The entry's path under `<root>/quarantine` (the record's own path if it could not be moved). */
  path: string;
  /** Where the record was. */
  from: string;
  /** Why it could not be read. */
  error: string;
  /** When it was moved (ISO 8601). */
  at: string;
}

const WHY = '.why';

/** The entries in a quarantine dir (none when it does not exist). */
export async function readQuarantine(dir: string): Promise<QuarantineEntry[]> {
  const names = await readdir(dir).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return [] as string[];
    throw err;
  });
  const entries: QuarantineEntry[] = [];
  for (const name of names) {
    if (name.endsWith(WHY)) continue;
    const [kind, id, ms] = name.split('.');
    if (!KINDS.includes(kind as QuarantineKind) || !id || !/^\d+$/.test(ms ?? '')) continue;
    const why = await readFile(join(dir, name + WHY), 'utf8')
      .then((t) => JSON.parse(t) as { from?: unknown; error?: unknown })
      .catch(() => ({}) as { from?: unknown; error?: unknown });
    entries.push({
      kind: kind as QuarantineKind,
      id,
      path: join(dir, name),
      from: typeof why.from === 'string' ? why.from : '',
      error: typeof why.error === 'string' ? why.error : '',
      at: new Date(Number(ms)).toISOString(),
    });
  }
  return entries;
}

export class Quarantine {
  private readonly entries: QuarantineEntry[] = [];

  constructor(
    readonly dir: string,
    private readonly log: Logger,
  ) {}

  /** Loads the entries earlier runs made and logs each one: they still protect what they describe. */
  async load(): Promise<void> {
    await mkdir(this.dir, { recursive: true, mode: 0o700 });
    this.entries.push(...(await readQuarantine(this.dir)));
    for (const e of this.entries) {
      this.log.warn('a record is in quarantine: what it describes is left alone until it is repaired or removed', {
        kind: e.kind,
        id: e.id,
        entry: e.path,
        from: e.from,
      });
    }
  }

  /**
   * Moves an unreadable record out of the way and protects its ID. If even the move fails, the ID is
   * protected for this run and the record stays where it is.
   */
  async move(kind: QuarantineKind, id: string, path: string, cause: unknown): Promise<void> {
    const at = Date.now();
    const entry = join(this.dir, `${kind}.${id}.${at}.${basename(path)}`);
    const error = messageOf(cause);
    let moved = entry;
    try {
      await mkdir(this.dir, { recursive: true, mode: 0o700 });
      await writeFile(entry + WHY, JSON.stringify({ from: path, error }) + '\n', { mode: 0o600 });
      await rename(path, entry);
    } catch (err) {
      moved = path;
      this.log.error('cannot move an unreadable record to quarantine; it stays in place', { kind, id, path, error: messageOf(err) });
    }
    this.entries.push({ kind, id, path: moved, from: path, error, at: new Date(at).toISOString() });
    this.log.error(`unreadable ${kind} record moved to quarantine: its ${WHAT_IS_KEPT[kind]} are left alone`, { kind, id, from: path, to: moved, error });
  }

  has(kind: QuarantineKind, id: string): boolean {
    return this.entries.some((e) => e.kind === kind && e.id === id);
  }

  /** IDs of one kind in quarantine. */
  ids(kind: QuarantineKind): Set<string> {
    return new Set(this.entries.filter((e) => e.kind === kind).map((e) => e.id));
  }

  list(): QuarantineEntry[] {
    return [...this.entries];
  }
}

const WHAT_IS_KEPT: Record<QuarantineKind, string> = {
  sandbox: 'pause process, network namespace, IP addresses and files',
  container: 'processes, mounts and writable layer',
  image: 'layers and blobs',
  layer: 'files',
  hold: "image's layers",
};
