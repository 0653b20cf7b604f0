/**
 * Which pods sit under a cgroup parent level. A pod whose `cgroup_parent` did not exist brings its
 * missing levels into being (runc makes them) and records them, to remove them when it goes; but a
 * level may meanwhile hold other pods, stored or still being run. A level is removed only when no
 * other pod is under it: removing it while another pod's `runc create` makes its cgroup there fails
 * that pod ("mkdir …: no such file or directory"), as critest's pod benchmark showed, 4 pods at a time.
 */
import { cgroupParentPath } from '../platform/cgroups.js';

/** A cgroup_parent as a cgroup path (a systemd slice as its expanded path); undefined when invalid. */
function levelOf(parent: string): string | undefined {
  try {
    return cgroupParentPath(parent);
  } catch {
    return undefined;
  }
}

const isUnder = (parent: string, level: string): boolean => {
  const path = levelOf(parent);
  return path !== undefined && (path === level || path.startsWith(`${level}/`));
};

/** Who is asking to remove levels: a stored pod (by ID) or a run that failed (by its claim's parent). */
type Asker = { id?: string; claimedParent?: string };

/**
 * The pods under a level: the stored ones (`stored`) and the runs in flight (claimed here); and the
 * levels a pod made that were still in use when it went, removed with the last pod under them (known
 * only until a restart: an empty level left then is harmless).
 */
export class CgroupParentUsers {
  private readonly running: string[] = [];
  private readonly deferred = new Set<string>();

  constructor(private readonly stored: () => readonly { id: string; cgroupParent: string }[]) {}

  /** Counts a run under `parent` until the returned release is called (once; more calls do nothing). */
  claim(parent: string): () => void {
    this.running.push(parent);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.running.splice(this.running.indexOf(parent), 1);
    };
  }

  /**
   * Whether a pod other than the asking one has its cgroup parent at or below `level`. The asking pod is
   * left out by its stored ID, or by the parent of its own run's claim.
   */
  private usedByOthers(level: string, self: Asker): boolean {
    let runs = this.running.filter((p) => isUnder(p, level)).length;
    if (self.claimedParent !== undefined && isUnder(self.claimedParent, level)) runs--;
    return runs > 0 || this.stored().some((r) => r.id !== self.id && isUnder(r.cgroupParent, level));
  }

  /**
   * The levels to remove now, deepest first, for a pod under `parent` that goes (`made`: the levels it
   * brought into being): those and the deferred levels above it that no other pod is under. The rest
   * are deferred.
   */
  removable(parent: string, made: readonly string[], self: Asker): string[] {
    const candidates = new Set([...made, ...[...this.deferred].filter((level) => isUnder(parent, level))]);
    const now: string[] = [];
    for (const level of candidates) {
      if (this.usedByOthers(level, self)) this.deferred.add(level);
      else {
        this.deferred.delete(level);
        now.push(level);
      }
    }
    return now.sort((a, b) => b.split('/').length - a.split('/').length);
  }
}
