// Connection lifecycle (§T2, §T7, §D13): connect(link) validation and trust, listener
// payloads and order, supersede, disconnect, close classification, pin mismatch, unknown
// frames, the resume lease and restoreSession, handleUrl, device fields, backoff.

import { describe, expect, it } from "vitest";

import { encodeBootstrapPayload } from "../src/core/bootstrap.js";
import { backoffDelayMs } from "../src/core/client.js";
import { createMemoryLeaseStore, parseLease } from "../src/core/lease.js";
import { AppductConnectError } from "../src/core/errors.js";
import { flush } from "./support/fake-transport.js";
import { ack, activate, makeHarness, SESSION, START_MS, startClaim } from "./support/harness.js";

const PIN = "sha256/+RAVLIC+EO4igKBMsBHOkTG5k0CK2xnPR/FJXDMbzbw=";
const OTHER_PIN = "sha256/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
const TOKEN = Uint8Array.from({ length: 32 }, (_, i) => i);
const TOKEN_TEXT = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8";

function payload(overrides: { address?: string; port?: number; sessionId?: string; expiresAt?: number } = {}): string {
  return encodeBootstrapPayload({
    address: overrides.address ?? "192.168.50.12",
    port: overrides.port ?? 8443,
    sessionId: overrides.sessionId ?? SESSION,
    token: TOKEN,
    expiresAt: overrides.expiresAt ?? START_MS / 1000 + 300,
  });
}
const deepLink = (p = payload(), pin: string | null = PIN): string => `shopdemo:///?appduct=${p}${pin ? `&pin=${encodeURIComponent(pin)}` : ""}`;

async function rejection(promise: Promise<unknown>): Promise<AppductConnectError> {
  try {
    await promise;
  } catch (error) {
    expect(error).toBeInstanceOf(AppductConnectError);
    return error as AppductConnectError;
  }
  throw new Error("expected a rejection");
}

describe("connect(link)", () => {
  it("claims over wss:// with the link's pin in link mode, logging a warning, and resolves on the ack", async () => {
    const h = makeHarness();
    const done = h.client.connect(deepLink());
    await flush();
    const socket = h.transport.newest;
    expect(socket.target).toEqual({ url: "wss://192.168.50.12:8443/", transport: "native", pins: [PIN] });
    expect(socket.frames[0]).toEqual({ type: "session_claim", protocol_version: 2, session_id: SESSION, token: TOKEN_TEXT });
    expect(h.warnings.some((w) => w.includes("link trust mode"))).toBe(true);
    socket.receive(ack());
    await expect(done).resolves.toBeUndefined();
    expect(h.client.getAppductState()).toBe("active");
    expect(h.client.getSessionId()).toBe(SESSION);
    expect(h.client.getSessionAlias()).toBe("phone");
  });

  it("refuses invalid links before touching anything", async () => {
    const h = makeHarness();
    expect((await rejection(h.client.connect("not a link"))).code).toBe("invalid_url");
    expect((await rejection(h.client.connect("myapp:///?pin=x"))).code).toBe("missing_payload");
    expect((await rejection(h.client.connect("myapp:///?appduct=AAAA"))).code).toBe("invalid_payload");
    expect((await rejection(h.client.connect(deepLink(payload({ expiresAt: START_MS / 1000 }))))).code).toBe("expired_payload");
    expect((await rejection(h.client.connect(deepLink(payload(), null)))).code).toBe("missing_pin");
    expect((await rejection(h.client.connect(deepLink(payload({ address: "8.8.8.8" }))))).code).toBe("address_not_allowed");
    expect((await rejection(h.client.connect(deepLink(payload({ address: "192.168.1.2" }), null), { transport: "web" }))).code).toBe("unsupported_link");
    expect(h.transport.sockets).toHaveLength(0);
    expect(h.states).toEqual([]);
  });

  it("ignores the link's pin when pins are configured (pin mode) and narrows to them", async () => {
    const h = makeHarness();
    h.client.configureAppduct({ pins: [OTHER_PIN] });
    void h.client.connect(deepLink()).catch(() => undefined);
    await flush();
    expect(h.transport.newest.target.pins).toEqual([OTHER_PIN]);
    void h.client.connect(deepLink(payload(), null)).catch(() => undefined);
    await flush();
    expect(h.transport.newest.target.pins).toEqual([OTHER_PIN]);
  });

  it("uses ws://127.0.0.1 for web-transport links and brackets IPv6 for native ones", async () => {
    const h = makeHarness();
    void h.client.connect(`http://localhost:5173/#appduct=${payload({ address: "127.0.0.1", port: 51234 })}`, { transport: "web" }).catch(() => undefined);
    await flush();
    expect(h.transport.newest.target).toEqual({ url: "ws://127.0.0.1:51234/", transport: "web", pins: [] });
    h.client.configureAppduct({ allowPrivateLanOnly: false });
    void h.client.connect(deepLink(payload({ address: "fd00::1" }))).catch(() => undefined);
    await flush();
    expect(h.transport.newest.target.url).toBe("wss://[fd00::1]:8443/");
  });

  it("rejects with connect_error and the close reason when the daemon refuses the claim", async () => {
    const h = makeHarness();
    const done = h.client.connect(deepLink());
    await flush();
    h.transport.newest.serverClose({ code: 1008, reason: "invalid_token" });
    const error = await rejection(done);
    expect(error.code).toBe("connect_error");
    expect(error.closeReason).toBe("invalid_token");
    expect(h.states.at(-1)).toEqual({ state: "closed", reason: "connect_error" });
    expect(h.errors).toEqual([{ phase: "connect", code: "connect_error", closeReason: "invalid_token", message: expect.any(String), isRetryable: false }]);
  });

  it("a pin mismatch is terminal: closed pin_mismatch, error listener, rejection, no retry", async () => {
    const h = makeHarness();
    const done = h.client.connect(deepLink());
    await flush();
    h.transport.newest.serverClose({ error: "pin_mismatch" });
    expect((await rejection(done)).code).toBe("pin_mismatch");
    expect(h.states.at(-1)).toEqual({ state: "closed", reason: "pin_mismatch" });
    expect(h.errors[0]).toMatchObject({ phase: "connect", code: "pin_mismatch" });
    h.clock.advance(60_000);
    await flush();
    expect(h.transport.sockets).toHaveLength(1);
  });

  it("a link naming the held session keeps it", async () => {
    const h = makeHarness();
    const socket = await activate(h);
    await h.client.connect(deepLink());
    expect(h.transport.sockets).toEqual([socket]);
    expect(h.client.getAppductState()).toBe("active");
  });
});

