// @appduct/sdk/node: the app API for Node processes over `wss://` with pin verification
// (§T10). Active per APPDUCT_ENABLED / NODE_ENV; otherwise every function is inert.

import os from "node:os";

import { bindAppApi } from "../core/app-api.js";
import { createAppductClient } from "../core/client.js";
import { setDefaultClient } from "../core/default-client.js";
import type { AppductClient } from "../core/types.js";
import { inertClient } from "../inert/client.js";
import { isNodeEntryEnabled, pinsFromEnv } from "./enabled.js";
import { createNodeTransport } from "./transport.js";

function createNodeClient(): AppductClient {
  const client = createAppductClient({
    transport: createNodeTransport(),
    device: { model: "Node.js", os: `${os.type()} ${os.release()}` },
    dev: process.env.NODE_ENV !== "production",
    defaultTransport: "native",
  });
  const pins = pinsFromEnv(process.env);
  if (pins.length > 0) client.configureAppduct({ trust: "pin", pins });
  return client;
}

const client = isNodeEntryEnabled(process.env) ? createNodeClient() : inertClient;
setDefaultClient(client, { entry: "@appduct/sdk/node", dev: process.env.NODE_ENV !== "production" });

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
} = bindAppApi(client);

export { pinFromCertificateDer } from "./pin.js";
export { AppductToolError, AppductRegistrationError, AppductConnectError, AppductDisabledError } from "../core/errors.js";
export { jsonSchema } from "../core/standard-schema.js";
export { image, text, resourceLink, toolContent } from "../core/content.js";
export type * from "../core/types.js";
export type { WireToolDescriptor, ToolAnnotations } from "../core/descriptors.js";
export type { StandardSchemaV1, ToolSchema, JsonSchemaObject, SchemaPair, TypedJsonSchema } from "../core/standard-schema.js";
