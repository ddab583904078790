// Definitions that replace their own earlier registration on purpose (the React hook
// re-registering after its definition changed, §T12): the core skips the development warning
// about a name registered twice for them. A WeakSet, so marking never keeps a definition alive.

const intentional = new WeakSet<object>();

/** Marks `def` as replacing the caller's own registration of the same name; returns it. */
export function markIntentionalReplace<T extends object>(def: T): T {
  intentional.add(def);
  return def;
}

export function isIntentionalReplace(def: unknown): boolean {
  return typeof def === "object" && def !== null && intentional.has(def);
}
