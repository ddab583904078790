// The React Native entry over the sealed transport (issue #23), against a stand-in daemon whose
// Noise responder is this SDK's own (test/support/fake-sealed-daemon.ts); the `ws` package plays
// React Native's WebSocket. The real daemon's plain route is exercised in sealed-daemon.test.ts.

import { afterEach, describe, expect, it } from "vitest";
import { WebSocket as NodeWebSocket } from "ws";

import { encodeBase64url } from "../src/core/base64.js";
import { encodeBootstrapPayload, encodeSealedBootstrapPayload } from "../src/core/bootstrap.js";
import { createAppductClient } from "../src/core/client.js";
import { AppductConnectError } from "../src/core/errors.js";
import { parseLink } from "../src/core/link.js";
import { generateKeyPair } from "../src/core/sealed/noise.js";
import { createSealedRandom } from "../src/core/sealed/random.js";
import type { AppductClient, AppductStorage, LinkRefusal } from "../src/core/types.js";
import { createReactNativeClient, REACT_NATIVE_LINK_HINT } from "../src/react-native/client.js";
import type { PlatformLike } from "../src/react-native/device.js";
import { createWebSocketTransport, type WebSocketConstructor } from "../src/web/transport.js";
import type { Cleanup } from "./support/fake-daemon.js";
import { startCapture, startFakeSealedDaemon, type FakeSealedDaemon } from "./support/fake-sealed-daemon.js";
import { within } from "./support/processes.js";

