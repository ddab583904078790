// The Node entry's transport against local TLS and plain WebSocket servers (§T10): the pin
// check runs before the upgrade, a wrong pin never sees an HTTP byte, web links go to loopback
// without an Origin header, and an unanswered ping is socket loss. The servers stand in for
// the daemon's listeners; the real daemon is exercised by the end-to-end suite.

import { once } from "node:events";

import { afterEach, describe, expect, it, vi } from "vitest";
import type { WebSocket as ServerSocket } from "ws";

import { encodeBootstrapPayload } from "../src/core/bootstrap.js";
import { createAppductClient } from "../src/core/client.js";
import { AppductConnectError } from "../src/core/errors.js";
import type { AppductClient, AppductStorage, ClientState, TransportCloseEvent } from "../src/core/types.js";
import { isNodeEntryEnabled, pinsFromEnv } from "../src/node/enabled.js";
import { pinFromCertificateDer, pinFromPublicKey } from "../src/node/pin.js";
import { createNodeTransport } from "../src/node/transport.js";
import { makeSelfSignedCertificate } from "./support/cert.js";
import { startDaemon, type Cleanup, type FakeDaemon } from "./support/fake-daemon.js";
import { ManualClock } from "./support/manual-clock.js";

const OTHER_PIN = "sha256/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
const quiet = { warn: () => undefined, error: () => undefined };
const cleanups: Cleanup[] = [];

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

function link(port: number, pin?: string): string {
  const payload = encodeBootstrapPayload({
    address: "127.0.0.1",
    port,
    sessionId: "session-1",
    token: Uint8Array.from({ length: 32 }, (_, i) => i),
    expiresAt: Math.floor(Date.now() / 1000) + 300,
  });
  return `nodeapp:///?appduct=${payload}${pin ? `&pin=${encodeURIComponent(pin)}` : ""}`;
}

function nodeClient(clock?: ManualClock): AppductClient {
  const client = createAppductClient({
    transport: createNodeTransport(clock ? { clock } : {}),
    logger: quiet,
    device: { model: "Node.js", os: "test" },
  });
  cleanups.push(() => client.disconnect());
  return client;
}

function nextState(client: AppductClient, state: ClientState): Promise<void> {
  return new Promise((resolve) => {
    const reg = client.addAppductListener("stateChange", (e) => {
      if (e.state === state) {
        reg.remove();
        resolve();
      }
    });
  });
}

describe("Node transport, native", () => {
  it("claims over wss:// when the leaf's pin is trusted", async () => {
    const daemon = await startDaemon(cleanups, "tls");
    const client = nodeClient();
    await client.connect(link(daemon.port, daemon.pin));
    expect(client.getAppductState()).toBe("active");
    expect(client.getSessionAlias()).toBe("node-js");
    await vi.waitFor(() => expect(daemon.messages.map((m) => m.type)).toEqual(["session_claim", "tool_registry_snapshot", "event_registry_snapshot"]));
    expect(daemon.messages[0]).toMatchObject({ session_id: "session-1", device_model: "Node.js", token: "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8" });
  });

  // SEC-13 (Node entry's transport); against the real daemon: e2e/tests/ts_sdk.rs.
  it("a wrong pin ends in pin_mismatch before any HTTP upgrade reaches the listener", async () => {
    const daemon = await startDaemon(cleanups, "tls");
    const client = nodeClient();
    client.configureAppduct({ pins: [OTHER_PIN] });
    const states: unknown[] = [];
    client.addAppductListener("stateChange", (e) => states.push(e));
    const error = await client.connect(link(daemon.port, daemon.pin)).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(AppductConnectError);
    expect((error as AppductConnectError).code).toBe("pin_mismatch");
    expect(states).toEqual([{ state: "connecting" }, { state: "closed", reason: "pin_mismatch" }]);
    // The client reached the listener and saw its leaf (the pin was checked), yet no upgrade
    // request followed.
    expect(daemon.tcpConnections).toBe(1);
    expect(daemon.upgrades).toBe(0);
    expect(daemon.messages).toEqual([]);
  });

  it("the pin of the presented leaf equals the pin of the key", () => {
    const cert = makeSelfSignedCertificate();
    expect(pinFromCertificateDer(cert.der)).toBe(pinFromPublicKey(cert.publicKey));
  });

  it("an unanswered ping is socket loss: the session goes reconnecting", async () => {
    const daemon = await startDaemon(cleanups, "tls", { autoPong: false });
    const clock = new ManualClock(0);
    const client = nodeClient(clock);
    await client.connect(link(daemon.port, daemon.pin));
    const server = daemon.sockets[0] as ServerSocket;
    const pinged = once(server, "ping");
    clock.advance(15_000);
    await pinged;
    const lost = nextState(client, "reconnecting");
    clock.advance(15_000);
    await lost;
    expect(client.getAppductState()).toBe("reconnecting");
  });

  it("keeps a connection whose pings are answered before the next tick", async () => {
    const daemon = await startDaemon(cleanups, "tls");
    const clock = new ManualClock(0);
    const socket = createNodeTransport({ clock })({ url: `wss://127.0.0.1:${daemon.port}/`, transport: "native", pins: [daemon.pin as string] });
    const closes: TransportCloseEvent[] = [];
    const messages: string[] = [];
    let onMessage: () => void = () => undefined;
    socket.onclose = (e) => closes.push(e);
    socket.onmessage = (text) => {
      messages.push(text);
      onMessage();
    };
    await new Promise<void>((resolve) => (socket.onopen = resolve));
    cleanups.push(() => socket.close(1000, "done"));
    await vi.waitFor(() => expect(daemon.sockets).toHaveLength(1));
    const server = daemon.sockets[0] as ServerSocket;
    // After each ping the server sends a marker; TCP order puts the pong before it.
    server.on("ping", () => server.send(`marker-${messages.length}`));
    socket.startKeepalive?.(15_000);
    for (let i = 0; i < 3; i++) {
      const marker = new Promise<void>((resolve) => (onMessage = resolve));
      clock.advance(15_000);
      await marker;
    }
    expect(messages).toEqual(["marker-0", "marker-1", "marker-2"]);
    expect(closes).toEqual([]);
  });
});

