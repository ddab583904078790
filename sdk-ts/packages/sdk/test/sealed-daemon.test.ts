// The React Native entry, run in Node with React Native's WebSocket played by `ws`, against the
// real daemon's sealed transport (the plain route of its wss port, bound to 127.0.0.1): a claim
// from a sealed link, a call with progress, a cancel reaching the handler's AbortSignal, a
// capture of every byte of the session (no tool name, argument, result or token in it), a
// reload that resumes through a storage adapter, and refusals. Links are minted by the CLI,
// `appduct sessions link --for react-native`, with the daemon's `advertisedIp` set to 127.0.0.1
// so every link points at loopback.

import path from "node:path";

import { afterEach, describe, expect, it } from "vitest";
import { WebSocket as NodeWebSocket } from "ws";

import { connect as connectTestClient } from "../src/client/index.js";
import { RpcConnection } from "../src/client/connection.js";
import { decodeSealedBootstrapPayload, encodeSealedBootstrapPayload } from "../src/core/bootstrap.js";
import type { AppductClient, AppductStorage, LinkRefusal } from "../src/core/types.js";
import { createSealedRandom } from "../src/core/sealed/random.js";
import { createReactNativeClient } from "../src/react-native/client.js";
import type { PlatformLike } from "../src/react-native/device.js";
import type { WebSocketConstructor } from "../src/web/transport.js";
import { watchDaemonEvents } from "./support/daemon-events.js";
import type { Cleanup } from "./support/fake-daemon.js";
import { startCapture } from "./support/fake-sealed-daemon.js";
import { waitForLine, within } from "./support/processes.js";
import { appductBin, startRealDaemon, type RealDaemon } from "./support/real-daemon.js";