describe("listeners", () => {
  it("report state, session and error payloads in order: state, session, then aborts", async () => {
    const h = makeHarness();
    h.client.registerTool({
      name: "slow",
      description: "d",
      handler: (_a, ctx) => {
        ctx.signal.addEventListener("abort", () => h.timeline.push(`abort:${String(ctx.signal.reason)}`));
        return new Promise(() => undefined);
      },
    });
    const socket = await activate(h);
    expect(h.states).toEqual([{ state: "connecting" }, { state: "active" }]);
    expect(h.sessions).toEqual([{ type: "claimed", sessionId: SESSION, alias: "phone" }]);
    socket.receive({ type: "tool_call", session_id: SESSION, id: "c1", name: "slow", args: {} });
    await flush();
    socket.serverClose({ code: 1008, reason: "invalid_message" });
    expect(h.timeline).toEqual([
      "state:connecting",
      "state:active",
      "session:claimed",
      "state:closed:invalid_message",
      "session:lost:invalid_message",
      "abort:session_suspended",
      "error:invalid_message",
    ]);
    expect(h.sessions.at(-1)).toEqual({ type: "lost", sessionId: null, alias: null, reason: "invalid_message" });
  });

  it("a throwing listener is logged and does not stop the others", async () => {
    const h = makeHarness();
    h.client.addAppductListener("stateChange", () => {
      throw new Error("listener bug");
    });
    const seen: string[] = [];
    h.client.addAppductListener("stateChange", (e) => seen.push(e.state));
    await activate(h);
    expect(seen).toEqual(["connecting", "active"]);
    expect(h.logged.some((l) => l.includes("stateChange listener threw"))).toBe(true);
  });

  it("a removed listener is not called", async () => {
    const h = makeHarness();
    const seen: string[] = [];
    const reg = h.client.addAppductListener("stateChange", (e) => seen.push(e.state));
    reg.remove();
    await activate(h);
    expect(seen).toEqual([]);
  });
});