/** An app's storage adapter (asynchronous, like AsyncStorage) over a map. */
function memoryStorage(): AppductStorage & { data: Map<string, string> } {
  const data = new Map<string, string>();
  return {
    data,
    getItem: async (key) => data.get(key) ?? null,
    setItem: async (key, value) => void data.set(key, value),
    removeItem: async (key) => void data.delete(key),
  };
}

/** Claims over the pinned listener in link trust mode (no configured pins) and waits for the stored lease. */
async function claimWithStorage(daemon: FakeDaemon): Promise<ReturnType<typeof memoryStorage>> {
  const storage = memoryStorage();
  const first = nodeClient();
  first.configureAppduct({ storage });
  await first.connect(link(daemon.port, daemon.pin));
  await vi.waitFor(() => expect(storage.data.has("appduct:lease")).toBe(true));
  // The claim and the two snapshots: everything the first client sends before it "dies".
  await vi.waitFor(() => expect(daemon.messages).toHaveLength(3));
  return storage;
}

describe("Node transport, restored lease in link trust mode (§T7.2)", () => {
  // The app restarts: the old client is gone without a goodbye (its lease stays as last
  // written), and a new client restores from the same storage, still with no configured pins.
  it("a lease restored after a restart resumes over wss:// with the pin the session was established with", async () => {
    const daemon = await startDaemon(cleanups, "tls");
    const storage = await claimWithStorage(daemon);
    const stored = JSON.parse(storage.data.get("appduct:lease") as string) as Record<string, unknown>;
    expect(stored).toMatchObject({ v: 1, sessionId: "session-1", resumeToken: "resume-1", transport: "native", pins: [daemon.pin] });

    const second = nodeClient();
    second.configureAppduct({ storage });
    const active = nextState(second, "active");
    await expect(second.restoreSession()).resolves.toBe(true);
    await active;
    expect(second.getSessionId()).toBe("session-1");
    expect(daemon.upgrades).toBe(2);
    expect(daemon.messages.filter((m) => m.type === "session_resume")).toEqual([
      { type: "session_resume", protocol_version: 2, session_id: "session-1", resume_token: "resume-1" },
    ]);
  });

  it("a stored lease whose pin was changed ends in pin_mismatch without sending a frame", async () => {
    const daemon = await startDaemon(cleanups, "tls");
    const storage = await claimWithStorage(daemon);
    const stored = JSON.parse(storage.data.get("appduct:lease") as string) as Record<string, unknown>;
    storage.data.set("appduct:lease", JSON.stringify({ ...stored, pins: [OTHER_PIN] }));
    const messagesBefore = daemon.messages.length;
    const upgradesBefore = daemon.upgrades;
    const tcpBefore = daemon.tcpConnections;

    const second = nodeClient();
    second.configureAppduct({ storage });
    const states: unknown[] = [];
    const errors: unknown[] = [];
    second.addAppductListener("stateChange", (e) => states.push(e));
    second.addAppductListener("error", (e) => errors.push(e.code));
    const closed = nextState(second, "closed");
    await expect(second.restoreSession()).resolves.toBe(true);
    await closed;
    expect(states).toEqual([{ state: "reconnecting" }, { state: "closed", reason: "pin_mismatch" }]);
    expect(errors).toEqual(["pin_mismatch"]);
    // The listener was reached and its leaf checked, yet no upgrade and no frame followed.
    expect(daemon.tcpConnections).toBe(tcpBefore + 1);
    expect(daemon.upgrades).toBe(upgradesBefore);
    expect(daemon.messages).toHaveLength(messagesBefore);
    await vi.waitFor(() => expect(storage.data.has("appduct:lease")).toBe(false));
  });
});

