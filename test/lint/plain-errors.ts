/**
 * Every error a client can see has a code chosen on purpose: a failure in src/ is a StoveError of a kind
 * (src/common/errors.ts), which api/errors.ts turns into the gRPC status, never a plain Error, which
 * would reach the client as UNKNOWN. This check, run by `make lint`, fails on a `throw new Error(` in
 * src/ and on an error class that does not extend StoveError, unless ALLOWED below names it with why it
 * never reaches a client as it is: an internal invariant, an error caught and turned into a StoveError
 * (or a rejection, a log line) where it says, or code that is not on a request path (the CLI, start-up).
 * An entry matches by file and a piece of the line's text, so it survives edits around it; an entry
 * that matches nothing any more fails the check too.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export interface Allowed {
  /** Relative to src/. */
  file: string;
  /** A piece of the line: the message's start, or `class Name`. */
  text: string;
  why: string;
}

const CAUGHT = 'caught in the same function, which turns it into a StoveError, a rejection or a log line';

export const ALLOWED: Allowed[] = [
  // Internal invariants: a caller in Stove broke a rule; no request can make them happen.
  { file: 'network/netns-exec.ts', text: 'netnsCommand needs a program', why: 'invariant: callers always pass a program' },
  { file: 'nri/mux.ts', text: 'mux connection id 0 is reserved', why: 'invariant: Stove opens connections with ids from 1' },

  // Not on a request path.
  { file: 'common/install-dir.ts', text: 'no package.json above', why: 'start-up: the daemon cannot start, main.ts prints it' },
  { file: 'cli/images.ts', text: 'pull: --password-stdin needs --username', why: 'CLI: printed to the operator' },
  { file: 'cli/images.ts', text: 'pull: the password on stdin is longer', why: 'CLI: printed to the operator' },
  { file: 'cli/images.ts', text: 'pull: --username needs --password-stdin', why: 'CLI: printed to the operator' },
  ...['is not of the form name=soft:hard', 'unknown rlimit', 'limit too large', 'is above the hard limit', 'is set twice'].map((text) => ({
    file: 'config/ulimits.ts',
    text,
    why: 'config: config/load.ts turns it into a ConfigError naming the file and key',
  })),
  { file: 'config/load.ts', text: 'class ConfigError', why: 'start-up and SIGHUP reload: main.ts prints it, a reload logs it; never a CRI answer' },

  // Caught where they are thrown, or at the boundary named.
  { file: 'persist/record-store.ts', text: 'not a ${this.kind} record for', why: `${CAUGHT} (the record is quarantined)` },
  { file: 'images/image-service.ts', text: "'not a hold'", why: `${CAUGHT} (the hold file is quarantined)` },
  { file: 'images/image-service.ts', text: 'its writable layer dir is not an absolute path', why: `${CAUGHT} (the hold file is quarantined)` },
  { file: 'images/image-store.ts', text: 'not the image record of', why: `${CAUGHT} (the record is quarantined)` },
  { file: 'storage/layers.ts', text: 'not the layer record of', why: `${CAUGHT} (the record is quarantined)` },
  { file: 'platform/config-dirs.ts', text: 'larger than ${max} bytes', why: 'readSmallFile: its callers (cdi/registry.ts, oci-hooks/registry.ts) reject the file and log why' },
  { file: 'images/trust/enforce.ts', text: 'larger than ${MAX_KEY_BYTES} bytes', why: `${CAUGHT} (failedPrecondition naming the key file)` },
  { file: 'nri/adaptation.ts', text: 'is larger than 1 MiB', why: 'pluginConfig: its caller logs it and does not start the plugin' },
  { file: 'network/cni-exec.ts', text: "'not a JSON object'", why: `${CAUGHT} (a CniError, or the plugin's failure message)` },
  { file: 'network/cni-args.ts', text: 'quantities must match the regular expression', why: 'parseQuantity: bandwidthFrom turns it into invalidArgument naming the annotation' },
  { file: 'oci-hooks/registry.ts', text: 'hook program ${hook.hook.path}', why: `${CAUGHT} (the hook file is skipped and logged)` },
  ...[
    'not valid JSON',
    'want a JSON object',
    'unsupported hook version',
    'missing required property: hook',
    'missing required property: hook.path',
    'must be absolute',
    'hook.timeout must be a positive integer',
    'missing required property: when',
    'must be true or false',
    'when.annotations must map key regexes',
    'when.annotations: value of',
    'when: at least one condition',
    'missing required property: stages',
    'unknown stage',
    'invalid ${what}',
    'must be a list of strings',
  ].map((text) => ({ file: 'oci-hooks/hook-file.ts', text, why: 'parseHookFile: oci-hooks/registry.ts skips the file and logs why' })),
  ...[
    'is not a JSON object',
    'has unknown field',
    'is missing "${k}"',
    'appears twice in one object',
    'payload "optional" is not a JSON object',
    'payload optional.timestamp is not an integer',
    'payload optional.creator is not a string',
    'unrecognised signature type',
    'invalid docker-manifest-digest',
    'docker-reference is not a string',
  ].map((text) => ({ file: 'images/trust/cosign.ts', text, why: 'parsePayload: images/trust/enforce.ts makes it the reason a signature is not accepted' })),
  ...[
    'truncated header block',
    'header block has ${count} entries',
    'header block has more than',
    "'frame too large'",
    'control frame of ${length} bytes is too large',
    'unsupported SPDY version',
    "'short SYN_STREAM'",
    "'short header frame'",
    "'short RST_STREAM'",
    "'short PING'",
  ].map((text) => ({ file: 'streaming/spdy.ts', text, why: 'SPDY framing: the session pump catches it and ends the connection with a protocol error' })),
  { file: 'storage/extract.ts', text: 'setting xattr ${name}', why: "unpack worker: reaches the pool as a LayerJobError ('io'), which images/pull.ts maps to Internal" },
  { file: 'storage/mknod-bridge.ts', text: 'no answer within', why: "unpack worker: reaches the pool as a LayerJobError ('io'), which images/pull.ts maps to Internal" },

  // Error classes of their own, mapped to a kind where they leave their module.
  { file: 'images/registry-client.ts', text: 'class EarlyEndError', why: 'registry-client.ts: caught there to retry a body that ended early' },
  { file: 'images/trust/policy.ts', text: 'class PolicyFormatError', why: 'images/trust/enforce.ts keeps its message as the policy error, which fails pulls with FailedPrecondition' },
  { file: 'nri/result.ts', text: 'class PluginConflictError', why: 'nri/adaptation.ts turns it into an NriPluginError (its code: InvalidArgument or FailedPrecondition)' },
  { file: 'nri/ttrpc-frame.ts', text: 'class TtrpcProtocolError', why: "nri/adaptation.ts's pluginError turns a plugin's failure into an NriPluginError" },
  { file: 'nri/ttrpc.ts', text: 'class TtrpcStatusError', why: "nri/adaptation.ts's pluginError turns a plugin's failure into an NriPluginError" },
  { file: 'nri/ttrpc.ts', text: 'class TtrpcFatalError', why: "nri/adaptation.ts's pluginError turns a plugin's failure into an NriPluginError" },
  { file: 'nri/ttrpc.ts', text: 'class TtrpcHandlerError', why: 'the ttrpc server answers the plugin with its status; no CRI call sees it' },
  { file: 'cdi/spec-file.ts', text: 'class SpecFileError', why: 'cdi/registry.ts rejects the spec file and lists why (stove check)' },
  { file: 'storage/tar-reader.ts', text: 'class TarFormatError', why: "unpack worker: reported as a LayerJobError ('format'), which images/pull.ts maps to FailedPrecondition" },
  { file: 'storage/extract.ts', text: 'class UnsafeEntryError', why: "unpack worker: reported as a LayerJobError ('unsafe'), which images/pull.ts maps to FailedPrecondition" },
  { file: 'storage/unpack-worker.ts', text: 'class CapError', why: "unpack worker: reported as a LayerJobError ('too-large', 'no-space'), which images/pull.ts maps to ResourceExhausted" },
  { file: 'storage/copy-tree.ts', text: 'class CopyLimitError', why: 'container/declared-volumes.ts turns it into FailedPrecondition naming the VOLUME' },
  { file: 'storage/copy-tree.ts', text: 'is not a directory', why: 'copyTree: container/declared-volumes.ts checks for a directory first and maps any failure to Internal naming the VOLUME' },
  { file: 'storage/unpack-pool.ts', text: 'class LayerJobError', why: 'images/pull.ts (layerError) and images/image-service.ts map each reason to a kind' },
];