const PIXEL: PlatformLike = { OS: "android", Version: 35, constants: { Manufacturer: "Google", Model: "Pixel 8" } };
const WAIT = 15_000;
const cleanups: Cleanup[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

interface Minted {
  sessionId: string;
  deepLink: string;
  transport: string;
}

/** Loopback only: links carry 127.0.0.1 and the wss port. */
const LOOPBACK_CONFIG = { wssPort: 0, advertisedIp: "127.0.0.1" };

async function control(daemon: RealDaemon): Promise<RpcConnection> {
  const rpc = await RpcConnection.open(path.join(daemon.stateDir, "daemon.sock"));
  cleanups.push(() => rpc.close());
  return rpc;
}

function payloadOf(deepLink: string): string {
  return new URL(deepLink).searchParams.get("appduct") as string;
}

/** `appduct sessions link --for react-native`, optionally re-pointed at `port` (a capture relay). */
async function mintSealed(daemon: RealDaemon, port?: number): Promise<{ minted: Minted; link: string; payload: string }> {
  const minted = await daemon.data<Minted>(["sessions", "link", "--for", "react-native", "--scheme", "rnapp"]);
  expect(minted.transport).toBe("sealed");
  expect(minted.deepLink).not.toContain("pin=");
  const payload = payloadOf(minted.deepLink);
  const decoded = decodeSealedBootstrapPayload(payload);
  if (!decoded) throw new Error(`not a sealed payload: ${minted.deepLink}`);
  expect(decoded.address).toBe("127.0.0.1");
  if (port === undefined) return { minted, link: minted.deepLink, payload };
  return { minted, link: `rnapp:///?appduct=${encodeSealedBootstrapPayload({ ...decoded, port })}`, payload };
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
    const daemon = await startRealDaemon(cleanups, LOOPBACK_CONFIG);
    const bus = await watchDaemonEvents(cleanups, daemon.stateDir);
    const rpc = await control(daemon);
    const probe = await mintSealed(daemon);
    const wssPort = (decodeSealedBootstrapPayload(probe.payload) as { port: number }).port;
    const capture = await startCapture(cleanups, wssPort);
    const { minted, link, payload } = await mintSealed(daemon, capture.port);

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
    const token = (decodeSealedBootstrapPayload(payload) as { tokenBase64url: string }).tokenBase64url;
    for (const secret of ["sealed_secret_echo", "sealed_wait_for_cancel", "argument-xyzzy", "result-argument", "progress-text-plugh", token, minted.sessionId, "session_claim", "tool_call", "Pixel 8"]) {
      expect(wire.includes(Buffer.from(secret)), secret).toBe(false);
    }
  }, 60_000);

  it("survives a full JavaScript reload through a storage adapter: same session id and alias, no new link", async () => {
    const daemon = await startRealDaemon(cleanups, LOOPBACK_CONFIG);
    const bus = await watchDaemonEvents(cleanups, daemon.stateDir);
    const { minted, link } = await mintSealed(daemon);
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
    // The first run has no CSPRNG (Hermes alone): its keys come from the DRBG.
    const first = createReactNativeClient({ platform: PIXEL, webSocket: () => Recording, dev: true, random: createSealedRandom({ forceDrbg: true }) });
    first.configureAppduct({ storage });
    first.registerTool({ name: "ping", description: "Pong.", outputSchema: { type: "object" }, handler: () => ({ pong: 1 }) });
    await first.connect(link);
    const alias = first.getSessionAlias();
    await until(() => data.get("appduct:lease")?.includes('"transport":"sealed"') === true, "the stored lease");
    const before = JSON.parse(data.get("appduct:lease") as string) as { resumeToken: string };
    const rpc = await control(daemon);
    const rngOf = async (): Promise<string> => {
      const described = await rpc.request<Record<string, unknown>>("sessions.describe", { selector: minted.sessionId }, { timeoutMs: WAIT });
      return (JSON.stringify(described).match(/"rng":"(\w+)"/) ?? [])[1] ?? "none";
    };
    expect(await rngOf()).toBe("drbg");

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
    // The reloaded app has a CSPRNG (as with react-native-get-random-values): the latest connection says so.
    expect(await rngOf()).toBe("csprng");
  }, 60_000);

  it("a native link given to the React Native entry: unsupported_link at once, and `sessions link --wait` reports the refusal", async () => {
    const daemon = await startRealDaemon(cleanups, LOOPBACK_CONFIG);
    const outcomes: { refusal: LinkRefusal; outcome: unknown }[] = [];
    const app = rnClient({ onRefusalSent: (refusal, outcome) => outcomes.push({ refusal, outcome }) });
    // The agent's side: mint a native link and wait for the app (human output: the link first).
    const waiter = daemon.spawnCli(["sessions", "link", "--for", "native", "--scheme", "rnapp", "--wait=600000"]);
    const stderr: string[] = [];
    waiter.stderr.on("data", (chunk: Buffer) => stderr.push(chunk.toString()));
    const exited = new Promise<number | null>((resolve) => waiter.once("exit", (code) => resolve(code)));
    const nativeLink = await waitForLine(waiter, waiter.stdout, (line) => /rnapp:\/\/\/\?appduct=\S+/.exec(line)?.[0], WAIT, "the minted link");
    expect(nativeLink).toContain("&pin=sha256%2F");
    const error = await app.connect(nativeLink).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: "unsupported_link" });
    expect((error as Error).message).toContain("--for react-native");
    await until(() => outcomes.length === 1, "the refusal to be sent");
    expect(outcomes[0]?.refusal).toMatchObject({ reason: "unsupported_link" });
    expect(outcomes[0]?.outcome).toEqual({ code: 1000, reason: "refusal_recorded" });
    // The wait ends at once (not after its 600 s): unknown_session (exit 71) naming the reason and the fix.
    expect(await within(exited, WAIT, "sessions link --wait to end")).toBe(71);
    expect(stderr.join("")).toContain("unsupported_link");
    expect(stderr.join("")).toContain("--for react-native");
  }, 60_000);
});
