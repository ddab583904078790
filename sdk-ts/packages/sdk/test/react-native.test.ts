// The React Native entry (§T11): JavaScript only, over the WebSocket global to the daemon's
// loopback web listener. Units use a fake WebSocket and a fake `Platform`; the entry modules run
// with `react-native` mocked; one test drives the client against the real daemon's web listener
// (the `ws` package standing in for React Native's WebSocket, with a loopback Origin as React
// Native sends).

import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { WebSocket as NodeWebSocket } from "ws";

import { encodeBootstrapPayload } from "../src/core/bootstrap.js";
import { AppductConnectError } from "../src/core/errors.js";
import type { AppductClient } from "../src/core/types.js";
import { createReactNativeClient, isReactNativeEntryEnabled, REACT_NATIVE_LINK_HINT } from "../src/react-native/client.js";
import { reactNativeDevice, type PlatformLike } from "../src/react-native/device.js";
import { installAutoLifecycle, type AppStateLike, type LinkingLike } from "../src/react-native/lifecycle.js";
import type { WebSocketConstructor, WebSocketLike } from "../src/web/transport.js";
import { watchDaemonEvents } from "./support/daemon-events.js";
import type { Cleanup } from "./support/fake-daemon.js";
import { flush } from "./support/fake-transport.js";
import { startRealDaemon } from "./support/real-daemon.js";

const PIXEL: PlatformLike = { OS: "android", Version: 35, constants: { Manufacturer: "Google", Model: "Pixel 8" } };
const PIN = "sha256/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";

class FakeWebSocket implements WebSocketLike {
  static instances: FakeWebSocket[] = [];
  onopen: ((event: unknown) => void) | null = null;
  onmessage: ((event: { data: unknown }) => void) | null = null;
  onclose: ((event: { code?: number; reason?: string }) => void) | null = null;
  onerror: ((event: unknown) => void) | null = null;
  readonly sent: Record<string, unknown>[] = [];
  closedWith: [number | undefined, string | undefined] | null = null;

  constructor(readonly url: string) {
    FakeWebSocket.instances.push(this);
    queueMicrotask(() => this.onopen?.({}));
  }
  send(data: string): void {
    this.sent.push(JSON.parse(data) as Record<string, unknown>);
  }
  close(code?: number, reason?: string): void {
    this.closedWith = [code, reason];
  }
  receive(frame: unknown): void {
    this.onmessage?.({ data: JSON.stringify(frame) });
  }
}

const deepLink = (options: { address?: string; pin?: string; sessionId?: string } = {}): string => {
  const payload = encodeBootstrapPayload({
    address: options.address ?? "127.0.0.1",
    port: 51234,
    sessionId: options.sessionId ?? "rn-session",
    token: Uint8Array.from({ length: 32 }, (_, i) => i),
    expiresAt: Math.floor(Date.now() / 1000) + 300,
  });
  return `rnapp:///?appduct=${payload}${options.pin ? `&pin=${encodeURIComponent(options.pin)}` : ""}`;
};
const ack = { type: "session_ack", session_id: "rn-session", status: "ok", alias: "pixel-8", resume_token: "resume-1", keepalive_interval_s: 15, grace_s: 600, event_registry: true };

function fakeClient(platform: PlatformLike = PIXEL): AppductClient {
  return createReactNativeClient({ platform, webSocket: () => FakeWebSocket, dev: true });
}

beforeEach(() => {
  FakeWebSocket.instances = [];
});

afterEach(() => {
  vi.restoreAllMocks();
  vi.doUnmock("react-native");
  delete (globalThis as { __DEV__?: unknown }).__DEV__;
  delete (globalThis as { __APPDUCT_ENABLED__?: unknown }).__APPDUCT_ENABLED__;
});

describe("device fields", () => {
  it("reads Platform on Android, iOS and iPadOS", () => {
    expect(reactNativeDevice(PIXEL)).toEqual({ manufacturer: "Google", model: "Pixel 8", os: "Android 35" });
    expect(reactNativeDevice({ OS: "ios", Version: "18.2" })).toEqual({ manufacturer: "Apple", model: "iPhone", os: "iOS 18.2" });
    expect(reactNativeDevice({ OS: "ios", Version: "18.2", isPad: true })).toEqual({ manufacturer: "Apple", model: "iPad", os: "iOS 18.2" });
  });

  it("omits Android constants that are missing or empty", () => {
    expect(reactNativeDevice({ OS: "android", Version: 34, constants: { Manufacturer: "", Model: 7 } })).toEqual({ os: "Android 34" });
    expect(reactNativeDevice({ OS: "windows", Version: "10.0" })).toEqual({ os: "windows 10.0" });
  });
});

