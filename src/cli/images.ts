/**
 * `stove pull` and `stove images`: talk to the running daemon over its CRI socket. While PullImage
 * runs, `pull` reads the progress snapshot the daemon keeps under `<state>/pulls/` and draws one bar
 * per layer on a terminal, or prints a line per layer state change otherwise.
 */
import { readFile } from 'node:fs/promises';
import { credentials, type ServiceError } from '@grpc/grpc-js';
import {
  ImageServiceClient,
  ListImagesRequest,
  PullImageRequest,
  type ListImagesResponse,
  type PullImageResponse,
} from '../gen/runtime/v1/api.js';
import { formatReference, parseReference } from '../images/reference.js';
import { progressFile, type PullSnapshot, type LayerProgress } from '../images/progress.js';

function client(socket: string): ImageServiceClient {
  return new ImageServiceClient(`unix://${socket}`, credentials.createInsecure(), {
    'grpc.default_authority': 'localhost',
    'grpc.max_receive_message_length': 16 << 20,
  });
}

function call<Req, Res>(fn: (req: Req, cb: (err: ServiceError | null, res: Res) => void) => unknown, req: Req): Promise<Res> {
  return new Promise((resolve, reject) => fn(req, (err, res) => (err ? reject(new Error(err.details || err.message)) : resolve(res))));
}

/** 1.11MB, 27.3kB: decimal units like crictl. */
export function humanSize(bytes: number): string {
  const units = ['B', 'kB', 'MB', 'GB', 'TB'];
  let n = bytes;
  let i = 0;
  while (n >= 1000 && i < units.length - 1) {
    n /= 1000;
    i++;
  }
  return `${i === 0 ? n : n.toPrecision(3)}${units[i]}`;
}

function bar(layer: LayerProgress, width = 30): string {
  const fraction = layer.size > 0 ? Math.min(1, layer.done / layer.size) : 1;
  const filled = Math.round(fraction * width);
  return `[${'='.repeat(Math.max(0, filled - 1))}${filled > 0 ? (fraction >= 1 ? '=' : '>') : ''}${' '.repeat(width - filled)}]`;
}

function layerLine(layer: LayerProgress): string {
  const id = layer.digest.slice(7, 19);
  switch (layer.state) {
    case 'present':
      return `${id}: already present`;
    case 'done':
      return `${id}: pulled ${humanSize(layer.size)}`;
    case 'waiting':
      return `${id}: waiting`;
    case 'failed':
      return `${id}: failed`;
    default:
      return `${id}: ${layer.state.padEnd(11)} ${bar(layer)} ${humanSize(layer.done)}/${humanSize(layer.size)}`;
  }
}

export interface CliTarget {
  socket: string;
  state: string;
}

export interface PullCredentials {
  username: string;
  password: string;
}

/** Longest password read from stdin (a registry token is a few KiB). */
const MAX_STDIN_PASSWORD = 64 * 1024;

/**
 * Credentials for `stove pull`, never from argv: `--username` with `--password-stdin` (the password is
 * stdin up to its first newline, as `docker login` reads it), else STOVE_PULL_USERNAME and
 * STOVE_PULL_PASSWORD from the environment, else none.
 */
export async function pullCredentials(
  flags: { username?: string; passwordStdin: boolean },
  env: NodeJS.ProcessEnv,
  stdin: NodeJS.ReadableStream,
): Promise<PullCredentials | undefined> {
  if (flags.passwordStdin) {
    const username = flags.username ?? env.STOVE_PULL_USERNAME;
    if (!username) throw new Error('pull: --password-stdin needs --username (or STOVE_PULL_USERNAME)');
    let text = '';
    for await (const chunk of stdin) {
      text += chunk.toString();
      if (text.length > MAX_STDIN_PASSWORD) throw new Error(`pull: the password on stdin is longer than ${MAX_STDIN_PASSWORD} bytes`);
    }
    return { username, password: text.replace(/\r?\n[\s\S]*$/, '') };
  }
  if (flags.username !== undefined) throw new Error('pull: --username needs --password-stdin (the password is never taken from the command line)');
  if (env.STOVE_PULL_USERNAME) return { username: env.STOVE_PULL_USERNAME, password: env.STOVE_PULL_PASSWORD ?? '' };
  return undefined;
}

/** `stove pull IMAGE`: returns the exit code. */
export async function cliPull(target: CliTarget, image: string, auth: PullCredentials | undefined, out: NodeJS.WriteStream): Promise<number> {
  const reference = formatReference(parseReference(image));
  const file = progressFile(target.state, reference);
  const started = Date.now();
  const tty = out.isTTY === true;
  let drawn = 0;
  const printed = new Map<string, string>();
  const render = async () => {
    let snapshot: PullSnapshot;
    try {
      snapshot = JSON.parse(await readFile(file, 'utf8')) as PullSnapshot;
    } catch {
      return;
    }
    if (snapshot.startedAt < started - 1000) return;
    if (tty) {
      const lines = snapshot.layers.map(layerLine);
      out.write((drawn ? `\x1b[${drawn}A` : '') + lines.map((l) => `\x1b[2K${l}\n`).join(''));
      drawn = lines.length;
    } else {
      for (const layer of snapshot.layers) {
        const state = layer.state === 'unpacking' ? 'downloading' : layer.state;
        if (printed.get(layer.digest) === state || state === 'waiting') continue;
        printed.set(layer.digest, state);
        out.write(`${state === 'downloading' ? `${layer.digest.slice(7, 19)}: downloading ${humanSize(layer.size)}` : layerLine(layer)}\n`);
      }
    }
  };
  const c = client(target.socket);
  const timer = setInterval(() => void render(), tty ? 100 : 500);
  try {
    const res = await call<PullImageRequest, PullImageResponse>(c.pullImage.bind(c), PullImageRequest.fromPartial({ image: { image }, auth }));
    clearInterval(timer);
    await render();
    out.write(`pulled ${reference} (${res.imageRef}) in ${((Date.now() - started) / 1000).toFixed(2)}s\n`);
    return 0;
  } catch (err) {
    clearInterval(timer);
    await render();
    process.stderr.write(`stove: ${(err as Error).message}\n`);
    return 1;
  } finally {
    c.close();
  }
}

/** `stove images`: a table like `crictl images`. */
export async function cliImages(target: CliTarget, out: NodeJS.WriteStream): Promise<number> {
  const c = client(target.socket);
  try {
    const res = await call<ListImagesRequest, ListImagesResponse>(c.listImages.bind(c), ListImagesRequest.fromPartial({}));
    const rows: string[][] = [['IMAGE', 'TAG', 'IMAGE ID', 'SIZE']];
    for (const img of res.images) {
      const id = img.id.replace(/^sha256:/, '').slice(0, 13);
      const size = humanSize(Number(img.size));
      const tags = img.repoTags.length ? img.repoTags : img.repoDigests.map((d) => `${d.slice(0, d.indexOf('@'))}:<none>`);
      if (tags.length === 0) rows.push(['<none>', '<none>', id, size]);
      for (const tag of tags) {
        const colon = tag.lastIndexOf(':');
        rows.push([tag.slice(0, colon), tag.slice(colon + 1), id, size]);
      }
    }
    const widths = rows[0]!.map((_c, i) => Math.max(...rows.map((r) => r[i]!.length)));
    for (const row of rows) out.write(row.map((cell, i) => (i === row.length - 1 ? cell : cell.padEnd(widths[i]! + 3))).join('') + '\n');
    return 0;
  } catch (err) {
    process.stderr.write(`stove: ${(err as Error).message}\n`);
    return 1;
  } finally {
    c.close();
  }
}