describe("session transitions", () => {
  it("an established socket closed with 1000 ends the session as revoked, without retry", async () => {
    const h = makeHarness();
    const socket = await activate(h);
    socket.serverClose({ code: 1000, reason: "revoked" });
    expect(h.states.at(-1)).toEqual({ state: "closed", reason: "revoked" });
    expect(h.sessions.at(-1)).toMatchObject({ type: "lost", reason: "revoked" });
    h.clock.advance(60_000);
    expect(h.transport.sockets).toHaveLength(1);
  });

  it("a resume closed with 1000 session_replaced during its handshake is retried", async () => {
    const h = makeHarness();
    const socket = await activate(h);
    socket.serverClose({ code: 1006 });
    h.clock.advance(250);
    await flush();
    h.transport.newest.serverClose({ code: 1000, reason: "session_replaced" });
    h.clock.advance(500);
    await flush();
    expect(h.transport.sockets).toHaveLength(3);
    expect(h.transport.newest.frames[0]).toMatchObject({ type: "session_resume", resume_token: "resume-1" });
  });

  it("a new valid link supersedes a held session", async () => {
    const h = makeHarness();
    h.client.registerTool({
      name: "slow",
      description: "d",
      handler: (_a, ctx) => {
        ctx.signal.addEventListener("abort", () => h.timeline.push(`abort:${String(ctx.signal.reason)}`));
        return new Promise(() => undefined);
      },
    });
    const old = await activate(h);
    old.receive({ type: "tool_call", session_id: SESSION, id: "c1", name: "slow", args: {} });
    await flush();
    h.timeline.length = 0;
    const next = h.client.connect(deepLink(payload({ sessionId: "session-2" })));
    expect(old.closedByApp).toEqual({ code: 1000, reason: "superseded" });
    expect(h.timeline).toEqual(["state:connecting", "session:lost:superseded", "abort:closed"]);
    await flush();
    expect(h.transport.newest.frames[0]).toMatchObject({ type: "session_claim", session_id: "session-2" });
    h.transport.newest.receive(ack({ session_id: "session-2" }));
    await next;
    expect(h.client.getSessionId()).toBe("session-2");
  });

  it("a pending connect rejects with superseded when a newer link arrives", async () => {
    const h = makeHarness();
    const first = h.client.connect(deepLink());
    await flush();
    void h.client.connect(deepLink(payload({ sessionId: "session-2" }))).catch(() => undefined);
    expect((await rejection(first)).code).toBe("superseded");
    expect(h.sessions).toEqual([]);
  });

  it("disconnect closes with 1000, reports closed_by_app and lost, and rejects a pending connect", async () => {
    const h = makeHarness();
    const socket = await activate(h);
    await h.client.disconnect();
    expect(socket.closedByApp).toEqual({ code: 1000, reason: "closed_by_app" });
    expect(h.states.at(-1)).toEqual({ state: "closed", reason: "closed_by_app" });
    expect(h.sessions.at(-1)).toEqual({ type: "lost", sessionId: null, alias: null, reason: "closed_by_app" });
    expect(h.errors).toEqual([]);
    const pending = h.client.connect(deepLink());
    await h.client.disconnect();
    expect((await rejection(pending)).code).toBe("closed_by_app");
    await h.client.disconnect();
    expect(h.states.filter((s) => s.state === "closed")).toHaveLength(2);
  });

  it("ignores frames of unknown type, unknown fields and non-JSON text (with a development warning)", async () => {
    const h = makeHarness({ dev: true });
    const socket = await activate(h);
    const count = socket.sent.length;
    socket.receive({ type: "future_frame", session_id: SESSION });
    socket.receive("not json");
    socket.receive("[1,2]");
    socket.receive({ type: "tool_cancel", session_id: SESSION, id: "nope", reason: "x", extra: 1 });
    expect(socket.sent.length).toBe(count);
    expect(h.client.getAppductState()).toBe("active");
    expect(h.warnings.filter((w) => w.includes("not JSON"))).toHaveLength(1);
  });

  it("backgrounding fires no error listener and a claim in progress keeps going", async () => {
    const h = makeHarness();
    const { socket } = await startClaim(h);
    h.client.setForeground(false);
    socket.receive(ack());
    expect(h.client.getAppductState()).toBe("active");
    expect(socket.closedByApp).toBeNull();
    h.client.setForeground(true);
    h.client.setForeground(false);
    expect(socket.closedByApp).toEqual({ code: 1001, reason: "app_backgrounded" });
    expect(h.errors).toEqual([]);
  });

  it("returning to the foreground after the grace window ends the session with grace_expired", async () => {
    const h = makeHarness();
    await activate(h);
    h.client.setForeground(false);
    // A frozen JavaScript context: the grace timer never ran; foregrounding checks the window.
    const now = h.clock.now();
    Object.assign(h.clock, { now: () => now + 11_000 });
    h.client.setForeground(true);
    expect(h.states.at(-1)).toEqual({ state: "closed", reason: "grace_expired" });
  });
});

