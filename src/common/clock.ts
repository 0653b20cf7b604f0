/** Time in nanoseconds since the epoch as bigint: the only form CRI timestamps take inside Stove. */

const wallBaseNs = BigInt(Date.now()) * 1_000_000n;
const monoBase = process.hrtime.bigint();

/**
 * Now, in nanoseconds since the epoch. Wall clock at start-up plus a monotonic offset, so successive
 * readings never go backwards and keep sub-millisecond resolution.
 */
export function nowNs(): bigint {
  return wallBaseNs + (process.hrtime.bigint() - monoBase);
}
