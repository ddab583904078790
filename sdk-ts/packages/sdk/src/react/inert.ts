// @appduct/sdk/react in builds without the `development`, `react-native` or `node` condition
// (§T8): the same hooks, doing nothing. It imports neither React nor the SDK core.

import type { AppductClient, ClientState, ToolDefinition } from "../core/types.js";
import type { AppductStateSnapshot, UseAppductToolOptions } from "./hooks.js";

const IDLE: AppductStateSnapshot = Object.freeze({ state: "idle" as ClientState, sessionId: null, alias: null });

/** Inert: registers nothing. */
export function useAppductTool<I, O>(_def: ToolDefinition<I, O>, _deps?: readonly unknown[], _options?: UseAppductToolOptions): void {
  // Nothing to do in an inert build.
}

/** Inert: always `idle` with no session. */
export function useAppductState(_client?: AppductClient): AppductStateSnapshot {
  return IDLE;
}

export type { AppductStateSnapshot, UseAppductToolOptions } from "./hooks.js";
export type { AppductClient, ClientState, ToolContext, ToolDefinition } from "../core/types.js";