describe("resume lease", () => {
  it("is written on every ack and on loss, and cleared on closed", async () => {
    const h = makeHarness();
    const socket = await activate(h);
    expect(parseLease(h.lease.read()!)).toEqual({
      v: 1,
      sessionId: SESSION,
      resumeToken: "resume-1",
      alias: "phone",
      graceS: 10,
      lostAt: null,
      endpoint: { address: "127.0.0.1", port: 8443 },
      transport: "native",
    });
    socket.serverClose({});
    expect(parseLease(h.lease.read()!)?.lostAt).toBe(START_MS);
    h.clock.advance(250);
    await flush();
    h.transport.newest.receive(ack({ resume_token: "resume-2" }));
    expect(parseLease(h.lease.read()!)).toMatchObject({ resumeToken: "resume-2", lostAt: null });
    await h.client.disconnect();
    expect(h.lease.read()).toBeNull();
  });

  it("restoreSession resumes from a valid lease, at once", async () => {
    const lease = createMemoryLeaseStore();
    lease.write(JSON.stringify({ v: 1, sessionId: SESSION, resumeToken: "r-9", alias: "phone", graceS: 600, lostAt: START_MS - 1000, endpoint: { address: "127.0.0.1", port: 51234 }, transport: "web" }));
    const h = makeHarness({ leaseStore: lease });
    await expect(h.client.restoreSession()).resolves.toBe(true);
    expect(h.client.getAppductState()).toBe("reconnecting");
    await flush();
    expect(h.transport.newest.target.url).toBe("ws://127.0.0.1:51234/");
    expect(h.transport.newest.frames[0]).toEqual({ type: "session_resume", protocol_version: 2, session_id: SESSION, resume_token: "r-9" });
    await expect(h.client.restoreSession()).resolves.toBe(false);
    h.transport.newest.receive(ack({ resume_token: "r-10" }));
    expect(h.sessions).toEqual([{ type: "resumed", sessionId: SESSION, alias: "phone" }]);
  });

  it("restoreSession returns false, deleting the lease, when it is missing, unreadable or expired", async () => {
    const h = makeHarness();
    await expect(h.client.restoreSession()).resolves.toBe(false);
    h.lease.write("{broken");
    await expect(h.client.restoreSession()).resolves.toBe(false);
    expect(h.lease.read()).toBeNull();
    h.lease.write(JSON.stringify({ v: 1, sessionId: SESSION, resumeToken: "r", alias: "a", graceS: 10, lostAt: START_MS - 10_000, endpoint: { address: "127.0.0.1", port: 1 }, transport: "web" }));
    await expect(h.client.restoreSession()).resolves.toBe(false);
    expect(h.lease.read()).toBeNull();
    expect(h.transport.sockets).toHaveLength(0);
  });
});

describe("resume lease pins (§T7.2)", () => {
  const nativeLease = (extra: Record<string, unknown> = {}): string =>
    JSON.stringify({ v: 1, sessionId: SESSION, resumeToken: "r-9", alias: "phone", graceS: 600, lostAt: null, endpoint: { address: "192.168.50.12", port: 8443 }, transport: "native", ...extra });

  it("a native lease stores the pins the session was established with", async () => {
    const h = makeHarness();
    const done = h.client.connect(deepLink());
    await flush();
    h.transport.newest.receive(ack());
    await done;
    expect(parseLease(h.lease.read()!)?.pins).toEqual([PIN]);
  });

  it("link trust mode resumes with the stored pins; pin mode with the configured ones, never the stored", async () => {
    const link = makeHarness({ leaseStore: storeWith(nativeLease({ pins: [PIN] })) });
    await expect(link.client.restoreSession()).resolves.toBe(true);
    await flush();
    expect(link.transport.newest.target).toEqual({ url: "wss://192.168.50.12:8443/", transport: "native", pins: [PIN] });
    expect(link.warnings.some((w) => w.includes("link trust mode"))).toBe(true);

    const pinned = makeHarness({ leaseStore: storeWith(nativeLease({ pins: [OTHER_PIN] })) });
    pinned.client.configureAppduct({ pins: [PIN] });
    await expect(pinned.client.restoreSession()).resolves.toBe(true);
    await flush();
    expect(pinned.transport.newest.target.pins).toEqual([PIN]);
  });

  it("a lease with malformed pins, pins on a non-native lease, or a disallowed address is discarded without a socket", async () => {
    const bad = [
      nativeLease({ pins: [] }),
      nativeLease({ pins: "sha256/+RAVLIC+EO4igKBMsBHOkTG5k0CK2xnPR/FJXDMbzbw=" }),
      nativeLease({ pins: ["sha256/short="] }),
      nativeLease({ pins: [PIN, 7] }),
      nativeLease({ pins: Array.from({ length: 33 }, () => PIN) }),
      JSON.stringify({ ...JSON.parse(nativeLease()), transport: "web", endpoint: { address: "127.0.0.1", port: 1 }, pins: [PIN] }),
      nativeLease({ pins: [PIN], endpoint: { address: "8.8.8.8", port: 8443 } }),
      JSON.stringify({ ...JSON.parse(nativeLease()), transport: "web", endpoint: { address: "192.168.50.12", port: 1 } }),
    ];
    for (const raw of bad) {
      const h = makeHarness({ leaseStore: storeWith(raw) });
      await expect(h.client.restoreSession(), raw).resolves.toBe(false);
      expect(h.lease.read(), raw).toBeNull();
      expect(h.transport.sockets, raw).toHaveLength(0);
      expect(h.client.getAppductState()).toBe("idle");
    }
  });

  it("in link trust mode, a native lease without pins (an older SDK's) is discarded with a warning", async () => {
    const h = makeHarness({ leaseStore: storeWith(nativeLease()) });
    await expect(h.client.restoreSession()).resolves.toBe(false);
    expect(h.lease.read()).toBeNull();
    expect(h.transport.sockets).toHaveLength(0);
    expect(h.warnings.some((w) => w.includes("carries no pin"))).toBe(true);
    // In pin mode the same lease restores with the configured pins.
    const pinned = makeHarness({ leaseStore: storeWith(nativeLease()) });
    pinned.client.configureAppduct({ pins: [PIN] });
    await expect(pinned.client.restoreSession()).resolves.toBe(true);
  });
});