describe("Node transport, web", () => {
  it("connects to ws://127.0.0.1 with no Origin header", async () => {
    const daemon = await startDaemon(cleanups, "plain");
    const client = nodeClient();
    await client.connect(link(daemon.port), { transport: "web" });
    expect(client.getAppductState()).toBe("active");
    expect(daemon.origins).toEqual([undefined]);
  });
});

describe("Node entry switches", () => {
  it("reads APPDUCT_ENABLED and NODE_ENV", () => {
    expect(isNodeEntryEnabled({})).toBe(true);
    expect(isNodeEntryEnabled({ NODE_ENV: "production" })).toBe(false);
    expect(isNodeEntryEnabled({ NODE_ENV: "production", APPDUCT_ENABLED: " TRUE " })).toBe(true);
    expect(isNodeEntryEnabled({ APPDUCT_ENABLED: "1" })).toBe(true);
    expect(isNodeEntryEnabled({ APPDUCT_ENABLED: "False" })).toBe(false);
    expect(isNodeEntryEnabled({ APPDUCT_ENABLED: "0" })).toBe(false);
    expect(() => isNodeEntryEnabled({ APPDUCT_ENABLED: "yes" })).toThrow(/APPDUCT_ENABLED/);
  });

  it("reads APPDUCT_PINS as a comma-separated list and refuses malformed pins", () => {
    expect(pinsFromEnv({})).toEqual([]);
    expect(pinsFromEnv({ APPDUCT_PINS: ` ${OTHER_PIN} ,, ` })).toEqual([OTHER_PIN]);
    expect(() => pinsFromEnv({ APPDUCT_PINS: "sha256/nope" })).toThrow(/APPDUCT_PINS/);
  });

  it("is inert when disabled and real otherwise, with the same names", async () => {
    const saved = process.env.APPDUCT_ENABLED;
    const warn = vi.spyOn(console, "warn").mockImplementation(() => undefined);
    try {
      process.env.APPDUCT_ENABLED = "0";
      vi.resetModules();
      const inert = await import("../src/node/index.js");
      expect(inert.getAppductState()).toBe("idle");
      expect(inert.registerTool({ name: "bad name", description: "", handler: () => undefined }).name).toBe("bad name");
      await expect(inert.connect("x")).rejects.toMatchObject({ code: "appduct_disabled" });
      expect(warn).toHaveBeenCalledTimes(1);
      process.env.APPDUCT_ENABLED = "1";
      vi.resetModules();
      const real = await import("../src/node/index.js");
      expect(() => real.registerTool({ name: "bad name", description: "d", handler: () => undefined })).toThrow(TypeError);
      expect(Object.keys(real).sort()).toEqual(Object.keys(inert).sort());
      process.env.APPDUCT_ENABLED = "maybe";
      vi.resetModules();
      await expect(import("../src/node/index.js")).rejects.toThrow(/APPDUCT_ENABLED/);
    } finally {
      if (saved === undefined) delete process.env.APPDUCT_ENABLED;
      else process.env.APPDUCT_ENABLED = saved;
      vi.resetModules();
      warn.mockRestore();
    }
  });
});
