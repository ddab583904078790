// @appduct/sdk/inert: the app API with every function inert (§T8). It opens no socket,
// defines no global and imports none of the session core.

import { bindAppApi } from "../core/app-api.js";
import { setDefaultClient } from "../core/default-client.js";
import { inertClient } from "./client.js";

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
} = bindAppApi(inertClient);

// Weakly: React hooks fall back to it only when no platform entry registered a client.
setDefaultClient(inertClient, { entry: "@appduct/sdk/inert", weak: true });

export { AppductToolError, AppductRegistrationError, AppductConnectError, AppductDisabledError } from "../core/errors.js";
export { jsonSchema } from "../core/standard-schema.js";
export { image, text, resourceLink, toolContent } from "../core/content.js";
export type * from "../core/types.js";
export type { WireToolDescriptor, ToolAnnotations } from "../core/descriptors.js";
export type { StandardSchemaV1, ToolSchema, JsonSchemaObject, SchemaPair, TypedJsonSchema } from "../core/standard-schema.js";
