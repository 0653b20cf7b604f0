/**
 * Bundles the compiled daemon (dist/src, from tsc) into dist/bundle with esbuild, which `bin/stove serve`
 * runs. One file per lazily imported part instead of ~400 modules: the module loader's per-module
 * records, the resolution of every import (hot enough to be optimised at start-up, which faults in the
 * optimising compiler's pages of the node binary) and CommonJS interop go away, about 9 MiB of the idle
 * daemon's resident set (bench/README.md). Not minified, so stack traces name Stove's own functions;
 * the source maps lead back to the TypeScript sources (STOVE_SOURCE_MAPS=1).
 */
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { parse } from 'acorn';
import { build } from 'esbuild';

const outdir = 'dist/bundle';

/**
 * V8 keeps each script's source for lazy compilation, one byte per character unless a single character
 * is above U+00FF: then two bytes for all of it (the registry client's chunk: 1 MB, so 2 MiB resident).
 * esbuild escapes most strings to ASCII, and what remains above U+00FF is mostly in comments (an arrow,
 * a typographic apostrophe). acorn finds the comments, so a tagged template's raw text or a regular
 * expression that looks like one is never touched; each UTF-16 unit above U+00FF in a comment becomes
 * `?`, which keeps every column of the source maps. A character left elsewhere is reported, not changed.
 */
function oneByteSource(path, text) {
  const comments = [];
  parse(text, { ecmaVersion: 'latest', sourceType: 'module', onComment: (_block, _text, start, end) => comments.push([start, end]) });
  let out = '';
  let from = 0;
  for (const [start, end] of comments) {
    out += text.slice(from, start) + text.slice(start, end).replace(/[^\u0000-\u00ff]/g, '?');
    from = end;
  }
  out += text.slice(from);
  const left = out.match(/[^\u0000-\u00ff]/g)?.length ?? 0;
  if (left) console.warn(`bundle: ${path}: ${left} character(s) above U+00FF outside comments; V8 holds it at two bytes a character`);
  return out;
}

await rm(outdir, { recursive: true, force: true });
const { outputFiles } = await build({
  write: false,
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
for (const file of outputFiles) {
  await mkdir(dirname(file.path), { recursive: true });
  await writeFile(file.path, file.path.endsWith('.js') ? oneByteSource(file.path, file.text) : file.contents);
}
