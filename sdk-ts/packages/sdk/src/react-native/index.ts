// @appduct/sdk/react-native (§T11): the app API for React Native, JavaScript only, over the
// daemon's loopback web listener; plus useAppductTool and useAppductState bound to its client.
// No side effects beyond building the client: `@appduct/sdk/react-native/auto` installs the
// deep-link and AppState listeners.

import { Platform } from "react-native";

import { bindAppApi } from "../core/app-api.js";
import { setDefaultClient } from "../core/default-client.js";
import { createAppductHooks } from "../react/hooks.js";
import { reactNativeEntryClient } from "./client.js";

const globals = globalThis as { __DEV__?: unknown; __APPDUCT_ENABLED__?: unknown };
const client = reactNativeEntryClient(Platform, globals);
setDefaultClient(client, { entry: "@appduct/sdk/react-native", dev: globals.__DEV__ !== false });

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

export const { useAppductTool, useAppductState } = createAppductHooks(
  () => client,
  () => undefined,
);

export { AppductToolError, AppductRegistrationError, AppductConnectError, AppductDisabledError } from "../core/errors.js";
export { jsonSchema } from "../core/standard-schema.js";
export { image, text, resourceLink, toolContent } from "../core/content.js";
export type * from "../core/types.js";
export type { WireToolDescriptor, ToolAnnotations } from "../core/descriptors.js";
export type { StandardSchemaV1, ToolSchema, JsonSchemaObject, SchemaPair, TypedJsonSchema } from "../core/standard-schema.js";
export type { AppductStateSnapshot, UseAppductToolOptions } from "../react/hooks.js";
