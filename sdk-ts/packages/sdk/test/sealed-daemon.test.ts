// The React Native entry, run in Node with React Native's WebSocket played by `ws`, against the
// real daemon's sealed transport (the plain route of its wss port, bound to 127.0.0.1): a claim
// from a sealed link, a call with progress, a cancel reaching the handler's AbortSignal, a
// capture of every byte of the session (no tool name, argument, result or token in it), a
// reload that resumes through a storage adapter, and refusals. Links are minted with
// `link.create {transport: "sealed", addressOverride: "127.0.0.1"}` on the control socket.

import path from "node:path";

import { afterEach, describe, expect, it } from "vitest";
import { WebSocket as NodeWebSocket } from "ws";

import { connect as connectTestClient } from "../src/client/index.js";
import { RpcConnection } from "../src/client/connection.js";
import { decodeSealedBootstrapPayload, encodeSealedBootstrapPayload } from "../src/core/bootstrap.js";
import type { AppductClient, AppductStorage, LinkRefusal } from "../src/core/types.js";
import { createReactNativeClient } from "../src/react-native/client.js";
import type { PlatformLike } from "../src/react-native/device.js";
import type { WebSocketConstructor } from "../src/web/transport.js";
import { watchDaemonEvents } from "./support/daemon-events.js";
import type { Cleanup } from "./support/fake-daemon.js";
import { startCapture } from "./support/fake-sealed-daemon.js";
import { within } from "./support/processes.js";
import { appductBin, startRealDaemon, type RealDaemon } from "./support/real-daemon.js";