describe("release switch (§T11.4)", () => {
  it("is active unless __DEV__ is false, and __APPDUCT_ENABLED__ === true forces it on", () => {
    expect(isReactNativeEntryEnabled({})).toBe(true);
    expect(isReactNativeEntryEnabled({ __DEV__: true })).toBe(true);
    expect(isReactNativeEntryEnabled({ __DEV__: false })).toBe(false);
    expect(isReactNativeEntryEnabled({ __DEV__: false, __APPDUCT_ENABLED__: "true" })).toBe(false);
    expect(isReactNativeEntryEnabled({ __DEV__: false, __APPDUCT_ENABLED__: true })).toBe(true);
  });
});

describe("React Native client", () => {
  it("claims a web-transport deep link over ws://127.0.0.1 with the device fields", async () => {
    const client = fakeClient();
    const done = client.connect(deepLink());
    await flush();
    const socket = FakeWebSocket.instances[0] as FakeWebSocket;
    expect(socket.url).toBe("ws://127.0.0.1:51234/");
    expect(socket.sent[0]).toEqual({
      type: "session_claim",
      protocol_version: 2,
      session_id: "rn-session",
      token: "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8",
      device_manufacturer: "Google",
      device_model: "Pixel 8",
      device_os: "Android 35",
    });
    socket.receive(ack);
    await done;
    expect(client.getAppductState()).toBe("active");
    await client.disconnect();
  });

  it("refuses a native (pinned) link, even for 127.0.0.1, naming --for react-native, and tells the daemon (link_refused) instead of claiming", async () => {
    const client = fakeClient();
    const error = await client.connect(deepLink({ pin: PIN })).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(AppductConnectError);
    expect(error).toMatchObject({ code: "unsupported_link" });
    expect((error as Error).message).toContain("minted for the native transport");
    expect((error as Error).message).toContain(REACT_NATIVE_LINK_HINT);
    expect(REACT_NATIVE_LINK_HINT).toMatch(/appduct sessions link --for react-native/);
    await flush();
    // One plain socket to the link's address and port, carrying only the refusal.
    expect(FakeWebSocket.instances.map((s) => s.url)).toEqual(["ws://127.0.0.1:51234/"]);
    const sent = (FakeWebSocket.instances[0] as FakeWebSocket).sent;
    expect(sent).toEqual([{ type: "link_refused", session_id: "rn-session", reason: "unsupported_link", proof: expect.stringMatching(/^[A-Za-z0-9_-]{43}$/) }]);
    expect(client.getAppductState()).toBe("idle");
  });

  it("refuses a payload whose address is not 127.0.0.1, naming the limitation", async () => {
    const client = fakeClient();
    const error = await client.connect(deepLink({ address: "192.168.1.20" })).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: "unsupported_link" });
    expect((error as Error).message).toContain("192.168.1.20");
    expect((error as Error).message).toContain(REACT_NATIVE_LINK_HINT);
  });

  it("a refused link passed to handleUrl goes to the error listener (phase bootstrap)", async () => {
    const client = fakeClient();
    const errors: unknown[] = [];
    client.addAppductListener("error", (e) => errors.push(e));
    expect(client.handleUrl(deepLink({ pin: PIN }))).toBe(true);
    expect(errors).toEqual([expect.objectContaining({ phase: "bootstrap", code: "unsupported_link" })]);
  });

  it("backgrounding closes the socket with 1001 app_backgrounded (not rewritten to 1000) and foregrounding resumes", async () => {
    const client = fakeClient();
    const done = client.connect(deepLink());
    await flush();
    const socket = FakeWebSocket.instances[0] as FakeWebSocket;
    socket.receive(ack);
    await done;
    client.setForeground(false);
    expect(socket.closedWith).toEqual([1001, "app_backgrounded"]);
    expect(client.getAppductState()).toBe("reconnecting");
    client.setForeground(true);
    await flush();
    const resumed = FakeWebSocket.instances[1] as FakeWebSocket;
    expect(resumed.sent[0]).toEqual({ type: "session_resume", protocol_version: 2, session_id: "rn-session", resume_token: "resume-1" });
    await client.disconnect();
  });

  it("keeps the lease in memory only: a new client (a JavaScript reload) has nothing to restore", async () => {
    const client = fakeClient();
    const done = client.connect(deepLink());
    await flush();
    (FakeWebSocket.instances[0] as FakeWebSocket).receive(ack);
    await done;
    await expect(fakeClient().restoreSession()).resolves.toBe(false);
    await client.disconnect();
  });
});

