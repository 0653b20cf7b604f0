/**
 * The mocha hooks of a suite that needs the real machine (root, runc, conmon, a daemon…): skip it with
 * the reason printed when something is missing, set up before its tests, after each test put things
 * back and fail a passing test that left anything behind, and clean up after all of them (also after
 * a setup that failed half-way).
 */
export interface SuiteHooks {
  /** Printed as `skipping <what>: <reason>`. */
  what: string;
  /** Why the suite cannot run here, or undefined. */
  skipReason(): string | undefined | Promise<string | undefined>;
  setup(): Promise<void>;
  /** After each test: removes what it made. */
  tidy?(): Promise<void>;
  /** Then, after a passing test: what it left behind, which fails it. */
  leftovers?(): Promise<string[]>;
  cleanup(): Promise<void>;
}

/** Registers the hooks (call it in a `describe` body). */
export function suiteHooks(hooks: SuiteHooks): void {
  let ready = false;

  before(async function () {
    const reason = await hooks.skipReason();
    if (reason) {
      console.log(`    skipping ${hooks.what}: ${reason}`);
      this.skip();
    }
    await hooks.setup();
    ready = true;
  });

  afterEach(async function () {
    if (!ready) return;
    await hooks.tidy?.();
    if (this.currentTest?.state !== 'passed' || !hooks.leftovers) return;
    const left = await hooks.leftovers();
    if (left.length) throw new Error(`test left things behind: ${left.join('; ')}`);
  });

  after(async () => {
    await hooks.cleanup();
  });
}
