// Sets `globalThis.__APPDUCT_ENABLED__ = true` (§T11.4), which keeps the React Native entry
// active when `__DEV__` is false. Imported first by the variants the Metro helper resolves the
// entries to in included builds, so it runs before the entry builds its client.

(globalThis as { __APPDUCT_ENABLED__?: unknown }).__APPDUCT_ENABLED__ = true;

export {};