describe("auto lifecycle (§T11.3)", () => {
  function fakeRn(initialUrl: string | null): {
    Linking: LinkingLike & { emit(url: string): void };
    AppState: AppStateLike & { emit(state: string): void };
    log: string[];
  } {
    const log: string[] = [];
    let onUrl: ((e: { url: string }) => void) | null = null;
    let onState: ((s: string) => void) | null = null;
    return {
      log,
      Linking: {
        addEventListener: (_type, handler) => {
          log.push("linking.subscribe");
          onUrl = handler;
          return { remove: () => undefined };
        },
        getInitialURL: () => {
          log.push("linking.initial");
          return Promise.resolve(initialUrl);
        },
        emit: (url) => onUrl?.({ url }),
      },
      AppState: {
        addEventListener: (_type, handler) => {
          log.push("appstate.subscribe");
          onState = handler;
          return { remove: () => undefined };
        },
        emit: (state) => onState?.(state),
      },
    };
  }

  it("subscribes to links, restores, handles the launch URL, follows AppState; once per client", async () => {
    const client = fakeClient();
    const calls: string[] = [];
    const spied: AppductClient = {
      ...client,
      handleUrl: (url) => {
        calls.push(`handleUrl:${url.slice(0, 8)}`);
        return client.handleUrl(url);
      },
      restoreSession: () => {
        calls.push("restoreSession");
        return client.restoreSession();
      },
      setForeground: (fg) => {
        calls.push(`setForeground:${String(fg)}`);
        client.setForeground(fg);
      },
    };
    const rn = fakeRn(deepLink());
    expect(installAutoLifecycle(spied, rn)).toBe(true);
    expect(installAutoLifecycle(spied, rn)).toBe(false);
    expect(rn.log).toEqual(["linking.subscribe", "linking.initial", "appstate.subscribe"]);
    await flush();
    expect(calls).toEqual(["restoreSession", "handleUrl:rnapp://"]);
    const socket = FakeWebSocket.instances[0] as FakeWebSocket;
    socket.receive(ack);
    rn.AppState.emit("background");
    expect(socket.closedWith).toEqual([1001, "app_backgrounded"]);
    rn.AppState.emit("active");
    rn.Linking.emit("https://example.invalid/no-link");
    expect(calls.slice(2)).toEqual(["setForeground:false", "setForeground:true", "handleUrl:https://"]);
    await client.disconnect();
  });
});

describe("entry modules with react-native mocked", () => {
  function mockReactNative(): { subscriptions: string[] } {
    const subscriptions: string[] = [];
    vi.doMock("react-native", () => ({
      Platform: { OS: "ios", Version: "18.2", isPad: false },
      Linking: {
        addEventListener: () => {
          subscriptions.push("url");
          return { remove: () => undefined };
        },
        getInitialURL: () => Promise.resolve(null),
      },
      AppState: {
        addEventListener: () => {
          subscriptions.push("change");
          return { remove: () => undefined };
        },
      },
    }));
    return { subscriptions };
  }

  it("the plain entry is real in development, has no listeners, and registers the default client", async () => {
    vi.resetModules();
    const { subscriptions } = mockReactNative();
    const rn = await import("../src/react-native/index.js");
    const inert = await import("../src/inert/index.js");
    const defaults = await import("../src/core/default-client.js");
    expect(defaults.getDefaultClient()).toBe(rn.appductClient);
    expect(rn.appductClient).not.toBe(inert.appductClient);
    expect(() => rn.registerTool({ name: "bad name", description: "d", handler: () => undefined })).toThrow(TypeError);
    expect(Object.keys(rn).sort()).toEqual([...Object.keys(inert), "useAppductState", "useAppductTool"].sort());
    expect(subscriptions).toEqual([]);
  });

  it("is inert when __DEV__ is false, unless __APPDUCT_ENABLED__ is true", async () => {
    (globalThis as { __DEV__?: unknown }).__DEV__ = false;
    vi.resetModules();
    mockReactNative();
    const { inertClient } = await import("../src/inert/client.js");
    const released = await import("../src/react-native/index.js");
    expect(released.appductClient).toBe(inertClient);
    expect(released.registerTool({ name: "bad name", description: "", handler: () => undefined }).name).toBe("bad name");

    (globalThis as { __APPDUCT_ENABLED__?: unknown }).__APPDUCT_ENABLED__ = true;
    vi.resetModules();
    mockReactNative();
    const inert2 = await import("../src/inert/client.js");
    const included = await import("../src/react-native/index.js");
    expect(included.appductClient).not.toBe(inert2.inertClient);
  });

  it("the auto entry installs the Linking and AppState listeners once, and none when inert", async () => {
    vi.resetModules();
    const { subscriptions } = mockReactNative();
    await import("../src/react-native/auto.js");
    await import("../src/react-native/auto.js");
    expect(subscriptions).toEqual(["url", "change"]);

    (globalThis as { __DEV__?: unknown }).__DEV__ = false;
    vi.resetModules();
    const released = mockReactNative();
    await import("../src/react-native/auto.js");
    expect(released.subscriptions).toEqual([]);
  });
});

