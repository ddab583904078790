// @appduct/sdk/web under the `development` condition (and /web/enabled): the real browser entry
// (§T9). Without `window` (server-side rendering) it opens nothing.

import { webEntry } from "./entry.js";

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
} = webEntry(true);

export { AppductToolError, AppductRegistrationError, AppductConnectError, AppductDisabledError } from "../core/errors.js";
export { jsonSchema } from "../core/standard-schema.js";
export { image, text, resourceLink, toolContent } from "../core/content.js";
export type * from "../core/types.js";
export type { WireToolDescriptor, ToolAnnotations } from "../core/descriptors.js";
export type { StandardSchemaV1, ToolSchema, JsonSchemaObject, SchemaPair, TypedJsonSchema } from "../core/standard-schema.js";
