// @appduct/sdk/web/enabled: the real browser entry in any build (§T8, §T9); development
// checks follow NODE_ENV. Without `window` (server-side rendering) it opens nothing.

import { webEntry } from "./entry.js";

/**
 * `NODE_ENV !== "production"`. Written as `process.env.NODE_ENV` so bundlers substitute it; a
 * browser without a bundler has no `process` and counts as development.
 */
function isDevelopment(): boolean {
  try {
    return process.env.NODE_ENV !== "production";
  } catch {
    return true;
  }
}

export const {
  registerTool,
  createToolGroup,
  registerEvent,
  postEvent,
  connect,
  disconnect,
  handleUrl,
  restoreSession,
  getAppductState,
  getSessionId,
  getSessionAlias,
  getRegisteredTools,
  addAppductListener,
  configureAppduct,
  appductClient,
} = webEntry(isDevelopment());

export { AppductToolError, AppductRegistrationError, AppductConnectError, AppductDisabledError } from "../core/errors.js";
export { jsonSchema } from "../core/standard-schema.js";
export { image, text, resourceLink, toolContent } from "../core/content.js";
export type * from "../core/types.js";
export type { WireToolDescriptor, ToolAnnotations } from "../core/descriptors.js";
export type { StandardSchemaV1, ToolSchema, JsonSchemaObject, SchemaPair, TypedJsonSchema } from "../core/standard-schema.js";
