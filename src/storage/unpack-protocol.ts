/** Messages between the main thread (UnpackPool) and an unpack worker. */
import type { EntryPolicy, LayerUsage } from './extract.js';
import type { MknodRequest } from './mknod-bridge.js';

export interface UnpackJob {
  /** Algorithm of the blob's digest. */
  digestAlgorithm: 'sha256' | 'sha512';
  /** Write the raw bytes here (a new file); omitted when the blob is already stored. */
  blobPath?: string;
  /** fdatasync the blob file before reporting. */
  sync?: boolean;
  /** Read the input from this file instead of from posted chunks. */
  sourcePath?: string;
  /** Extract the layer into this existing, empty directory. */
  unpackDir?: string;
  /** A char device 0:0 on the same filesystem, hardlinked for each whiteout. */
  whiteoutTemplate?: string;
  /** The layer's tar stream may be at most this many bytes (`images.max_layer_size`). */
  maxTarBytes?: number;
  /** Stricter entry rules for an archive that is not an image layer (absent: a layer's). */
  policy?: EntryPolicy;
  /** Stop when fewer bytes than this stay free on the unpack dir's filesystem (`images.min_free_space`). */
  minFreeBytes?: number;
}

/** Why a job failed: an entry tried to leave the layer, not a valid layer, a size or space cap, anything else. */
export type FailureReason = 'unsafe' | 'format' | 'too-large' | 'no-space' | 'io';

export interface UnpackResult {
  /** Digest of the raw bytes (`sha256:…`). */
  digest: string;
  size: number;
  /** sha256 of the uncompressed tar, when unpacked. */
  diffId?: string;
  usage?: LayerUsage;
  /** Bytes of the uncompressed tar stream, when unpacked. */
  tarBytes?: number;
  /** The bytes could not be decompressed or parsed as tar (reported after the digest is known). */
  decodeError?: string;
}

export type WorkerRequest =
  | { type: 'start'; job: UnpackJob }
  | { type: 'chunk'; data: ArrayBuffer; length: number }
  | { type: 'end' }
  | { type: 'abort' };

export type WorkerReply =
  | { type: 'ack'; bytes: number }
  | { type: 'done'; result: UnpackResult }
  | { type: 'error'; message: string; reason: FailureReason }
  | { type: 'aborted' }
  | MknodRequest;