export interface Found {
  file: string;
  line: number;
  text: string;
}

/** `throw new Error(` lines and error classes that do not extend StoveError, in one file's text. */
export function plainErrorsIn(file: string, text: string): Found[] {
  const out: Found[] = [];
  text.split('\n').forEach((line, i) => {
    if (/\bthrow new Error\(/.test(line) || /\bclass \w+ extends Error\b/.test(line)) {
      if (!/\bclass StoveError extends Error\b/.test(line)) out.push({ file, line: i + 1, text: line.trim() });
    }
  });
  return out;
}

/** What ALLOWED does not cover, and the entries that cover nothing. */
export function check(found: readonly Found[], allowed: readonly Allowed[]): string[] {
  const used = new Set<Allowed>();
  const problems: string[] = [];
  for (const f of found) {
    // The entry with the longest text that matches, so that one entry's text may contain another's.
    const entry = allowed
      .filter((a) => a.file === f.file && f.text.includes(a.text))
      .reduce<Allowed | undefined>((best, a) => (best && best.text.length >= a.text.length ? best : a), undefined);
    if (entry) used.add(entry);
    else
      problems.push(
        `src/${f.file}:${f.line}: ${f.text.slice(0, 120)}\n  -> throw a StoveError of a chosen kind (src/common/errors.ts), or list it in test/lint/plain-errors.ts with why it never reaches a client`,
      );
  }
  for (const a of allowed) if (!used.has(a)) problems.push(`test/lint/plain-errors.ts: the entry for src/${a.file} "${a.text}" matches nothing any more: remove it`);
  return problems;
}

/** Every .ts file under src/ but the generated code. */
export function readSources(src: string): Found[] {
  const out: Found[] = [];
  const walk = (dir: string): void => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) {
        if (relative(src, path) !== 'gen') walk(path);
      } else if (entry.name.endsWith('.ts')) out.push(...plainErrorsIn(relative(src, path).split('\\').join('/'), readFileSync(path, 'utf8')));
    }
  };
  walk(src);
  return out;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const problems = check(readSources(join(resolve(dirname(fileURLToPath(import.meta.url)), '../..'), 'src')), ALLOWED);
  for (const p of problems) console.error(`plain errors: ${p}`);
  if (problems.length > 0) process.exit(1);
}
