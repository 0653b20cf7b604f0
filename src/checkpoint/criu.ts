/**
 * Whether this node can checkpoint and restore: runc does both through CRIU (the `criu` on PATH), and
 * `criu check` says whether the kernel has what CRIU needs. The answer is cached for a while: Status
 * asks on every call and `criu check` takes a second or so.
 */
import { failedPrecondition } from '../common/errors.js';
import { runCommand } from '../platform/processes.js';

export interface CriuSupport {
  ok: boolean;
  /** `criu --version`'s version, when CRIU runs at all. */
  version?: string;
  /** Why not, in a form a person can act on (or "criu <version>: criu check passed"). */
  message: string;
}

const CHECK_TIMEOUT_MS = 30_000;
const CACHE_MS = 5 * 60_000;

/** Runs `criu --version` and `criu check`. */
export async function probeCriu(criu = 'criu'): Promise<CriuSupport> {
  const version = await runCommand(criu, { args: ['--version'], timeoutMs: CHECK_TIMEOUT_MS, maxOutputBytes: 4096 });
  if (version.spawnError) {
    const why = (version.spawnError as NodeJS.ErrnoException).code === 'ENOENT' ? `no "${criu}" on PATH` : `cannot run "${criu}": ${version.spawnError.message}`;
    return { ok: false, message: `CRIU is not installed (${why}); install it (Debian: apt-get install criu) to checkpoint and restore containers` };
  }
  const v = /Version:\s*(\S+)/.exec(version.stdout)?.[1];
  const check = await runCommand(criu, { args: ['check'], timeoutMs: CHECK_TIMEOUT_MS, maxOutputBytes: 64 * 1024 });
  if (check.exitCode === 0) return { ok: true, version: v, message: `criu ${v ?? '(unknown version)'}: criu check passed` };
  const said = `${check.stderr}\n${check.stdout}`
    .split('\n')
    .map((l) => l.trim())
    .filter(Boolean)
    .slice(-3)
    .join('; ');
  const why = check.timedOut ? `timed out after ${CHECK_TIMEOUT_MS} ms` : said || `exit status ${check.exitCode ?? check.signal}`;
  return { ok: false, version: v, message: `criu check fails on this kernel (criu ${v ?? '?'}: ${why}); checkpoint and restore need a kernel CRIU supports` };
}

/** The cached probe the daemon shares. */
export class CriuProbe {
  private cached?: { at: number; support: Promise<CriuSupport> };

  constructor(
    private readonly probe: () => Promise<CriuSupport> = () => probeCriu(),
    private readonly now: () => number = Date.now,
  ) {}

  support(): Promise<CriuSupport> {
    const c = this.cached;
    if (c && this.now() - c.at < CACHE_MS) return c.support;
    const support = this.probe();
    this.cached = { at: this.now(), support };
    return support;
  }

  /** FAILED_PRECONDITION naming what is missing, unless checkpoints work here. */
  async require(what: string): Promise<void> {
    const s = await this.support();
    if (!s.ok) throw failedPrecondition(`cannot ${what}: ${s.message}`);
  }
}
