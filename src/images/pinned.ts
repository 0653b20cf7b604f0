/**
 * Pinned images (`images.pinned`): references the kubelet's image GC must never remove. A pattern is an
 * exact reference (`registry.k8s.io/pause:3.10`, normalised as pulls are) or a prefix ending in `*`
 * (`registry.k8s.io/pause:*`), as CRI-O's `pinned_images`. Matched against an image's repo tags and
 * repo digests each time the image is reported, so a config reload applies at once.
 */
import { DEFAULT_DOMAIN, formatReference, parseReference } from './reference.js';

export interface PinnableImage {
  repoTags: readonly string[];
  repoDigests: readonly string[];
}

export class PinnedImages {
  private readonly exact = new Set<string>();
  private readonly prefixes: string[] = [];

  constructor(patterns: readonly string[]) {
    for (const pattern of patterns) {
      if (pattern.endsWith('*')) this.addPrefix(pattern.slice(0, -1));
      else this.exact.add(normalise(pattern));
    }
  }

  /** True when one of the image's names matches a pattern. */
  matches(image: PinnableImage): boolean {
    if (this.exact.size === 0 && this.prefixes.length === 0) return false;
    const names = [...image.repoTags, ...image.repoDigests];
    return names.some((n) => this.exact.has(n) || this.prefixes.some((p) => n.startsWith(p)));
  }

  /**
   * A prefix is matched as written and, when its first component is no registry host, also in
   * Docker Hub's normalised spelling (`busybox:*` → `docker.io/library/busybox:`).
   */
  private addPrefix(prefix: string): void {
    this.prefixes.push(prefix);
    const first = prefix.split('/')[0]!;
    const hasDomain = prefix.includes('/') && (first.includes('.') || first.includes(':') || first === 'localhost');
    if (hasDomain || prefix === '') return;
    this.prefixes.push(`${DEFAULT_DOMAIN}/${prefix}`);
    if (!prefix.includes('/')) this.prefixes.push(`${DEFAULT_DOMAIN}/library/${prefix}`);
  }
}

/** A reference in its normalised spelling; one that does not parse is kept as written. */
function normalise(reference: string): string {
  try {
    return formatReference(parseReference(reference));
  } catch {
    return reference;
  }
}