function storeWith(raw: string): ReturnType<typeof createMemoryLeaseStore> {
  const store = createMemoryLeaseStore();
  store.write(raw);
  return store;
}

describe("handleUrl", () => {
  it("returns false for URLs without an appduct parameter", () => {
    const h = makeHarness();
    expect(h.client.handleUrl("shopdemo:///cart?item=1")).toBe(false);
    expect(h.transport.sockets).toHaveLength(0);
  });

  it("returns true and reports an invalid link to the error listener (phase bootstrap)", () => {
    const h = makeHarness();
    expect(h.client.handleUrl("shopdemo:///?appduct=AAAA")).toBe(true);
    expect(h.errors).toEqual([{ phase: "bootstrap", code: "invalid_payload", message: expect.any(String) }]);
  });

  it("returns true and starts connecting for a valid link", async () => {
    const h = makeHarness();
    expect(h.client.handleUrl(deepLink())).toBe(true);
    await flush();
    expect(h.client.getAppductState()).toBe("connecting");
    expect(h.transport.newest.frames[0]).toMatchObject({ type: "session_claim" });
  });
});

describe("configuration and device fields", () => {
  it("rejects trust pin without pins, unknown trust values and malformed pins", () => {
    const { client } = makeHarness();
    expect(() => client.configureAppduct({ trust: "pin" })).toThrow(TypeError);
    expect(() => client.configureAppduct({ trust: "tofu" as never })).toThrow(TypeError);
    expect(() => client.configureAppduct({ pins: ["sha256/short="] })).toThrow(TypeError);
    expect(() => client.configureAppduct({ trust: "pin", pins: [PIN] })).not.toThrow();
  });

  it("sends device fields cut to 256 UTF-16 units, omitting empty ones; overrides affect the next claim", async () => {
    const h = makeHarness({ device: { manufacturer: "", model: `${"m".repeat(255)}😀`, os: "Android 15" } });
    const { socket } = await startClaim(h);
    expect(socket.frames[0]).toEqual({ type: "session_claim", protocol_version: 2, session_id: SESSION, token: "claim-token", device_model: "m".repeat(255), device_os: "Android 15" });
    h.client.configureAppduct({ device: { manufacturer: "Samsung" } });
    const next = await startClaim(h, "session-2");
    expect(next.socket.frames[0]).toMatchObject({ device_manufacturer: "Samsung", device_os: "Android 15" });
  });
});

describe("backoff", () => {
  it("is floor(r * min(30000, 500 * 2^a))", () => {
    expect([0, 1, 2].map((a) => backoffDelayMs(a, 0.5))).toEqual([250, 500, 1000]);
    expect(backoffDelayMs(6, 0.5)).toBe(15_000);
    expect(backoffDelayMs(20, 0.999)).toBe(29_970);
    expect(backoffDelayMs(3, 0)).toBe(0);
  });
});
