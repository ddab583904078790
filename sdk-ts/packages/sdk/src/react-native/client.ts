// The React Native client (§T11; issue #23): JavaScript only, over React Native's global
// WebSocket. Sealed links (`appduct sessions link --for react-native`) open the sealed transport
// to the daemon's LAN address (a Noise channel: Wi-Fi, USB, simulators); web links keep the
// loopback web listener (`ws://127.0.0.1:<webPort>/`: simulator, emulator, adb reverse). Native
// (pinned) links are refused with `unsupported_link`, and the daemon is told so. The lease lives
// in memory unless the app configures a storage adapter. Inert when `__DEV__` is false unless
// `globalThis.__APPDUCT_ENABLED__ === true` (§T11.4).

import { createAppductClient } from "../core/client.js";
import type { SealedRandom } from "../core/sealed/random.js";
import type { AppductClient, LinkRefusal } from "../core/types.js";
import { inertClient } from "../inert/client.js";
import { createWebSocketRefusalSender } from "../web/refusal.js";
import { createSealedWebSocketTransport } from "../web/sealed-transport.js";
import { createWebSocketTransport, type WebSocketConstructor } from "../web/transport.js";
import { reactNativeDevice, type PlatformLike } from "./device.js";

/** Why this entry refuses some links; appended to `unsupported_link` messages. */
export const REACT_NATIVE_LINK_HINT =
  "React Native's JavaScript SDK cannot verify a pinned certificate, so it does not follow native (wss) links. Mint a link " +
  "for this app with `appduct sessions link --for react-native` (a sealed link: an encrypted channel the JavaScript SDK " +
  "opens itself, for a phone on Wi-Fi or USB, a simulator or an emulator), or run `appduct init` in the app's project so " +
  "that links default to it.";

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
  /** Tests: the sealed transport's randomness (default: `crypto.getRandomValues`, else a DRBG). */
  random?: SealedRandom;
  /** Tests: each sealed handshake's rng source, each refusal's outcome. */
  onSealedHandshake?: (info: { rng: "csprng" | "drbg" }) => void;
  onRefusalSent?: (refusal: LinkRefusal, outcome: { code?: number; reason?: string; error?: string }) => void;
}

/** A real client for React Native. */
export function createReactNativeClient(options: ReactNativeClientOptions): AppductClient {
  const plain = createWebSocketTransport(options.webSocket, { anyCloseCode: true });
  const sealed = createSealedWebSocketTransport(options.webSocket, {
    ...(options.random ? { random: options.random } : {}),
    ...(options.onSealedHandshake ? { onHandshake: options.onSealedHandshake } : {}),
  });
  return createAppductClient({
    transport: (target) => (target.transport === "sealed" ? sealed(target) : plain(target)),
    device: reactNativeDevice(options.platform),
    dev: options.dev,
    defaultTransport: "web",
    allowedTransports: ["web", "sealed"],
    refusePinnedLinks: true,
    unsupportedLinkHint: REACT_NATIVE_LINK_HINT,
    sendLinkRefusal: createWebSocketRefusalSender(options.webSocket, options.onRefusalSent ? { onDone: options.onRefusalSent } : {}),
  });
}

/** The entry's client: real or inert per the runtime flags. */
export function reactNativeEntryClient(platform: PlatformLike, globals: RuntimeFlags): AppductClient {
  if (!isReactNativeEntryEnabled(globals)) return inertClient;
  return createReactNativeClient({ platform, dev: globals.__DEV__ !== false });
}
