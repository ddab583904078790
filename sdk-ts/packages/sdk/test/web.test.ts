// @vitest-environment jsdom
// The web entry (§T9) in jsdom with a fake WebSocket: the fragment is removed before the
// claim, the sessionStorage lease lets a reload resume, window.__APPDUCT__ connects a loaded page.

import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";

import { encodeBootstrapPayload } from "../src/core/bootstrap.js";
import { SDK_VERSION } from "../src/core/version.js";
import { browserDevice } from "../src/web/device.js";
import { createWebSocketTransport, type WebSocketLike } from "../src/web/transport.js";
import { flush } from "./support/fake-transport.js";

class FakeWebSocket implements WebSocketLike {
  static instances: FakeWebSocket[] = [];
  onopen: ((event: unknown) => void) | null = null;
  onmessage: ((event: { data: unknown }) => void) | null = null;
  onclose: ((event: { code?: number; reason?: string }) => void) | null = null;
  onerror: ((event: unknown) => void) | null = null;
  readonly sent: Record<string, unknown>[] = [];
  closedWith: [number | undefined, string | undefined] | null = null;
  /** The page's address when this socket was created. */
  readonly pageHref = window.location.href;

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

const TOKEN = Uint8Array.from({ length: 32 }, (_, i) => i);
const payload = (address = "127.0.0.1", sessionId = "web-session"): string =>
  encodeBootstrapPayload({ address, port: 51234, sessionId, token: TOKEN, expiresAt: Math.floor(Date.now() / 1000) + 300 });
const ack = { type: "session_ack", session_id: "web-session", status: "ok", alias: "chrome", resume_token: "resume-1", keepalive_interval_s: 15, grace_s: 600, event_registry: true };

async function importEntry(): Promise<typeof import("../src/web/index.js")> {
  vi.resetModules();
  return import("../src/web/index.js");
}

beforeEach(() => {
  FakeWebSocket.instances = [];
  (globalThis as { WebSocket?: unknown }).WebSocket = FakeWebSocket;
  window.sessionStorage.clear();
  delete (window as { __APPDUCT__?: unknown }).__APPDUCT__;
  window.history.replaceState(null, "", "/");
});

afterEach(() => {
  vi.restoreAllMocks();
});

describe("page flow", () => {
  it("removes appduct from the fragment before claiming, keeping other parameters", async () => {
    window.history.replaceState({ keep: 1 }, "", `/cart?x=1#tab=2&appduct=${payload()}&y=3`);
    const replace = vi.spyOn(window.history, "replaceState");
    const web = await importEntry();
    expect(replace).toHaveBeenCalledTimes(1);
    expect(window.location.href).toBe("http://localhost:3000/cart?x=1#tab=2&y=3");
    expect(window.history.state).toEqual({ keep: 1 });
    const socket = FakeWebSocket.instances[0] as FakeWebSocket;
    // The token had left the address bar before the socket was created.
    expect(socket.pageHref).toBe("http://localhost:3000/cart?x=1#tab=2&y=3");
    await flush();
    expect(socket.url).toBe("ws://127.0.0.1:51234/");
    expect(socket.sent[0]).toMatchObject({ type: "session_claim", session_id: "web-session", token: "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8" });
    socket.receive(ack);
    expect(web.getAppductState()).toBe("active");
    expect(JSON.parse(window.sessionStorage.getItem("appduct:lease") as string)).toEqual({
      v: 1,
      sessionId: "web-session",
      resumeToken: "resume-1",
      alias: "chrome",
      graceS: 600,
      lostAt: null,
      endpoint: { address: "127.0.0.1", port: 51234 },
      transport: "web",
    });
  });

  it("drops the fragment entirely when appduct was its only parameter", async () => {
    window.history.replaceState(null, "", `/page#appduct=${payload()}`);
    await importEntry();
    expect(window.location.href).toBe("http://localhost:3000/page");
  });

  it("writes the loss time to the lease on a drop and clears it on disconnect", async () => {
    const web = await importEntry();
    const connected = web.connect(payload());
    await flush();
    const socket = FakeWebSocket.instances[0] as FakeWebSocket;
    socket.receive(ack);
    await connected;
    socket.onclose?.({ code: 1006 });
    expect(web.getAppductState()).toBe("reconnecting");
    expect(JSON.parse(window.sessionStorage.getItem("appduct:lease") as string)).toMatchObject({ resumeToken: "resume-1", lostAt: expect.any(Number) });
    await web.disconnect();
    expect(window.sessionStorage.getItem("appduct:lease")).toBeNull();
  });

  it("resumes from the tab's lease when the page loads", async () => {
    window.sessionStorage.setItem(
      "appduct:lease",
      JSON.stringify({ v: 1, sessionId: "web-session", resumeToken: "resume-7", alias: "chrome", graceS: 600, lostAt: null, endpoint: { address: "127.0.0.1", port: 51234 }, transport: "web" }),
    );
    const web = await importEntry();
    expect(web.getAppductState()).toBe("reconnecting");
    await flush();
    const socket = FakeWebSocket.instances[0] as FakeWebSocket;
    expect(socket.sent[0]).toEqual({ type: "session_resume", protocol_version: 2, session_id: "web-session", resume_token: "resume-7" });
    socket.receive({ ...ack, resume_token: "resume-8" });
    expect(web.getAppductState()).toBe("active");
    expect(web.getSessionAlias()).toBe("chrome");
    await web.disconnect();
  });

  it("deletes an expired or unreadable lease and opens nothing", async () => {
    window.sessionStorage.setItem(
      "appduct:lease",
      JSON.stringify({ v: 1, sessionId: "s", resumeToken: "r", alias: "a", graceS: 1, lostAt: Date.now() - 5000, endpoint: { address: "127.0.0.1", port: 1 }, transport: "web" }),
    );
    const web = await importEntry();
    expect(window.sessionStorage.getItem("appduct:lease")).toBeNull();
    window.sessionStorage.setItem("appduct:lease", "{nope");
    await expect(web.restoreSession()).resolves.toBe(false);
    expect(window.sessionStorage.getItem("appduct:lease")).toBeNull();
    await flush();
    expect(FakeWebSocket.instances).toHaveLength(0);
  });

  it("with a storage adapter configured after load, resumes from it instead of sessionStorage (issue #23)", async () => {
    const stored = new Map<string, string>([
      ["appduct:lease", JSON.stringify({ v: 1, sessionId: "web-session", resumeToken: "resume-stored", alias: "chrome", graceS: 600, lostAt: null, endpoint: { address: "127.0.0.1", port: 51234 }, transport: "web" })],
    ]);
    const web = await importEntry();
    await flush();
    expect(FakeWebSocket.instances).toEqual([]);
    web.configureAppduct({ storage: { getItem: async (k) => stored.get(k) ?? null, setItem: async (k, v) => void stored.set(k, v), removeItem: async (k) => void stored.delete(k) } });
    await flush(6);
    const socket = FakeWebSocket.instances[0] as FakeWebSocket;
    expect(socket.sent[0]).toEqual({ type: "session_resume", protocol_version: 2, session_id: "web-session", resume_token: "resume-stored" });
    socket.receive({ ...ack, resume_token: "resume-next" });
    await flush(6);
    expect(JSON.parse(stored.get("appduct:lease") as string)).toMatchObject({ resumeToken: "resume-next" });
    expect(window.sessionStorage.getItem("appduct:lease")).toBe(null);
    await web.disconnect();
  });

  it("refuses a sealed link: the web entry stays on the loopback web listener", async () => {
    const web = await importEntry();
    const key = Uint8Array.from({ length: 32 }, (_, i) => i + 1);
    const { encodeSealedBootstrapPayload } = await import("../src/core/bootstrap.js");
    const sealed = encodeSealedBootstrapPayload({ address: "192.168.1.20", port: 8443, sessionId: "s", token: TOKEN, expiresAt: Math.floor(Date.now() / 1000) + 300, staticKey: key });
    await expect(web.connect(sealed)).rejects.toMatchObject({ code: "unsupported_link" });
    expect(FakeWebSocket.instances).toEqual([]);
  });

  it("defines window.__APPDUCT__ to connect a loaded page", async () => {
    await importEntry();
    const global = (window as { __APPDUCT__?: { connect(link: string): Promise<void>; version: string } }).__APPDUCT__;
    expect(global?.version).toBe(SDK_VERSION);
    const done = global!.connect(payload());
    await flush();
    (FakeWebSocket.instances[0] as FakeWebSocket).receive(ack);
    await expect(done).resolves.toBeUndefined();
  });

  it("refuses links it cannot follow: a non-loopback address or the native transport", async () => {
    const web = await importEntry();
    await expect(web.connect(payload("192.168.1.2"))).rejects.toMatchObject({ code: "unsupported_link", message: expect.stringContaining("cannot verify a pin") });
    await expect(web.connect(payload(), { transport: "native" })).rejects.toMatchObject({ code: "unsupported_link" });
    expect(FakeWebSocket.instances).toHaveLength(0);
  });

  it("closes with codes a browser accepts", async () => {
    const socket = createWebSocketTransport(() => FakeWebSocket)({ url: "ws://127.0.0.1:1/", transport: "web", pins: [] });
    socket.close(1001, "app_backgrounded");
    expect((FakeWebSocket.instances[0] as FakeWebSocket).closedWith).toEqual([1000, "app_backgrounded"]);
    const other = createWebSocketTransport(() => FakeWebSocket)({ url: "ws://127.0.0.1:1/", transport: "web", pins: [] });
    other.close(4000, "x");
    expect((FakeWebSocket.instances[1] as FakeWebSocket).closedWith).toEqual([4000, "x"]);
  });
});

describe("browser device fields", () => {
  it("names the browser from client hints or the user agent, and the platform", () => {
    expect(browserDevice({ userAgentData: { brands: [{ brand: "Not A Brand" }, { brand: "Microsoft Edge" }, { brand: "Chromium" }], platform: "Windows" } })).toEqual({
      model: "Edge",
      os: "Windows",
    });
    expect(browserDevice({ userAgentData: { brands: [{ brand: "Google Chrome" }], platform: "macOS" } })).toEqual({ model: "Chrome", os: "macOS" });
    const ua = (userAgent: string): string | undefined => browserDevice({ userAgent, platform: "MacIntel" }).model;
    expect(ua("Mozilla/5.0 (Macintosh) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Safari/605.1.15")).toBe("Safari");
    expect(ua("Mozilla/5.0 (X11; Linux x86_64; rv:125.0) Gecko/20100101 Firefox/125.0")).toBe("Firefox");
    expect(ua("Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0 Safari/537.36 Edg/124.0")).toBe("Edge");
    expect(ua("Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0 Safari/537.36")).toBe("Chrome");
    expect(ua("curl/8")).toBe("Browser");
    expect(browserDevice({ userAgent: "x", platform: "Linux x86_64" }).os).toBe("Linux x86_64");
  });
});
