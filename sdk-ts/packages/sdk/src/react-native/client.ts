// The React Native client (07 §7.11): JavaScript only, over React Native's global WebSocket to
// the daemon's loopback web listener (`ws://127.0.0.1:<webPort>/`), lease in memory. Inert when
// `__DEV__` is false unless `globalThis.__APPDUCT_ENABLED__ === true` (07 §7.11.4).

import { createAppductClient } from "../core/client.js";
import type { AppductClient } from "../core/types.js";
import { inertClient } from "../inert/client.js";
import { createWebSocketTransport, type WebSocketConstructor } from "../web/transport.js";
import { reactNativeDevice, type PlatformLike } from "./device.js";

/** Why this entry follows only loopback web-transport links; appended to `unsupported_link`. */
export const REACT_NATIVE_LINK_HINT =
  "React Native's JavaScript WebSocket cannot verify the daemon's pinned certificate, so this entry only reaches the daemon's " +
  "loopback web listener: an Android emulator or USB-connected phone through adb reverse, or the iOS simulator. Mint a " +
  "web-transport link (appduct sessions link --transport web). Physical iOS devices and devices reached over the network " +
  "need the pinning native core of an appduct v2 native SDK.";

interface RuntimeFlags {
  __DEV__?: unknown;
  __APPDUCT_ENABLED__?: unknown;
}

/** Active unless `__DEV__` is `false`; `__APPDUCT_ENABLED__ === true` (Metro helper) forces it on. */
export function isReactNativeEntryEnabled(globals: RuntimeFlags): boolean {
  return globals.__DEV__ !== false || globals.__APPDUCT_ENABLED__ === true;
}

export interface ReactNativeClientOptions {
  platform: PlatformLike;
  /** The WebSocket class; default React Native's global `WebSocket`. */
  webSocket?: () => WebSocketConstructor | undefined;
  dev: boolean;
}

/** A real client for React Native. */
export function createReactNativeClient(options: ReactNativeClientOptions): AppductClient {
  return createAppductClient({
    transport: createWebSocketTransport(options.webSocket, { anyCloseCode: true }),
    device: reactNativeDevice(options.platform),
    dev: options.dev,
    defaultTransport: "web",
    allowedTransports: ["web"],
    refusePinnedLinks: true,
    unsupportedLinkHint: REACT_NATIVE_LINK_HINT,
  });
}

/** The entry's client: real or inert per the runtime flags. */
export function reactNativeEntryClient(platform: PlatformLike, globals: RuntimeFlags): AppductClient {
  if (!isReactNativeEntryEnabled(globals)) return inertClient;
  return createReactNativeClient({ platform, dev: globals.__DEV__ !== false });
}