const IPHONE: PlatformLike = { OS: "ios", Version: "18.2" };
const cleanups: Cleanup[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

let counter = 0;
function mint(daemon: FakeSealedDaemon, options: { port?: number; expiresAt?: number; staticKey?: Uint8Array } = {}): { link: string; sessionId: string; token: string } {
  const sessionId = `sess-${++counter}`;
  const token = globalThis.crypto.getRandomValues(new Uint8Array(32));
  const payload = encodeSealedBootstrapPayload({
    address: "127.0.0.1",
    port: options.port ?? daemon.port,
    sessionId,
    token,
    expiresAt: options.expiresAt ?? Math.floor(Date.now() / 1000) + 300,
    staticKey: options.staticKey ?? daemon.staticKey.publicKey,
  });
  daemon.tokens.set(sessionId, encodeBase64url(token));
  return { link: `rnapp:///?appduct=${payload}`, sessionId, token: encodeBase64url(token) };
}

function client(extra: Partial<Parameters<typeof createReactNativeClient>[0]> = {}): { client: AppductClient; rngs: string[]; refusals: { refusal: LinkRefusal; outcome: unknown }[] } {
  const rngs: string[] = [];
  const refusals: { refusal: LinkRefusal; outcome: unknown }[] = [];
  const c = createReactNativeClient({
    platform: IPHONE,
    webSocket: () => NodeWebSocket as unknown as WebSocketConstructor,
    dev: true,
    onSealedHandshake: ({ rng }) => rngs.push(rng),
    onRefusalSent: (refusal, outcome) => refusals.push({ refusal, outcome }),
    ...extra,
  });
  cleanups.push(() => c.disconnect());
  return { client: c, rngs, refusals };
}

const ack = (sessionId: string, resumeToken: string) => ({
  type: "session_ack",
  session_id: sessionId,
  status: "ok",
  alias: "iphone",
  resume_token: resumeToken,
  keepalive_interval_s: 15,
  grace_s: 600,
  event_registry: true,
});

/** An AsyncStorage-shaped map (what survives a reload). */
function memoryStorage(): AppductStorage & { data: Map<string, string>; writes: string[] } {
  const data = new Map<string, string>();
  const writes: string[] = [];
  return {
    data,
    writes,
    getItem: async (key) => data.get(key) ?? null,
    setItem: async (key, value) => {
      writes.push(value);
      data.set(key, value);
    },
    removeItem: async (key) => {
      data.delete(key);
    },
  };
}

describe("sealed links", () => {
  it("parseLink reads a sealed payload only when asked; a pin on a sealed link is ignored; v2 rules unchanged", () => {
    const key = generateKeyPair((n) => globalThis.crypto.getRandomValues(new Uint8Array(n))).publicKey;
    const payload = encodeSealedBootstrapPayload({ address: "192.168.1.20", port: 8443, sessionId: "s", token: new Uint8Array(32), expiresAt: 4_000_000_000, staticKey: key });
    expect(parseLink(payload)).toEqual({ ok: false, code: "invalid_payload" });
    const parsed = parseLink(`x:///?appduct=${payload}&pin=${encodeURIComponent("sha256/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")}`, { sealed: true });
    expect(parsed.ok && parsed.link.staticKey).toEqual(key);
    expect(parsed.ok && parsed.link.pin).toBe(null);
    expect(parsed.ok && parsed.link.payload).toEqual({ family: 4, address: "192.168.1.20", port: 8443, sessionId: "s", tokenBase64url: encodeBase64url(new Uint8Array(32)), expiresAt: 4_000_000_000 });
    const v2 = encodeBootstrapPayload({ address: "127.0.0.1", port: 1, sessionId: "s", token: new Uint8Array(32), expiresAt: 1 });
    const asSealed = parseLink(v2, { sealed: true });
    expect(asSealed.ok && asSealed.link.staticKey).toBe(undefined);
    // 81 + n bytes for IPv4: one byte less or more is invalid.
    const bytes = Buffer.from(payload, "base64url");
    expect(bytes.length).toBe(81 + 1);
    expect(parseLink(encodeBase64url(bytes.subarray(0, -1)), { sealed: true })).toEqual({ ok: false, code: "invalid_payload" });
    expect(parseLink(encodeBase64url(Buffer.concat([bytes, Buffer.of(0)])), { sealed: true })).toEqual({ ok: false, code: "invalid_payload" });
  });
});

describe("Expo Go links", () => {
  it("an exp://<host>:8081/--/?appduct=<payload> URL (Expo Go's own scheme) is read as the sealed link", () => {
    const key = generateKeyPair((n) => globalThis.crypto.getRandomValues(new Uint8Array(n))).publicKey;
    const payload = encodeSealedBootstrapPayload({ address: "192.168.1.20", port: 8443, sessionId: "expo", token: new Uint8Array(32), expiresAt: 4_000_000_000, staticKey: key });
    const parsed = parseLink(`exp://192.168.1.20:8081/--/?appduct=${payload}`, { sealed: true });
    expect(parsed.ok && parsed.link.payload.sessionId).toBe("expo");
    expect(parsed.ok && parsed.link.staticKey).toEqual(key);
  });
});

describe("entries without the sealed transport", () => {
  it("the web and Node clients refuse a sealed link with unsupported_link, opening nothing and sending no refusal", async () => {
    const key = generateKeyPair((n) => globalThis.crypto.getRandomValues(new Uint8Array(n))).publicKey;
    const link = encodeSealedBootstrapPayload({ address: "192.168.1.20", port: 8443, sessionId: "s", token: new Uint8Array(32), expiresAt: 4_000_000_000, staticKey: key });
    for (const allowed of [["web"], ["native", "web"]] as const) {
      const opened: unknown[] = [];
      const c = createAppductClient({
        transport: (target) => {
          opened.push(target);
          throw new Error("no socket expected");
        },
        defaultTransport: allowed[0],
        allowedTransports: allowed,
      });
      const error = await c.connect(link).catch((e: unknown) => e);
      expect(error).toMatchObject({ code: "unsupported_link" });
      expect((error as Error).message).toContain("sealed transport");
      expect(opened).toEqual([]);
    }
  });
});

describe("refusals name only links the entry cannot use", () => {
  it("a conflict the app's own connect options caused is unsupported_link without a refusal; a link kind the entry cannot open is refused", async () => {
    const key = generateKeyPair((n) => globalThis.crypto.getRandomValues(new Uint8Array(n))).publicKey;
    const token = globalThis.crypto.getRandomValues(new Uint8Array(32));
    const expiresAt = Math.floor(Date.now() / 1000) + 300;
    const sealedLink = encodeSealedBootstrapPayload({ address: "127.0.0.1", port: 9, sessionId: "sealed-1", token, expiresAt, staticKey: key });
    const v2Link = encodeBootstrapPayload({ address: "127.0.0.1", port: 9, sessionId: "v2-1", token, expiresAt });
    const make = (allowed: readonly ("native" | "web" | "sealed")[]): { c: AppductClient; sent: LinkRefusal[] } => {
      const sent: LinkRefusal[] = [];
      const c = createAppductClient({
        transport: () => {
          throw new Error("no socket expected");
        },
        defaultTransport: "web",
        allowedTransports: allowed,
        sendLinkRefusal: (refusal) => sent.push(refusal),
      });
      cleanups.push(() => c.disconnect());
      return { c, sent };
    };
    // The React Native entry's transports: the app asked for another transport than the link's.
    const rn = make(["web", "sealed"]);
    await expect(rn.c.connect(sealedLink, { transport: "web" })).rejects.toMatchObject({ code: "unsupported_link" });
    await expect(rn.c.connect(v2Link, { transport: "sealed" })).rejects.toMatchObject({ code: "unsupported_link" });
    await expect(rn.c.connect(v2Link, { transport: "native" })).rejects.toMatchObject({ code: "unsupported_link" });
    expect(rn.sent).toEqual([]);
    // An entry that cannot open sealed links at all refuses one (the daemon's hint is right).
    const web = make(["native", "web"]);
    await expect(web.c.connect(sealedLink)).rejects.toMatchObject({ code: "unsupported_link" });
    expect(web.sent.map((r) => [r.sessionId, r.reason])).toEqual([["sealed-1", "unsupported_link"]]);
  });
});

describe("stored leases and the transports that may carry them", () => {
  it("a stored sealed lease is dropped by an entry without the sealed transport, and never opened as plain WebSocket", async () => {
    const key = generateKeyPair((n) => globalThis.crypto.getRandomValues(new Uint8Array(n))).publicKey;
    const lease = JSON.stringify({
      v: 1,
      sessionId: "held-1",
      resumeToken: "resume-secret",
      alias: "iphone",
      graceS: 600,
      lostAt: null,
      endpoint: { address: "127.0.0.1", port: 9 },
      transport: "sealed",
      staticKey: encodeBase64url(key),
    });
    let stored: string | null = lease;
    const opened: unknown[] = [];
    const c = createAppductClient({
      transport: (target) => {
        opened.push(target);
        throw new Error("no socket expected");
      },
      leaseStore: { read: () => stored, write: (v) => void (stored = v), clear: () => void (stored = null) },
      logger: { warn: () => undefined, error: () => undefined },
    });
    cleanups.push(() => c.disconnect());
    await expect(c.restoreSession()).resolves.toBe(false);
    expect(opened).toEqual([]);
    expect(stored).toBe(null);
    expect(c.getAppductState()).not.toBe("reconnecting");
    // The plain WebSocket transport refuses a sealed target outright.
    const constructed: string[] = [];
    class Recorder {
      constructor(url: string) {
        constructed.push(url);
      }
    }
    const plain = createWebSocketTransport(() => Recorder as unknown as WebSocketConstructor);
    expect(() => plain({ url: "ws://127.0.0.1:9/", transport: "sealed", pins: [], staticKey: key })).toThrow(/sealed/);
    expect(constructed).toEqual([]);
  });
});

describe("React Native entry, sealed transport", () => {
  it("claims over the channel (token only inside), serves a call with progress, and nothing readable crosses the wire", async () => {
    const daemon = await startFakeSealedDaemon(cleanups);
    const capture = await startCapture(cleanups, daemon.port);
    const { client: app, rngs } = client();
    app.registerTool({
      name: "secret_tool_name",
      description: "Echoes.",
      inputSchema: { type: "object", properties: { word: { type: "string" } }, required: ["word"] },
      outputSchema: { type: "object", properties: { echoed: { type: "string" } } },
      handler: async (args: unknown, ctx) => {
        await ctx.reportProgress(0.5, "halfway-progress-text");
        return { echoed: (args as { word: string }).word };
      },
    });
    const { link, sessionId, token } = mint(daemon, { port: capture.port });
    const connected = app.connect(link);
    const conn = await daemon.nextConnection();
    expect(conn.rng).toBe("csprng");
    expect(rngs).toEqual(["csprng"]);
    const claim = await conn.frame((f) => f.type === "session_claim", "the claim");
    expect(claim).toMatchObject({ session_id: sessionId, token, device_manufacturer: "Apple", device_model: "iPhone" });
    conn.send(ack(sessionId, "resume-token-1"));
    await connected;
    expect(app.getSessionAlias()).toBe("iphone");
    const snapshot = await conn.frame((f) => f.type === "tool_registry_snapshot", "the snapshot");
    expect(snapshot.tools).toEqual([expect.objectContaining({ name: "secret_tool_name" })]);
    conn.send({ type: "tool_call", session_id: sessionId, id: "inv-1", name: "secret_tool_name", args: { word: "argument-value-xyzzy" }, progress: true });
    const progress = await conn.frame((f) => f.type === "tool_call_progress", "progress");
    expect(progress).toMatchObject({ id: "inv-1", message: "halfway-progress-text" });
    const result = await conn.frame((f) => f.type === "tool_result", "the result");
    expect(result).toMatchObject({ id: "inv-1", result: { echoed: "argument-value-xyzzy" } });

    // The app's close: its code and reason go only in the close record; the WebSocket close is bare.
    await app.disconnect();
    expect(await conn.closedByApp).toEqual({ code: 1000, reason: "" });
    expect(conn.closeRecords).toEqual([{ code: 1000, reason: "closed_by_app" }]);

    const wire = capture.bytes();
    expect(wire.length).toBeGreaterThan(500);
    for (const secret of ["secret_tool_name", "argument-value-xyzzy", "halfway-progress-text", token, sessionId, "resume-token-1", "session_claim", "iphone", "closed_by_app"]) {
      expect(wire.includes(Buffer.from(secret)), secret).toBe(false);
    }
  }, 20_000);

  it("without a CSPRNG, keys come from the DRBG (rng drbg in message 1)", async () => {
    const daemon = await startFakeSealedDaemon(cleanups);
    const { client: app, rngs } = client({ random: createSealedRandom({ forceDrbg: true }) });
    const { link, sessionId } = mint(daemon);
    const connected = app.connect(link);
    const conn = await daemon.nextConnection();
    expect(conn.rng).toBe("drbg");
    expect(rngs).toEqual(["drbg"]);
    await conn.frame((f) => f.type === "session_claim", "the claim");
    conn.send(ack(sessionId, "r1"));
    await connected;
  });

  it("a cancel reaches the handler's AbortSignal", async () => {
    const daemon = await startFakeSealedDaemon(cleanups);
    const { client: app } = client();
    let aborted: () => void = () => undefined;
    const abortedP = new Promise<void>((resolve) => (aborted = resolve));
    app.registerTool({
      name: "slow",
      description: "Waits for cancel.",
      handler: (_args, ctx) =>
        new Promise((_resolve, reject) => {
          ctx.signal.addEventListener("abort", () => {
            aborted();
            reject(new Error("cancelled"));
          });
        }),
    });
    const { link, sessionId } = mint(daemon);
    const connected = app.connect(link);
    const conn = await daemon.nextConnection();
    await conn.frame((f) => f.type === "session_claim", "the claim");
    conn.send(ack(sessionId, "r1"));
    await connected;
    conn.send({ type: "tool_call", session_id: sessionId, id: "inv-9", name: "slow", args: {} });
    conn.send({ type: "tool_cancel", session_id: sessionId, id: "inv-9" });
    await within(abortedP, 5_000, "the handler's abort");
  });

  it("a close record is authenticated and acted on (1008 stops); a bare WebSocket 1008 is not (the app resumes)", async () => {
    const daemon = await startFakeSealedDaemon(cleanups);
    const { client: app } = client();
    const { link, sessionId } = mint(daemon);
    const connected = app.connect(link);
    const conn = await daemon.nextConnection();
    await conn.frame((f) => f.type === "session_claim", "the claim");
    conn.send(ack(sessionId, "r1"));
    await connected;
    // An attacker on the path forges a WebSocket close 1008 without a close record.
    conn.ws.close(1008, "session_revoked");
    const resumed = await daemon.nextConnection();
    expect(await resumed.frame((f) => f.type === "session_resume", "the resume")).toMatchObject({ session_id: sessionId, resume_token: "r1" });
    expect(app.getAppductState()).toBe("reconnecting");
    resumed.send(ack(sessionId, "r2"));
    await within(
      new Promise<void>((resolve) => {
        const check = (): void => (app.getAppductState() === "active" ? resolve() : void setTimeout(check, 10));
        check();
      }),
      5_000,
      "active again",
    );
    const states: string[] = [];
    app.addAppductListener("stateChange", (e) => states.push(`${e.state}:${e.reason ?? ""}`));
    resumed.sealedClose(1008, "session_revoked");
    await within(
      new Promise<void>((resolve) => {
        const check = (): void => (app.getAppductState() === "closed" ? resolve() : void setTimeout(check, 10));
        check();
      }),
      5_000,
      "closed by the sealed 1008",
    );
    expect(states).toEqual(["closed:session_revoked"]);
  });

  it("a held session survives forged handshake failures (a plain 1008 sealed_handshake_failed, a bogus message 2): it keeps resuming within grace", async () => {
    const daemon = await startFakeSealedDaemon(cleanups);
    const storage = memoryStorage();
    const { client: app } = client();
    app.configureAppduct({ storage });
    const { link, sessionId } = mint(daemon);
    const connected = app.connect(link);
    const conn = await daemon.nextConnection();
    await conn.frame((f) => f.type === "session_claim", "the claim");
    conn.send(ack(sessionId, "r1"));
    await connected;
    const states: string[] = [];
    app.addAppductListener("stateChange", (e) => states.push(`${e.state}:${e.reason ?? ""}`));
    // The attacker answers the next two resume handshakes, then lets the real daemon through.
    daemon.forge.push("close", "message2");
    conn.ws.terminate();
    const resumed = await daemon.nextConnection();
    expect(await resumed.frame((f) => f.type === "session_resume", "the resume")).toMatchObject({ session_id: sessionId, resume_token: "r1" });
    expect(daemon.forge).toEqual([]);
    expect(states.some((s) => s.startsWith("closed"))).toBe(false);
    expect(app.getAppductState()).toBe("reconnecting");
    expect(storage.data.get("appduct:lease")).toContain('"resumeToken":"r1"');
    resumed.send(ack(sessionId, "r2"));
    await within(
      new Promise<void>((resolve) => {
        const check = (): void => (app.getAppductState() === "active" ? resolve() : void setTimeout(check, 10));
        check();
      }),
      5_000,
      "active again",
    );
  });

  it("a tampered record from the network breaks the channel: the app drops it and resumes", async () => {
    const daemon = await startFakeSealedDaemon(cleanups);
    const { client: app } = client();
    const { link, sessionId } = mint(daemon);
    const connected = app.connect(link);
    const conn = await daemon.nextConnection();
    await conn.frame((f) => f.type === "session_claim", "the claim");
    conn.send(ack(sessionId, "r1"));
    await connected;
    const [record] = conn.records.sealFrame(JSON.stringify({ type: "tool_call", session_id: sessionId, id: "x", name: "none", args: {} })) as [Uint8Array];
    record[5] = (record[5] as number) ^ 1;
    conn.ws.send(record);
    const closed = await conn.closedByApp;
    expect(closed).toEqual({ code: 1008, reason: "sealed_record_invalid" });
    const resumed = await daemon.nextConnection();
    expect(await resumed.frame((f) => f.type === "session_resume", "the resume")).toMatchObject({ resume_token: "r1" });
  });

  it("a link naming another static key: the handshake fails, connect rejects handshake_failed, and the daemon is told", async () => {
    const daemon = await startFakeSealedDaemon(cleanups);
    const { client: app, refusals } = client();
    const other = generateKeyPair((n) => globalThis.crypto.getRandomValues(new Uint8Array(n))).publicKey;
    const { link, sessionId } = mint(daemon, { staticKey: other });
    const error = await app.connect(link).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(AppductConnectError);
    expect(error).toMatchObject({ code: "handshake_failed" });
    const refusal = await daemon.nextRefusal();
    expect(refusal.frame).toMatchObject({ type: "link_refused", session_id: sessionId, reason: "handshake_failed" });
    expect(refusal.proofValid).toBe(true);
    await within(
      new Promise<void>((resolve) => {
        const check = (): void => (refusals.length > 0 ? resolve() : void setTimeout(check, 10));
        check();
      }),
      5_000,
      "the refusal outcome",
    );
    expect(refusals[0]?.outcome).toEqual({ code: 1000, reason: "refusal_recorded" });
  });

  it("a native (pinned) link is refused with unsupported_link naming --for react-native, and the daemon is told at once", async () => {
    const daemon = await startFakeSealedDaemon(cleanups);
    const { client: app } = client();
    const token = globalThis.crypto.getRandomValues(new Uint8Array(32));
    daemon.tokens.set("native-1", encodeBase64url(token));
    const payload = encodeBootstrapPayload({ address: "127.0.0.1", port: daemon.port, sessionId: "native-1", token, expiresAt: Math.floor(Date.now() / 1000) + 300 });
    const error = await app.connect(`rnapp:///?appduct=${payload}&pin=${encodeURIComponent("sha256/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")}`).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: "unsupported_link" });
    expect((error as Error).message).toContain("--for react-native");
    expect((error as Error).message).toContain(REACT_NATIVE_LINK_HINT);
    const refusal = await daemon.nextRefusal();
    expect(refusal).toEqual({ frame: expect.objectContaining({ type: "link_refused", session_id: "native-1", reason: "unsupported_link" }), proofValid: true });
    expect(Object.keys(refusal.frame).sort()).toEqual(["proof", "reason", "session_id", "type"]);
  });

  it("an expired sealed link is refused (expired_payload) and reported as link_expired", async () => {
    const daemon = await startFakeSealedDaemon(cleanups);
    const { client: app } = client();
    const { link, sessionId } = mint(daemon, { expiresAt: Math.floor(Date.now() / 1000) - 1 });
    await expect(app.connect(link)).rejects.toMatchObject({ code: "expired_payload" });
    const refusal = await daemon.nextRefusal();
    expect(refusal).toEqual({ frame: expect.objectContaining({ session_id: sessionId, reason: "link_expired" }), proofValid: true });
  });

  it("never sends a refusal to an address outside the private LAN", async () => {
    const { client: app, refusals } = client();
    const key = generateKeyPair((n) => globalThis.crypto.getRandomValues(new Uint8Array(n))).publicKey;
    const payload = encodeSealedBootstrapPayload({ address: "8.8.8.8", port: 443, sessionId: "s", token: new Uint8Array(32), expiresAt: 1, staticKey: key });
    await expect(app.connect(payload)).rejects.toMatchObject({ code: "expired_payload" });
    await new Promise((r) => setTimeout(r, 50));
    expect(refusals).toEqual([]);
  });
});

