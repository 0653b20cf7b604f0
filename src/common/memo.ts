/**
 * `build` run once per key object, the result kept as long as the key lives. For records, which are
 * replaced on every change and never modified in place, so a cached result cannot go stale; callers
 * must not modify what it returns.
 */
export function oncePerObject<K extends object, T>(build: (key: K) => T): (key: K) => T {
  const built = new WeakMap<K, T>();
  return (key) => {
    if (built.has(key)) return built.get(key)!;
    const value = build(key);
    built.set(key, value);
    return value;
  };
}
