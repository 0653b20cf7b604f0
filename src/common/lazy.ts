/**
 * Parts of Stove imported on first use. A rebuild or an upgrade leaves the files of a running daemon's
 * bundle alone (scripts/bundle.mjs); when such a part cannot be loaded all the same, because its files
 * were removed under the running daemon, the error names the part and the remedy instead of only a
 * module file the user never heard of.
 */
import { internal, messageOf } from './errors.js';

export async function loadPart<T>(part: string, load: () => Promise<T>): Promise<T> {
  try {
    return await load();
  } catch (err) {
    throw internal(`cannot load Stove's ${part} (were its files removed while the daemon runs? restart it): ${messageOf(err)}`, err);
  }
}
