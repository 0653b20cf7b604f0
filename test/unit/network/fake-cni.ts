/**
 * Test harness around test/fixtures/cni/fake-cni.sh: a temp bin dir whose plugins are symlinks to the
 * fake, a control dir the fake reads its answers from, and readers for what each call received.
 */
import { mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

export const FAKE_CNI_SCRIPT = resolve(import.meta.dirname, '../../../../test/fixtures/cni/fake-cni.sh');

export interface FakeAnswer {
  out?: unknown;
  err?: string;
  exit?: number;
  sleep?: number;
}

export class FakeCni {
  private constructor(
    readonly root: string,
    readonly binDir: string,
    readonly controlDir: string,
  ) {}

  /** Installs the fake under each of `names` and points STOVE_FAKE_CNI_DIR at a fresh control dir. */
  static async create(names: string[]): Promise<FakeCni> {
    const root = await mkdtemp(join(tmpdir(), 'stove-fake-cni-'));
    const fake = new FakeCni(root, join(root, 'bin'), join(root, 'control'));
    await mkdir(fake.binDir);
    await mkdir(fake.controlDir);
    for (const name of names) await symlink(FAKE_CNI_SCRIPT, join(fake.binDir, name));
    process.env.STOVE_FAKE_CNI_DIR = fake.controlDir;
    return fake;
  }

  /** What plugin `name` answers to `command`. */
  async answer(name: string, command: string, answer: FakeAnswer): Promise<void> {
    const base = join(this.controlDir, `${name}.${command}`);
    if (answer.out !== undefined) await writeFile(`${base}.out`, typeof answer.out === 'string' ? answer.out : JSON.stringify(answer.out));
    if (answer.err !== undefined) await writeFile(`${base}.err`, answer.err);
    if (answer.exit !== undefined) await writeFile(`${base}.exit`, String(answer.exit));
    if (answer.sleep !== undefined) await writeFile(`${base}.sleep`, String(answer.sleep));
  }

  /** Removes every prepared answer of `name` for `command`. */
  async clearAnswer(name: string, command: string): Promise<void> {
    for (const ext of ['out', 'err', 'exit', 'sleep']) await rm(join(this.controlDir, `${name}.${command}.${ext}`), { force: true });
  }

  /** "<plugin> <COMMAND>" per call, in order. */
  async calls(): Promise<string[]> {
    const text = await readFile(join(this.controlDir, 'calls.log'), 'utf8').catch(() => '');
    return text.split('\n').filter(Boolean);
  }

  /** The parsed stdin of call `n` (1-based). */
  async stdin(n: number): Promise<Record<string, unknown>> {
    return JSON.parse(await readFile(join(this.controlDir, `call-${n}.stdin`), 'utf8')) as Record<string, unknown>;
  }

  /** The CNI_* environment of call `n`. */
  async env(n: number): Promise<Record<string, string>> {
    const text = await readFile(join(this.controlDir, `call-${n}.env`), 'utf8');
    const env: Record<string, string> = {};
    for (const line of text.split('\n').filter(Boolean)) {
      const eq = line.indexOf('=');
      env[line.slice(0, eq)] = line.slice(eq + 1);
    }
    return env;
  }

  async cleanup(): Promise<void> {
    delete process.env.STOVE_FAKE_CNI_DIR;
    await rm(this.root, { recursive: true, force: true });
  }
}
