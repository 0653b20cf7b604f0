/**
 * Bundles the compiled daemon (dist/src, from tsc) into dist/bundle with esbuild, which `bin/stove serve`
 * runs. One file per lazily imported part instead of ~400 modules: the module loader's per-module
 * records, the resolution of every import (hot enough to be optimised at start-up, which faults in the
 * optimising compiler's pages of the node binary) and CommonJS interop go away, about 9 MiB of the idle
 * daemon's resident set (bench/README.md). Not minified, so stack traces name Stove's own functions;
 * the source maps lead back to the TypeScript sources (STOVE_SOURCE_MAPS=1).
 */
import { rm } from 'node:fs/promises';
import { build } from 'esbuild';

const outdir = 'dist/bundle';
await rm(outdir, { recursive: true, force: true });
await build({
  // The unpack worker runs in worker threads (src/storage/unpack-pool.ts finds it next to its chunk).
  entryPoints: ['dist/src/main.js', 'dist/src/storage/unpack-worker.js'],
  entryNames: '[name]',
  outdir,
  bundle: true,
  splitting: true,
  format: 'esm',
  platform: 'node',
  target: 'node22',
  // A native addon, and what grpc-js requires only for its channelz and ORCA services, which Stove does
  // not serve (protobufjs and its loader, ~400 kB of source the daemon would otherwise hold): both are
  // loaded from node_modules as they are, if ever.
  external: ['@napi-rs/xattr', '@grpc/proto-loader'],
  sourcemap: 'linked',
  // CommonJS dependencies (grpc-js) require Node's built-in modules.
  banner: { js: "import { createRequire as __stoveCreateRequire } from 'node:module'; const require = __stoveCreateRequire(import.meta.url);" },
  logLevel: 'warning',
});
