/**
 * Checkpoint images: an OCI image whose one layer holds a checkpoint archive's files (what
 * `buildah add` of the archive, or `checkpointctl build`, makes), marked by a manifest annotation
 * that names the checkpointed container: CRI-O's, or checkpointctl's. A kubelet restores from one
 * with an ordinary pod whose image it is, since an image reference is all a pod spec can name.
 */
import { failedPrecondition } from '../common/errors.js';

export const CHECKPOINT_IMAGE_ANNOTATIONS = ['io.kubernetes.cri-o.annotations.checkpoint.name', 'org.criu.checkpoint.container.name'] as const;

/** The checkpointed container's name when the manifest annotations mark a checkpoint image. */
export function checkpointImageName(annotations: Readonly<Record<string, string>>): string | undefined {
  for (const key of CHECKPOINT_IMAGE_ANNOTATIONS) if (key in annotations) return annotations[key];
  return undefined;
}

/** The one layer of a checkpoint image (its blob); FAILED_PRECONDITION for any other count. */
export function checkpointImageLayer(imageName: string, layerBlobs: readonly string[]): string {
  if (layerBlobs.length !== 1) {
    throw failedPrecondition(`checkpoint image "${imageName}" has ${layerBlobs.length} layers: a checkpoint image holds the archive's files in exactly one`);
  }
  return layerBlobs[0]!;
}