describe("against the real daemon's web listener", () => {
  const cleanups: Cleanup[] = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });

  /** `ws` as React Native's WebSocket: React Native sends an Origin of the socket's own host. */
  const ReactNativeLikeWebSocket = class extends NodeWebSocket {
    constructor(url: string) {
      super(url, { origin: `http://${new URL(url).host}` });
    }
  } as unknown as WebSocketConstructor;

  it("claims a CLI-minted --transport web deep link, serves a CLI call, survives background and foreground; refuses a native link", async () => {
    const daemon = await startRealDaemon(cleanups);
    const bus = await watchDaemonEvents(cleanups, daemon.stateDir);
    const client = createReactNativeClient({ platform: PIXEL, webSocket: () => ReactNativeLikeWebSocket, dev: true });
    cleanups.push(() => client.disconnect());
    client.registerTool({
      name: "rn_echo",
      description: "Echoes its text.",
      inputSchema: { type: "object", properties: { text: { type: "string" } }, required: ["text"] },
      outputSchema: { type: "object", properties: { echo: { type: "string" } } },
      handler: (args) => ({ echo: (args as { text: string }).text }),
    });

    const link = await daemon.data<{ sessionId: string; transport: string; deepLink: string; pin?: string }>(["sessions", "link", "--transport", "web", "--scheme", "rnapp"]);
    expect(link.transport).toBe("web");
    expect(link.deepLink).not.toContain("pin=");
    const claimed = new Promise<void>((resolve) => client.addAppductListener("sessionChange", (e) => e.type === "claimed" && resolve()));
    // As the auto entry passes a Linking URL.
    expect(client.handleUrl(link.deepLink)).toBe(true);
    await claimed;
    expect(client.getSessionId()).toBe(link.sessionId);
    const claim = await bus.waitFor((e) => e.kind === "session_claimed" && e.sessionId === link.sessionId, 15_000, "session_claimed");
    expect(claim.data).toEqual({ device: { manufacturer: "Google", model: "Pixel 8", os: "Android 35" }, transport: "web" });
    await bus.waitFor((e) => e.kind === "tools_changed" && e.sessionId === link.sessionId && e.data.toolCount === 1, 15_000, "tools_changed");
    await expect(daemon.data(["tools", "call", link.sessionId, "rn_echo", "--input", '{"text":"hi"}'])).resolves.toEqual({ echo: "hi" });

    client.setForeground(false);
    const suspended = await bus.waitFor((e) => e.kind === "session_suspended" && e.sessionId === link.sessionId, 15_000, "session_suspended");
    expect(suspended.data).toEqual({ reason: "app_backgrounded" });
    client.setForeground(true);
    await bus.waitFor((e) => e.kind === "session_resumed" && e.sessionId === link.sessionId, 15_000, "session_resumed");
    await expect(daemon.data(["tools", "call", link.sessionId, "rn_echo", "--input", '{"text":"back"}'])).resolves.toEqual({ echo: "back" });

    const native = await daemon.data<{ deepLink: string }>(["sessions", "link", "--scheme", "rnapp"]);
    expect(native.deepLink).toContain("&pin=sha256%2F");
    await expect(client.connect(native.deepLink)).rejects.toMatchObject({ code: "unsupported_link" });
    expect(client.getSessionId()).toBe(link.sessionId);
    const status = await daemon.data<{ daemon: { pendingLinks: number; sessionCount: number } }>(["daemon", "status"]);
    expect(status.daemon).toMatchObject({ pendingLinks: 1, sessionCount: 1 });
  }, 60_000);
});
