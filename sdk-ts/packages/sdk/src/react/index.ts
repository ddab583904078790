// @appduct/sdk/react (§T12): `useAppductTool` and `useAppductState`. Without an explicit
// client they use the client of the platform entry imported first (web, Node or React Native).
// Resolves here under the `development`, `react-native` and `node` conditions and through
// `@appduct/sdk/react/enabled`; other builds get the inert hooks (src/react/inert.ts).

import { getDefaultClient } from "../core/default-client.js";
import { createAppductHooks } from "./hooks.js";

/** `NODE_ENV !== "production"`; a runtime without `process` counts as development. */
function isDevelopment(): boolean {
  try {
    return process.env.NODE_ENV !== "production";
  } catch {
    return true;
  }
}

let warned = false;

export const { useAppductTool, useAppductState } = createAppductHooks(getDefaultClient, () => {
  if (warned || !isDevelopment()) return;
  warned = true;
  console.warn(
    "appduct: useAppductTool/useAppductState found no client: import @appduct/sdk/web, /node or /react-native (or pass options.client); the hook does nothing.",
  );
});

export type { AppductStateSnapshot, UseAppductToolOptions } from "./hooks.js";
export type { AppductClient, ClientState, ToolContext, ToolDefinition } from "../core/types.js";
