/** Running the steps of a multi-step operation side by side. */

/** Waits for every task; once all have settled, throws the first failure (in task order). */
export async function settleAll<T extends readonly unknown[]>(tasks: { [K in keyof T]: Promise<T[K]> }): Promise<T> {
  // allSettled, not all: a step still running when another fails must finish registering its undo
  // before the cleanup unwinds.
  const results = await Promise.allSettled(tasks);
  const failed = results.find((r) => r.status === 'rejected');
  if (failed) throw (failed as PromiseRejectedResult).reason;
  return results.map((r) => (r as PromiseFulfilledResult<unknown>).value) as unknown as T;
}
