// The inert variant of `@appduct/sdk/react-native` that the Metro helper resolves that entry and
// `/react-native/auto` to in excluded builds (§T11.4): the inert app API (§T8) plus the
// inert hooks, so an app that imports `useAppductTool` from the entry still builds. Its module
// graph holds neither the session core nor `react-native`.

export * from "../inert/index.js";
export { useAppductTool, useAppductState } from "../react/inert.js";
export type { AppductStateSnapshot, UseAppductToolOptions } from "../react/hooks.js";