describe("surviving a reload (storage adapter)", () => {
  it("a new client over the same storage resumes the same session (same id, alias) with the rotated token", async () => {
    const daemon = await startFakeSealedDaemon(cleanups);
    const storage = memoryStorage();
    const first = client();
    first.client.configureAppduct({ storage });
    const { link, sessionId } = mint(daemon);
    const connected = first.client.connect(link);
    const conn = await daemon.nextConnection();
    await conn.frame((f) => f.type === "session_claim", "the claim");
    conn.send(ack(sessionId, "rotated-1"));
    await connected;
    await within(
      new Promise<void>((resolve) => {
        const check = (): void => (storage.data.get("appduct:lease")?.includes("rotated-1") ? resolve() : void setTimeout(check, 5));
        check();
      }),
      5_000,
      "the stored lease",
    );
    const stored = JSON.parse(storage.data.get("appduct:lease") as string) as Record<string, unknown>;
    expect(stored).toMatchObject({ v: 1, sessionId, resumeToken: "rotated-1", alias: "iphone", transport: "sealed", staticKey: encodeBase64url(daemon.staticKey.publicKey) });

    // The reload: the old JavaScript world is gone without a goodbye.
    conn.ws.terminate();
    const second = client();
    // The auto entry restores before the app configures storage: nothing in memory...
    await expect(second.client.restoreSession()).resolves.toBe(false);
    // ...then configuring storage restores from it.
    second.client.configureAppduct({ storage });
    const resumed = await daemon.nextConnection();
    expect(await resumed.frame((f) => f.type === "session_resume", "the resume")).toMatchObject({ session_id: sessionId, resume_token: "rotated-1" });
    resumed.send(ack(sessionId, "rotated-2"));
    await within(
      new Promise<void>((resolve) => {
        const check = (): void => (second.client.getAppductState() === "active" ? resolve() : void setTimeout(check, 10));
        check();
      }),
      5_000,
      "the resumed session",
    );
    expect(second.client.getSessionId()).toBe(sessionId);
    expect(second.client.getSessionAlias()).toBe("iphone");
    await within(
      new Promise<void>((resolve) => {
        const check = (): void => (storage.data.get("appduct:lease")?.includes("rotated-2") ? resolve() : void setTimeout(check, 5));
        check();
      }),
      5_000,
      "the rotated lease",
    );
    // A disconnect removes the stored lease.
    await second.client.disconnect();
    await within(
      new Promise<void>((resolve) => {
        const check = (): void => (storage.data.has("appduct:lease") ? void setTimeout(check, 5) : resolve());
        check();
      }),
      5_000,
      "the lease removed",
    );
  });

  it("without an adapter nothing is stored: a reload has nothing to restore", async () => {
    const daemon = await startFakeSealedDaemon(cleanups);
    const first = client();
    const { link, sessionId } = mint(daemon);
    const connected = first.client.connect(link);
    const conn = await daemon.nextConnection();
    await conn.frame((f) => f.type === "session_claim", "the claim");
    conn.send(ack(sessionId, "r1"));
    await connected;
    await expect(client().client.restoreSession()).resolves.toBe(false);
  });

  it("a storage adapter that fails is reported and otherwise ignored; a malformed stored lease is removed", async () => {
    const warnings: unknown[] = [];
    const c = createReactNativeClient({ platform: IPHONE, webSocket: () => NodeWebSocket as unknown as WebSocketConstructor, dev: true });
    cleanups.push(() => c.disconnect());
    const origWarn = console.warn;
    console.warn = (...args: unknown[]) => warnings.push(args[0]);
    cleanups.push(() => {
      console.warn = origWarn;
    });
    c.configureAppduct({
      storage: {
        getItem: () => Promise.reject(new Error("disk on fire")),
        setItem: () => undefined,
        removeItem: () => undefined,
      },
    });
    await expect(c.restoreSession()).resolves.toBe(false);
    expect(warnings).toContain("appduct: reading the stored resume lease failed:");
    const storage = memoryStorage();
    storage.data.set("appduct:lease", '{"v":1,"transport":"sealed"}');
    c.configureAppduct({ storage });
    await expect(c.restoreSession()).resolves.toBe(false);
    await new Promise((r) => setTimeout(r, 10));
    expect(storage.data.has("appduct:lease")).toBe(false);
    expect(() => c.configureAppduct({ storage: {} as AppductStorage })).toThrow(TypeError);
  });
});
