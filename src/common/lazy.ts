/**
 * Parts of Stove imported on first use. When such a part cannot be loaded, most often because Stove's
 * files were rebuilt or upgraded under the running daemon (the bundle's chunk names change), the error
 * names the part and the remedy instead of only a module file the user never heard of.
 */
import { internal, messageOf } from './errors.js';

export async function loadPart<T>(part: string, load: () => Promise<T>): Promise<T> {
  try {
    return await load();
  } catch (err) {
    throw internal(`cannot load Stove's ${part} (were its files replaced while the daemon runs? restart it): ${messageOf(err)}`, err);
  }
}
