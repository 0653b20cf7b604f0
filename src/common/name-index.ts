/**
 * Name reservation: a pod or container name maps to at most one ID. Reserved before any side effect of a
 * create, released when the create fails or the object is removed.
 */
import { alreadyExists } from './errors.js';

export class NameIndex {
  private readonly byName = new Map<string, string>();

  /** Reserves `name` for `id`; ALREADY_EXISTS naming the holder when it is taken by another ID. */
  reserve(name: string, id: string, what: string): void {
    const holder = this.byName.get(name);
    if (holder !== undefined && holder !== id)
      throw alreadyExists(`${what} name "${name}" is reserved for ${holder}; remove it before creating another with the same name`);
    this.byName.set(name, id);
  }

  /** Releases `name` if `id` holds it. */
  release(name: string, id: string): void {
    if (this.byName.get(name) === id) this.byName.delete(name);
  }

  holder(name: string): string | undefined {
    return this.byName.get(name);
  }
}