const PIXEL: PlatformLike = { OS: "android", Version: 35, constants: { Manufacturer: "Google", Model: "Pixel 8" } };
const WAIT = 15_000;
const cleanups: Cleanup[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

interface Minted {
  sessionId: string;
  deepLinkPayload: string;
  transport: string;
  sealedKey?: string;
}

async function control(daemon: RealDaemon): Promise<RpcConnection> {
  const rpc = await RpcConnection.open(path.join(daemon.stateDir, "daemon.sock"));
  cleanups.push(() => rpc.close());
  return rpc;
}

/** A sealed link to 127.0.0.1, optionally re-pointed at `port` (a capture relay). */
async function mintSealed(rpc: RpcConnection, port?: number): Promise<{ minted: Minted; link: string }> {
  const minted = await rpc.request<Minted>("link.create", { transport: "sealed", addressOverride: "127.0.0.1" }, { timeoutMs: WAIT });
  expect(minted.transport).toBe("sealed");
  if (port === undefined) return { minted, link: `rnapp:///?appduct=${minted.deepLinkPayload}` };
  const decoded = decodeSealedBootstrapPayload(minted.deepLinkPayload);
  if (!decoded) throw new Error(`not a sealed payload: ${minted.deepLinkPayload}`);
  return { minted, link: `rnapp:///?appduct=${encodeSealedBootstrapPayload({ ...decoded, port })}` };
}

function rnClient(extra: Partial<Parameters<typeof createReactNativeClient>[0]> = {}): AppductClient {
  const client = createReactNativeClient({ platform: PIXEL, webSocket: () => NodeWebSocket as unknown as WebSocketConstructor, dev: true, ...extra });
  cleanups.push(() => client.disconnect());
  return client;
}

function until(check: () => boolean, what: string): Promise<void> {
  return within(
    new Promise<void>((resolve) => {
      const tick = (): void => (check() ? resolve() : void setTimeout(tick, 10));
      tick();
    }),
    WAIT,
    what,
  );
}

describe("against the real daemon's sealed transport", () => {
  it("claims a sealed link, serves a call with progress and a cancel, and no tool name, argument, result or token crosses the wire", async () => {
    const daemon = await startRealDaemon(cleanups);
    const bus = await watchDaemonEvents(cleanups, daemon.stateDir);
    const rpc = await control(daemon);
    const probe = await mintSealed(rpc);
    const wssPort = (decodeSealedBootstrapPayload(probe.minted.deepLinkPayload) as { port: number }).port;
    const capture = await startCapture(cleanups, wssPort);
    const { minted, link } = await mintSealed(rpc, capture.port);

    const app = rnClient();
    let abortSeen: () => void = () => undefined;
    const aborted = new Promise<void>((resolve) => (abortSeen = resolve));
    let started: () => void = () => undefined;
    const slowStarted = new Promise<void>((resolve) => (started = resolve));
    app.registerTool({
      name: "sealed_secret_echo",
      description: "Echoes its text, reporting progress first.",
      inputSchema: { type: "object", properties: { text: { type: "string" } }, required: ["text"] },
      outputSchema: { type: "object", properties: { echo: { type: "string" } } },
      handler: async (args, ctx) => {
        await ctx.reportProgress(0.5, "progress-text-plugh");
        return { echo: `result-${(args as { text: string }).text}` };
      },
    });
    app.registerTool({
      name: "sealed_wait_for_cancel",
      description: "Waits until cancelled.",
      handler: (_args, ctx) =>
        new Promise((_resolve, reject) => {
          started();
          ctx.signal.addEventListener("abort", () => {
            abortSeen();
            reject(new Error("aborted"));
          });
        }),
    });

    await app.connect(link);
    expect(app.getSessionId()).toBe(minted.sessionId);
    const claimed = await bus.waitFor((e) => e.kind === "session_claimed" && e.sessionId === minted.sessionId, WAIT, "session_claimed");
    expect(claimed.data).toMatchObject({ transport: "sealed" });
    await bus.waitFor((e) => e.kind === "tools_changed" && e.sessionId === minted.sessionId && e.data.toolCount === 2, WAIT, "tools_changed");

    const tester = await connectTestClient({ selector: minted.sessionId, stateDir: daemon.stateDir, bin: appductBin(), autoSpawn: false });
    cleanups.push(() => tester.close());
    const progress: unknown[] = [];
    await expect(tester.call("sealed_secret_echo", { text: "argument-xyzzy" }, { onProgress: (p) => progress.push(p) })).resolves.toEqual({ echo: "result-argument-xyzzy" });
    expect(progress).toEqual([{ progress: 0.5, message: "progress-text-plugh" }]);

    const abort = new AbortController();
    const cancelled = tester.call("sealed_wait_for_cancel", {}, { signal: abort.signal }).catch((e: unknown) => e);
    await within(slowStarted, WAIT, "the slow handler to start");
    abort.abort();
    await within(aborted, WAIT, "the handler's AbortSignal");
    expect(await cancelled).toMatchObject({ type: "tool_cancelled" });

    const described = await rpc.request<{ session: { rng?: string; transport?: string } } | { rng?: string }>("sessions.describe", { selector: minted.sessionId }, { timeoutMs: WAIT });
    expect(JSON.stringify(described)).toContain('"rng":"csprng"');

    const wire = capture.bytes();
    expect(wire.length).toBeGreaterThan(1000);
    const token = (decodeSealedBootstrapPayload(minted.deepLinkPayload) as { tokenBase64url: string }).tokenBase64url;
    for (const secret of ["sealed_secret_echo", "sealed_wait_for_cancel", "argument-xyzzy", "result-argument", "progress-text-plugh", token, minted.sessionId, "session_claim", "tool_call", "Pixel 8"]) {
      expect(wire.includes(Buffer.from(secret)), secret).toBe(false);
    }
  }, 60_000);

  it("survives a full JavaScript reload through a storage adapter: same session id and alias, no new link", async () => {
    const daemon = await startRealDaemon(cleanups);
    const bus = await watchDaemonEvents(cleanups, daemon.stateDir);
    const rpc = await control(daemon);
    const { minted, link } = await mintSealed(rpc);
    const data = new Map<string, string>();
    const storage: AppductStorage = {
      getItem: async (key) => data.get(key) ?? null,
      setItem: async (key, value) => void data.set(key, value),
      removeItem: async (key) => void data.delete(key),
    };
    const opened: NodeWebSocket[] = [];
    const Recording = class extends NodeWebSocket {
      constructor(url: string) {
        super(url);
        opened.push(this);
      }
    } as unknown as WebSocketConstructor;
    const first = createReactNativeClient({ platform: PIXEL, webSocket: () => Recording, dev: true });
    first.configureAppduct({ storage });
    first.registerTool({ name: "ping", description: "Pong.", outputSchema: { type: "object" }, handler: () => ({ pong: 1 }) });
    await first.connect(link);
    const alias = first.getSessionAlias();
    await until(() => data.get("appduct:lease")?.includes('"transport":"sealed"') === true, "the stored lease");
    const before = JSON.parse(data.get("appduct:lease") as string) as { resumeToken: string };

    // The reload: the old JavaScript world stops without a goodbye; its socket just drops.
    for (const ws of opened.splice(0)) ws.terminate();
    await bus.waitFor((e) => e.kind === "session_suspended" && e.sessionId === minted.sessionId, WAIT, "session_suspended");

    const second = rnClient();
    second.registerTool({ name: "ping", description: "Pong.", outputSchema: { type: "object" }, handler: () => ({ pong: 2 }) });
    await expect(second.restoreSession()).resolves.toBe(false);
    second.configureAppduct({ storage });
    await bus.waitFor((e) => e.kind === "session_resumed" && e.sessionId === minted.sessionId, WAIT, "session_resumed");
    await until(() => second.getAppductState() === "active", "the resumed session");
    expect(second.getSessionId()).toBe(minted.sessionId);
    expect(second.getSessionAlias()).toBe(alias);
    await until(() => {
      const lease = data.get("appduct:lease");
      return lease !== undefined && (JSON.parse(lease) as { resumeToken: string }).resumeToken !== before.resumeToken;
    }, "the rotated resume token stored");
    const tester = await connectTestClient({ selector: minted.sessionId, stateDir: daemon.stateDir, bin: appductBin(), autoSpawn: false });
    cleanups.push(() => tester.close());
    await expect(tester.call("ping", {})).resolves.toEqual({ pong: 2 });
  }, 60_000);

  it("a native link given to the React Native entry: unsupported_link at once, and the refusal reaches the daemon", async () => {
    const daemon = await startRealDaemon(cleanups);
    const outcomes: { refusal: LinkRefusal; outcome: unknown }[] = [];
    const app = rnClient({ onRefusalSent: (refusal, outcome) => outcomes.push({ refusal, outcome }) });
    const rpc = await control(daemon);
    const native = await rpc.request<{ sessionId: string; deepLinkPayload: string; pin: string }>("link.create", { addressOverride: "127.0.0.1" }, { timeoutMs: WAIT });
    const nativeLink = `rnapp:///?appduct=${native.deepLinkPayload}&pin=${encodeURIComponent(native.pin)}`;
    const error = await app.connect(nativeLink).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: "unsupported_link" });
    expect((error as Error).message).toContain("--for react-native");
    await until(() => outcomes.length === 1, "the refusal to be sent");
    expect(outcomes[0]?.refusal).toMatchObject({ reason: "unsupported_link", sessionId: native.sessionId });
    // The frame reached the daemon's plain route and was answered. Recording it (`1000
    // refusal_recorded`, ending `sessions link --wait`) is the `ready` branch's daemon side, not
    // merged into this branch: this daemon still reads a text first frame as a cleartext claim.
    expect([
      { code: 1000, reason: "refusal_recorded" },
      { code: 1008, reason: "expected_sealed_handshake" },
    ]).toContainEqual(outcomes[0]?.outcome);
  }, 60_000);
});
