// The test-runner client against the real `appduct` binary (§T15): the Node playground device
// (a separate process) and an in-process probe device built on the Node transport serve the
// tools; the client links, waits for sessions, lists and calls tools, cancels, and waits for
// events. Every process is stopped in afterAll, also after a failure.

import { existsSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";

import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";

import { connect, link, waitForSession, AppductError, type AppClient, type CallProgress, type DeviceLinkResult } from "../src/client/index.js";
import { createAppductClient } from "../src/core/client.js";
import type { AppductClient, TransportFactory, TransportSocket } from "../src/core/types.js";
import { createNodeTransport } from "../src/node/transport.js";
import { createSandbox, within, type Device, type Sandbox } from "./support/appduct-sandbox.js";

/** `reset_counter` is destructive: denied, so `policy_denied` can be observed. */
const CONFIG = { wssPort: 0, advertisedIp: "127.0.0.1", policy: { destructive: "deny" } };
const WAIT = 15_000;
const quiet = { warn: () => undefined, error: () => undefined };

let sb: Sandbox;
const closers: (() => Promise<unknown>)[] = [];

beforeAll(() => {
  sb = createSandbox(CONFIG);
});

afterAll(async () => {
  for (const close of closers.splice(0).reverse()) await close().catch(() => undefined);
  await sb?.stop();
});

async function rejection(promise: Promise<unknown>): Promise<AppductError> {
  const error = await promise.then(
    () => {
      throw new Error("expected a rejection");
    },
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(AppductError);
  return error as AppductError;
}

async function mint(scheme: string): Promise<DeviceLinkResult> {
  return (await link({ stateDir: sb.stateDir, bin: sb.bin, scheme, cwd: sb.stateDir })) as DeviceLinkResult;
}

/**
 * A claim comes before the device's first registry snapshot (§C13.1: `session_claimed` before
 * `tools_changed`), so a session just claimed may list no tools yet: wait for them.
 */
async function untilTools(app: AppClient, count: number): Promise<void> {
  await vi.waitFor(async () => expect(await app.tools()).toHaveLength(count), { timeout: WAIT, interval: 20 });
}

/** Records every frame the daemon sends to a device. */
function recording(factory: TransportFactory, frames: Record<string, unknown>[]): TransportFactory {
  return (target) => {
    const inner = factory(target);
    const outer: TransportSocket = {
      send: (text) => inner.send(text),
      close: (code, reason) => inner.close(code, reason),
      startKeepalive: (ms) => inner.startKeepalive?.(ms),
      onopen: null,
      onmessage: null,
      onclose: null,
    };
    inner.onopen = () => outer.onopen?.();
    inner.onmessage = (text) => {
      frames.push(JSON.parse(text) as Record<string, unknown>);
      outer.onmessage?.(text);
    };
    inner.onclose = (event) => outer.onclose?.(event);
    return outer;
  };
}

describe("reaching the daemon", () => {
  it("autoSpawn: false with no daemon is connection_error and starts nothing", async () => {
    const empty = mkdtempSync(path.join(os.tmpdir(), "adc-none-"));
    try {
      expect((await rejection(connect({ stateDir: empty, autoSpawn: false, bin: sb.bin }))).type).toBe("connection_error");
      expect(existsSync(path.join(empty, "daemon.sock"))).toBe(false);
    } finally {
      rmSync(empty, { recursive: true, force: true });
    }
  });

  it("connect spawns the daemon with `daemon start`, then fails fast with no_session", async () => {
    expect(existsSync(path.join(sb.stateDir, "daemon.sock"))).toBe(false);
    expect((await rejection(connect({ stateDir: sb.stateDir, bin: sb.bin }))).type).toBe("no_session");
    expect(existsSync(path.join(sb.stateDir, "daemon.sock"))).toBe(true);
  }, 30_000);
});

describe("with the Node playground device", () => {
  let device: Device;
  let app: AppClient;

  beforeAll(async () => {
    const minted = await mint("playground");
    const waiting = waitForSession(minted.sessionId, { stateDir: sb.stateDir, bin: sb.bin, timeoutMs: WAIT });
    device = sb.playground(minted.deepLink, ["--pins", minted.pin as string]);
    app = await waiting;
    closers.push(() => app.close());
    const claim = await device.waitForLine({ listener: "sessionChange", type: "claimed" }, WAIT);
    expect(claim.sessionId).toBe(minted.sessionId);
    expect(app.sessionId).toBe(minted.sessionId);
    expect(app.alias).toBe(claim.alias);
    // Issue #23: the wait ends once the registry arrived, so the tools are there at once.
    expect(app.registry).toBe("received");
    expect(await app.tools()).toHaveLength(5);
  }, 30_000);

  it("lists the playground contract with group and policy", async () => {
    const tools = await app.tools();
    expect(tools.map((t) => [t.name, t.group, t.policy])).toEqual([
      ["call_count", "counter", "allow"],
      ["reset_counter", "counter", "deny"],
      ["slow_task", "diagnostics/progress", "allow"],
      ["sum", null, "allow"],
      ["throwing_tool", "diagnostics", "allow"],
    ]);
    const sum = tools.find((t) => t.name === "sum");
    expect(JSON.stringify(sum?.input_schema)).toBe('{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}},"required":["a","b"],"additionalProperties":false}');
    expect(tools.find((t) => t.name === "slow_task")?.timeout_ms).toBe(5000);
  });

  it("calls tools: results, tool_execution_error and tool_not_found", async () => {
    expect(await app.call("sum", { a: 1.5, b: 2 })).toEqual({ total: 3.5 });
    expect(await app.call("call_count")).toEqual({ count: 1 });
    expect(await rejection(app.call("throwing_tool", {}, { callId: "throw-1" }))).toMatchObject({
      type: "tool_execution_error",
      message: "throwing_tool always fails on purpose.",
      details: { name: "Error" },
      callId: "throw-1",
    });
    expect(await rejection(app.call("no_such_tool", {}, { callId: "nf-1" }))).toMatchObject({ type: "tool_not_found", callId: "nf-1" });
    expect(await rejection(app.call("sum", { a: "x", b: 1 }))).toMatchObject({ type: "tool_input_validation_error" });
  });

  it("policy_denied is audited with caller client and the chosen callId", async () => {
    expect(await rejection(app.call("reset_counter", {}, { callId: "deny-1" }))).toMatchObject({ type: "policy_denied", callId: "deny-1" });
    await vi.waitFor(() => expect(sb.audit().find((r) => r.callId === "deny-1")).toMatchObject({ tool: "reset_counter", outcome: "denied", deniedReason: "policy", caller: "client" }), {
      timeout: WAIT,
    });
  });

  it("two concurrent slow_task calls each get only their own three progress reports", async () => {
    const progress: CallProgress[][] = [[], []];
    const results = await Promise.all(progress.map((seen) => app.call("slow_task", {}, { onProgress: (p) => seen.push(p) })));
    expect(results).toEqual([{ done: true }, { done: true }]);
    const expected = [
      { progress: 0.33, message: "warming up" },
      { progress: 0.66, message: "almost there" },
      { progress: 1, message: "done" },
    ];
    expect(progress).toEqual([expected, expected]);
  }, 30_000);

  it("waitForEvent: a posted event resolves glob and concurrent waits; retained events resolve at once", async () => {
    const waits = [app.waitForEvent("playground_*", { timeoutMs: WAIT }), app.waitForEvent("*_ping", { timeoutMs: WAIT })];
    device.send("ping");
    const [first, second] = await Promise.all(waits);
    expect(first).toEqual({ name: "playground_ping", payload: { at: expect.any(Number) }, ts: expect.any(Number), seq: 1, sessionId: app.sessionId, alias: app.alias });
    expect(second).toEqual(first);
    // Retained: replay from 0 finds it without a new post.
    expect(await app.waitForEvent("playground_ping", { timeoutMs: WAIT })).toEqual(first);
    // Past it, the wait needs the next post.
    const next = app.waitForEvent("playground_ping", { since: 1, timeoutMs: WAIT });
    device.send("ping");
    expect((await next).seq).toBe(2);
    // Globs are case-sensitive: this one never matches.
    expect(await rejection(app.waitForEvent("Playground_*", { timeoutMs: 300 }))).toMatchObject({ type: "timeout" });
  }, 30_000);

  it("events() pages retained events, with payloadMaxBytes truncation", async () => {
    const page = await app.events();
    expect(page.events.map((e) => e.seq)).toEqual([1, 2]);
    expect(page).toMatchObject({ cursor: 2, dropped: 0, remaining: 0 });
    const payload = JSON.stringify(page.events[0]?.payload);
    const truncated = await app.events({ since: 1, payloadMaxBytes: 5 });
    expect(truncated.events).toEqual([
      { name: "playground_ping", payloadPreview: '{"at"', truncated: true, payloadBytes: payload.length, ts: page.events[1]?.ts, seq: 2, sessionId: app.sessionId, alias: app.alias },
    ]);
  });

  it("close() rejects pending waits and later calls with connection_error", async () => {
    const other = await connect({ stateDir: sb.stateDir, bin: sb.bin, selector: app.alias });
    expect(other.sessionId).toBe(app.sessionId);
    const pending = rejection(other.waitForEvent("never_posted", { timeoutMs: WAIT }));
    await other.close();
    expect((await pending).type).toBe("connection_error");
    expect((await rejection(other.call("sum", { a: 1, b: 1 }))).type).toBe("connection_error");
  });
});

describe("with an in-process probe device", () => {
  const frames: Record<string, unknown>[] = [];
  const handled: { invocationId: string; reason: unknown }[] = [];
  let started: (invocationId: string) => void = () => undefined;
  let probe: AppductClient;
  let app: AppClient;

  beforeAll(async () => {
    probe = createAppductClient({ transport: recording(createNodeTransport(), frames), logger: quiet, device: { model: "Probe" } });
    closers.push(() => probe.disconnect());
    const untilAborted = (signal: AbortSignal, ms: number): Promise<void> =>
      new Promise((resolve) => {
        const timer = setTimeout(resolve, ms);
        signal.addEventListener("abort", () => (clearTimeout(timer), resolve()), { once: true });
      });
    probe.registerTool({
      name: "wait_for_cancel",
      description: "Runs until its signal aborts.",
      timeoutMs: 60_000,
      handler: async (_args, ctx) => {
        started(ctx.invocationId);
        await untilAborted(ctx.signal, 60_000);
        handled.push({ invocationId: ctx.invocationId, reason: ctx.signal.reason });
      },
    });
    probe.registerTool({
      name: "twelve_seconds",
      description: "Takes 12 s; declares no timeout.",
      handler: async (_args, ctx) => {
        await untilAborted(ctx.signal, 12_000);
        handled.push({ invocationId: ctx.invocationId, reason: ctx.signal.reason });
      },
    });
    const minted = await mint("probe");
    await within(probe.connect(minted.deepLink), WAIT, "the probe's claim");
    // Already claimed: resolves at once.
    app = await waitForSession(minted.sessionId, { stateDir: sb.stateDir, bin: sb.bin, timeoutMs: WAIT });
    closers.push(() => app.close());
    expect(app.alias).toBe("probe");
    await untilTools(app, 2);
  }, 30_000);

  it("an abort reaches the handler's signal through one tool_cancel for the wire id; callId t-1 never reaches the app", async () => {
    const running = new Promise<string>((resolve) => (started = resolve));
    const abort = new AbortController();
    const call = rejection(app.call("wait_for_cancel", {}, { callId: "t-1", signal: abort.signal }));
    const invocationId = await within(running, WAIT, "the handler to start");
    abort.abort();
    const error = await call;
    expect(error).toMatchObject({ type: "tool_cancelled", callId: "t-1", message: 'Tool "wait_for_cancel" was cancelled.' });
    expect(invocationId).toMatch(/^call_[A-Za-z0-9_-]{22}$/);
    const calls = frames.filter((f) => f.type === "tool_call" && f.name === "wait_for_cancel");
    expect(calls.map((f) => f.id)).toEqual([invocationId]);
    const cancels = frames.filter((f) => f.type === "tool_cancel");
    expect(cancels).toEqual([expect.objectContaining({ id: invocationId, reason: "client_cancelled" })]);
    expect(handled).toContainEqual({ invocationId, reason: "client_cancelled" });
    expect(JSON.stringify(frames)).not.toContain('"t-1"');
    await vi.waitFor(() => expect(sb.audit().find((r) => r.callId === "t-1")).toMatchObject({ tool: "wait_for_cancel", outcome: "cancelled", errorType: "tool_cancelled", caller: "client" }), {
      timeout: WAIT,
    });
  }, 30_000);

  it("a 12 s tool with no declared timeout ends in tool_timeout, never a transport error", async () => {
    const error = await rejection(app.call("twelve_seconds", {}, { callId: "slow-1" }));
    expect(error).toMatchObject({ type: "tool_timeout", callId: "slow-1" });
    const wire = frames.find((f) => f.type === "tool_call" && f.name === "twelve_seconds")?.id;
    await vi.waitFor(() => expect(handled).toContainEqual({ invocationId: wire, reason: "timeout" }), { timeout: WAIT });
  }, 30_000);
});

describe("waitForSession and links", () => {
  it("a link revoked before its claim rejects the wait with unknown_session", async () => {
    const minted = await mint("revoked");
    const waiting = rejection(waitForSession(minted.sessionId, { stateDir: sb.stateDir, bin: sb.bin, timeoutMs: WAIT }));
    // The wait is subscribed once its describe found the link pending; the revoke's event then
    // reaches it (or, if the revoke wins the race, the describe reports an unknown id).
    const revoked = await sb.cli(["sessions", "revoke", minted.sessionId]);
    expect(revoked).toMatchObject({ ok: true, data: { revoked: "link" } });
    expect((await waiting).type).toBe("unknown_session");
  });

  it("link({for: \"react-native\"}) mints a sealed link: payload and sealedKey, no pin", async () => {
    const sealed = (await link({ stateDir: sb.stateDir, bin: sb.bin, scheme: "sealedapp", cwd: sb.stateDir, for: "react-native" })) as DeviceLinkResult;
    expect(sealed.transport).toBe("sealed");
    expect(typeof sealed.payload).toBe("string");
    expect(typeof sealed.sealedKey).toBe("string");
    expect(sealed.pin).toBeUndefined();
    expect(sealed.deepLink.startsWith("sealedapp:")).toBe(true);
    expect(await rejection(link({ stateDir: sb.stateDir, bin: sb.bin, scheme: "x", for: "react-native", transport: "web" }))).toMatchObject({ type: "usage_error" });
  });

  it("link() rejects with the CLI's error type", async () => {
    expect(await rejection(link({ stateDir: sb.stateDir, bin: sb.bin, scheme: "x", url: "http://localhost/" }))).toMatchObject({ type: "usage_error" });
  });
});
