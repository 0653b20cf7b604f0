/**
 * Bundles the compiled daemon (dist/src, from tsc) with esbuild into dist/bundle, which `bin/stove serve`
 * runs. One file per lazily imported part instead of ~400 modules: the module loader's per-module
 * records, the resolution of every import (hot enough to be optimised at start-up, which faults in the
 * optimising compiler's pages of the node binary) and CommonJS interop go away, about 9 MiB of the idle
 * daemon's resident set (bench/README.md). Not minified, so stack traces name Stove's own functions;
 * the source maps lead back to the TypeScript sources (STOVE_SOURCE_MAPS=1).
 *
 * A running daemon imports its lazily loaded parts (src/common/lazy.ts) from the directory it started
 * from long after the start, and a rebuild renames their chunks. So each build goes into a directory of
 * its own, dist/bundle-<hash of its files>/, written under a temporary name and renamed into place
 * whole, and dist/bundle is a symlink to the newest, replaced by a rename: a rebuild or an upgrade never
 * changes a file a daemon may still load. bin/stove starts the daemon from the link's target. Older
 * directories are removed, except the one the link named before (a daemon started from it moments ago)
 * and those a running process was started from (its command line names them).
 */
import { createHash } from 'node:crypto';
import { lstat, mkdir, readdir, readFile, readlink, realpath, rename, rm, symlink, writeFile } from 'node:fs/promises';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { parse } from 'acorn';
import { build } from 'esbuild';

const dist = 'dist';
const link = join(dist, 'bundle');
const BUNDLE_DIR = /^bundle-[0-9a-f]{16}$/;
/** A directory or link a build writes before renaming it into place, named with the build's pid. */
const TEMP_NAME = /^\.bundle(?:-[0-9a-f]{16})?\.(\d+)$/;

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

/** The bundle's files, as paths relative to its directory and their contents. */
async function bundleFiles() {
  const { outputFiles } = await build({
    write: false,
    // The unpack worker runs in worker threads (src/storage/unpack-pool.ts finds it next to its chunk).
    entryPoints: ['dist/src/main.js', 'dist/src/storage/unpack-worker.js'],
    entryNames: '[name]',
    // Where the paths in the source maps are relative to; every bundle directory sits next to it.
    outdir: link,
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
  return outputFiles
    .map((file) => ({
      path: relative(resolve(link), file.path),
      contents: file.path.endsWith('.js') ? Buffer.from(oneByteSource(file.path, file.text)) : Buffer.from(file.contents),
    }))
    .sort((a, b) => (a.path < b.path ? -1 : 1));
}

/** Writes the files into dist/<name> unless an identical build is there already; all or nothing. */
async function writeBundleDir(name, files) {
  const dir = join(dist, name);
  if (await lstat(dir).then(() => true, () => false)) return;
  const temp = join(dist, `.${name}.${process.pid}`);
  await rm(temp, { recursive: true, force: true });
  for (const file of files) {
    await mkdir(dirname(join(temp, file.path)), { recursive: true });
    await writeFile(join(temp, file.path), file.contents);
  }
  await rename(temp, dir).catch(async (err) => {
    await rm(temp, { recursive: true, force: true });
    // The same build renamed into place by a concurrent `make build`.
    if (err.code !== 'ENOTEMPTY' && err.code !== 'EEXIST') throw err;
  });
}

/** Points dist/bundle at dist/<name> in one rename; returns the directory it named before, if any. */
async function switchLink(name) {
  const before = await lstat(link).catch(() => undefined);
  let previous;
  if (before?.isSymbolicLink()) previous = await readlink(link);
  // dist/bundle as a plain directory, as builds made it before they went into directories of their own.
  else if (before) await rm(link, { recursive: true, force: true });
  const temp = join(dist, `.bundle.${process.pid}`);
  await rm(temp, { force: true });
  await symlink(name, temp);
  await rename(temp, link);
  return previous;
}

/** The bundle directories under `distDir` that the command line of a running process names. */
async function bundleDirsInUse(distDir) {
  const used = new Set();
  const prefix = distDir + sep;
  for (const pid of (await readdir('/proc')).filter((entry) => /^\d+$/.test(entry))) {
    const cmdline = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
    for (const arg of cmdline.split('\0')) if (arg.startsWith(prefix)) used.add(arg.slice(prefix.length).split(sep)[0]);
  }
  return used;
}

/** Removes the bundle directories not in `keep` that no process runs from, and what interrupted builds left. */
async function prune(keep) {
  // What the link names now: a concurrent `make build` of other files may have switched it since.
  const current = await readlink(link).catch(() => undefined);
  const inUse = await bundleDirsInUse(await realpath(dist));
  for (const entry of await readdir(dist)) {
    const unused = BUNDLE_DIR.test(entry) && !keep.includes(entry) && entry !== current && !inUse.has(entry);
    const builder = TEMP_NAME.exec(entry)?.[1];
    const abandoned = builder !== undefined && !(await lstat(`/proc/${builder}`).then(() => true, () => false));
    if (unused || abandoned) await rm(join(dist, entry), { recursive: true, force: true });
  }
}

const files = await bundleFiles();
const hash = createHash('sha256');
for (const file of files) hash.update(`${file.path}\0${file.contents.length}\0`).update(file.contents);
const name = `bundle-${hash.digest('hex').slice(0, 16)}`;
await writeBundleDir(name, files);
const previous = await switchLink(name);
await prune([name, previous]);
