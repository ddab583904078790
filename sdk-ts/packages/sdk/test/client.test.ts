// The test-runner client (§T13) against a fake control socket over a real temp Unix socket:
// the JSON-RPC it sends, framing and malformed lines, error mapping, progress routing,
// cancellation, watchdogs, waits, close, spawning and link(). The real daemon is exercised by
// client-e2e.test.ts.

import { existsSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

import { afterEach, describe, expect, it, vi } from "vitest";

import { connect, link, waitForSession, AppductError, type AppClient, type CallProgress } from "../src/client/index.js";
import { RpcConnection } from "../src/client/connection.js";
import net from "node:net";
import { startFakeControl, tempStateDir, SUMMARY, type Cleanup, type FakeControl, type ReceivedRequest } from "./support/fake-control.js";

const FAKE_APPDUCT = path.join(path.dirname(fileURLToPath(import.meta.url)), "support", "fake-appduct.mjs");
const cleanups: Cleanup[] = [];

afterEach(async () => {
  vi.useRealTimers();
  vi.unstubAllEnvs();
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** An executable that runs the fake binary in `mode` with `env` set. */
function fakeBin(mode: string, env: Record<string, string> = {}): string {
  const dir = tempStateDir(cleanups);
  const bin = path.join(dir, "appduct");
  const exports = Object.entries({ FAKE_APPDUCT_MODE: mode, ...env })
    .map(([k, v]) => `${k}='${v}'; export ${k}`)
    .join("\n");
  writeFileSync(bin, `#!/bin/sh\n${exports}\nexec '${process.execPath}' '${FAKE_APPDUCT}' "$@"\n`, { mode: 0o755 });
  return bin;
}

async function connected(fake: FakeControl, options: { requestTimeoutMs?: number } = {}): Promise<AppClient> {
  const client = await connect({ stateDir: fake.stateDir, autoSpawn: false, ...options });
  cleanups.push(() => client.close());
  return client;
}

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

/** Tracks whether a promise has settled, without letting an unobserved rejection escape. */
function track(promise: Promise<unknown>): { settled: boolean } {
  const state = { settled: false };
  promise.then(
    () => (state.settled = true),
    () => (state.settled = true),
  );
  return state;
}

describe("connect", () => {
  it("resolves the selector once and names the session id in every later request", async () => {
    const fake = await startFakeControl(cleanups);
    fake.answer("tools.list", (r) =>
      r.reply({
        tools: [
          { name: "sum", description: "Adds.", policy: "allow", group: null },
          { name: "reset_counter", description: "Resets.", annotations: { destructiveHint: true }, group: "counter", policy: "deny" },
          { name: "legacy", description: "No group key.", policy: "prompt" },
        ],
        total: 3,
        hasMore: false,
        offset: 0,
        groups: [],
      }),
    );
    const client = await connect({ stateDir: fake.stateDir, selector: "pixel-8", autoSpawn: false });
    cleanups.push(() => client.close());
    expect([client.sessionId, client.alias]).toEqual([SUMMARY.sessionId, "pixel-8"]);
    expect(await client.tools()).toEqual([
      { name: "sum", description: "Adds.", policy: "allow", group: null },
      { name: "reset_counter", description: "Resets.", annotations: { destructiveHint: true }, group: "counter", policy: "deny" },
      { name: "legacy", description: "No group key.", policy: "prompt", group: null },
    ]);
    expect(fake.connections).toHaveLength(1);
    expect(fake.connections[0]?.lines).toEqual([
      '{"jsonrpc":"2.0","id":1,"method":"sessions.describe","params":{"selector":"pixel-8"}}',
      `{"jsonrpc":"2.0","id":2,"method":"tools.list","params":{"selector":"${SUMMARY.sessionId}"}}`,
    ]);
  });

  it("without a selector asks for the only session; its error fails fast with type, code and details", async () => {
    const fake = await startFakeControl(cleanups);
    fake.answer("sessions.describe", (r) => r.fail("ambiguous_session", "Several sessions are connected: a, b", { sessions: [{ sessionId: "A", alias: "a" }] }));
    const error = await rejection(connect({ stateDir: fake.stateDir, autoSpawn: false }));
    expect(error).toMatchObject({ type: "ambiguous_session", code: -32000, message: "Several sessions are connected: a, b", details: { sessions: [{ sessionId: "A", alias: "a" }] } });
    expect(fake.requests[0]?.params).toEqual({});
    // The connection is not left open.
    await fake.connections[0]?.ended;
  });

  it("maps a type outside the closed enum to internal_error", async () => {
    const fake = await startFakeControl(cleanups);
    fake.answer("sessions.describe", (r) => r.fail("brand_new_type", "Something new."));
    expect(await rejection(connect({ stateDir: fake.stateDir, autoSpawn: false }))).toMatchObject({ type: "internal_error", message: "Something new." });
  });

  it("with autoSpawn false and no daemon rejects with connection_error naming the socket", async () => {
    const stateDir = tempStateDir(cleanups);
    const error = await rejection(connect({ stateDir, autoSpawn: false }));
    expect(error.type).toBe("connection_error");
    expect(error.details).toEqual({ socketPath: path.join(stateDir, "daemon.sock") });
    expect(error.message).toContain(path.join(stateDir, "daemon.sock"));
  });

  it("refuses a socket path over 100 bytes before connecting", async () => {
    const stateDir = path.join(tempStateDir(cleanups), "x".repeat(100));
    const error = await rejection(connect({ stateDir, autoSpawn: true, bin: "/nonexistent/appduct" }));
    expect(error.type).toBe("connection_error");
    expect(error.message).toContain("APPDUCT_STATE_DIR");
    expect(error.details).toMatchObject({ maxBytes: 100 });
  });

  it("uses APPDUCT_STATE_DIR when no stateDir is given", async () => {
    const fake = await startFakeControl(cleanups);
    vi.stubEnv("APPDUCT_STATE_DIR", fake.stateDir);
    const client = await connect({ autoSpawn: false });
    cleanups.push(() => client.close());
    expect(client.sessionId).toBe(SUMMARY.sessionId);
  });

  it("rejects a request the daemon does not answer within requestTimeoutMs with connection_error", async () => {
    const fake = await startFakeControl(cleanups);
    const client = await connected(fake, { requestTimeoutMs: 2_000 });
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    const tools = client.tools();
    const state = track(tools);
    await fake.nextRequest("tools.list");
    await vi.advanceTimersByTimeAsync(1_999);
    expect(state.settled).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    expect(await rejection(tools)).toMatchObject({ type: "connection_error", details: { method: "tools.list", timeoutMs: 2_000 } });
    // A late answer is ignored and the connection still serves requests.
    const late = fake.requests.find((r) => r.method === "tools.list") as ReceivedRequest;
    late.reply({ tools: [] });
    fake.answer("tools.list", (r) => r.reply({ tools: [{ name: "x", description: "y", policy: "allow" }] }));
    expect(await client.tools()).toEqual([{ name: "x", description: "y", policy: "allow", group: null }]);
  });
});

describe("call", () => {
  it("sends caller client, a minted client_ callId, the session id, and resolves with the app's result", async () => {
    const fake = await startFakeControl(cleanups);
    fake.answer("tools.call", (r) => r.reply({ result: { total: 3.5 }, callId: r.params?.callId, sessionId: SUMMARY.sessionId, alias: "pixel-8", durationMs: 4 }));
    const client = await connected(fake);
    expect(await client.call("sum", { a: 1.5, b: 2 })).toEqual({ total: 3.5 });
    expect(await client.call("call_count")).toEqual({ total: 3.5 });
    const [first, second] = fake.requests.filter((r) => r.method === "tools.call");
    expect(first?.params).toEqual({ selector: SUMMARY.sessionId, name: "sum", args: { a: 1.5, b: 2 }, caller: "client", callId: expect.stringMatching(/^client_[A-Za-z0-9_-]{22}$/), progress: true });
    expect(second?.params).toMatchObject({ name: "call_count", args: {} });
    expect(second?.params?.callId).not.toBe(first?.params?.callId);
  });

  it("passes a chosen callId and timeoutMs, and resolves with a null result as null", async () => {
    const fake = await startFakeControl(cleanups);
    fake.answer("tools.call", (r) => r.reply({ result: null, callId: "t-1", sessionId: SUMMARY.sessionId, alias: "pixel-8", durationMs: 1 }));
    const client = await connected(fake);
    expect(await client.call("noop", {}, { callId: "t-1", timeoutMs: 1500.7 })).toBeNull();
    expect(fake.requests.at(-1)?.params).toEqual({ selector: SUMMARY.sessionId, name: "noop", args: {}, caller: "client", callId: "t-1", timeoutMs: 1500.7, progress: true });
  });

  it("rejects with the daemon's tool error: type, message, details, code and callId", async () => {
    const fake = await startFakeControl(cleanups);
    fake.answer("tools.call", (r) => r.fail("tool_execution_error", "throwing_tool always fails on purpose.", { name: "Error" }, { callId: r.params?.callId as string }));
    const client = await connected(fake);
    const error = await rejection(client.call("throwing_tool", {}, { callId: "t-9" }));
    expect(error).toMatchObject({ type: "tool_execution_error", message: "throwing_tool always fails on purpose.", details: { name: "Error" }, code: -32000, callId: "t-9" });
  });

  it("rejects misuse with client_error before sending anything", async () => {
    const fake = await startFakeControl(cleanups);
    const client = await connected(fake);
    class Args {
      a = 1;
    }
    for (const args of [[1, 2], new Args(), null, "x"]) {
      expect(await rejection(client.call("sum", args as unknown as Record<string, unknown>))).toMatchObject({ type: "client_error", details: { param: "args" } });
    }
    expect(await rejection(client.call("sum", {}, { timeoutMs: Number.NaN }))).toMatchObject({ type: "client_error", details: { param: "timeoutMs" } });
    expect(fake.requests.map((r) => r.method)).toEqual(["sessions.describe"]);
  });

  it("routes progress by callId: concurrent calls each get only their own", async () => {
    const fake = await startFakeControl(cleanups);
    const client = await connected(fake);
    const seen: Record<string, CallProgress[]> = { a: [], b: [] };
    const a = client.call("slow_task", {}, { callId: "a", onProgress: (p) => seen.a?.push(p) });
    const b = client.call("slow_task", {}, { callId: "b", onProgress: (p) => seen.b?.push(p) });
    const ra = await fake.nextRequest("tools.call", (r) => r.params?.callId === "a");
    const rb = await fake.nextRequest("tools.call", (r) => r.params?.callId === "b");
    expect(ra.params?.progress).toBe(true);
    const note = (method: string, params: Record<string, unknown>): void => ra.connection.send({ jsonrpc: "2.0", method, params: { sessionId: SUMMARY.sessionId, ts: 1, ...params } });
    note("tool_call_started", { requestId: ra.id, callId: "a", alias: "pixel-8", name: "slow_task", deadlineMs: 5000 });
    note("tool_call_started", { requestId: rb.id, callId: "b", alias: "pixel-8", name: "slow_task", deadlineMs: 5000 });
    note("tool_call_progress", { requestId: rb.id, callId: "b", progress: 0.33, message: "warming up" });
    note("tool_call_progress", { requestId: ra.id, callId: "a", progress: 0.33 });
    note("tool_call_progress", { requestId: 99, callId: "other", progress: 0.5 });
    note("tool_call_progress", { requestId: ra.id, callId: "a", message: "almost there" });
    note("some_future_notification", { callId: "a" });
    ra.reply({ result: { done: true }, callId: "a" });
    rb.reply({ result: { done: true }, callId: "b" });
    expect(await Promise.all([a, b])).toEqual([{ done: true }, { done: true }]);
    expect(seen).toEqual({ a: [{ progress: 0.33 }, { message: "almost there" }], b: [{ progress: 0.33, message: "warming up" }] });
  });

  it("an abort sends tools.cancel for that callId and settles with the daemon's answer", async () => {
    const fake = await startFakeControl(cleanups);
    const client = await connected(fake);
    const abort = new AbortController();
    const call = client.call("slow_task", {}, { callId: "t-1", signal: abort.signal });
    const request = await fake.nextRequest("tools.call");
    abort.abort();
    const cancel = await fake.nextRequest("tools.cancel");
    expect(cancel.params).toEqual({ callId: "t-1", selector: SUMMARY.sessionId, reason: "client_cancelled" });
    cancel.reply({ cancelled: true });
    request.fail("tool_cancelled", 'Tool "slow_task" was cancelled.', undefined, { callId: "t-1" });
    expect(await rejection(call)).toMatchObject({ type: "tool_cancelled", callId: "t-1" });
    abort.abort();
    expect(fake.requests.filter((r) => r.method === "tools.cancel")).toHaveLength(1);
  });

  it("an abort answered before the call was live is sent again once tool_call_started arrives", async () => {
    const fake = await startFakeControl(cleanups);
    const client = await connected(fake);
    const abort = new AbortController();
    const call = client.call("slow_task", {}, { callId: "t-2", signal: abort.signal });
    const request = await fake.nextRequest("tools.call");
    expect(request.params?.progress).toBe(true);
    abort.abort();
    (await fake.nextRequest("tools.cancel")).reply({ cancelled: false });
    // The retry waits for the call to be live: nothing more until it starts.
    request.connection.send({ jsonrpc: "2.0", method: "tool_call_started", params: { requestId: request.id, callId: "t-2", deadlineMs: 5000 } });
    const again = await fake.nextRequest("tools.cancel", (r) => r !== fake.requests.find((q) => q.method === "tools.cancel"));
    expect(again.params).toEqual({ callId: "t-2", selector: SUMMARY.sessionId, reason: "client_cancelled" });
    again.reply({ cancelled: true });
    request.fail("tool_cancelled", 'Tool "slow_task" was cancelled.', undefined, { callId: "t-2" });
    expect((await rejection(call)).type).toBe("tool_cancelled");
    expect(fake.requests.filter((r) => r.method === "tools.cancel")).toHaveLength(2);
  });

  it("a signal aborted before the call sends nothing and rejects with tool_cancelled", async () => {
    const fake = await startFakeControl(cleanups);
    const client = await connected(fake);
    const error = await rejection(client.call("slow_task", {}, { callId: "t-3", signal: AbortSignal.abort() }));
    expect(error).toMatchObject({ type: "tool_cancelled", callId: "t-3" });
    expect(fake.requests.map((r) => r.method)).toEqual(["sessions.describe"]);
  });

  it("the watchdog is clamp(timeoutMs) + 5 s, re-armed from tool_call_started, and fires connection_error with the callId", async () => {
    const fake = await startFakeControl(cleanups);
    const client = await connected(fake);
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });

    const short = client.call("slow_task", {}, { callId: "w-1", timeoutMs: 999 });
    const shortState = track(short);
    await fake.nextRequest("tools.call", (r) => r.params?.callId === "w-1");
    await vi.advanceTimersByTimeAsync(5_999);
    expect(shortState.settled).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    expect(await rejection(short)).toMatchObject({ type: "connection_error", callId: "w-1", details: { callId: "w-1", method: "tools.call", timeoutMs: 6_000 } });

    // With progress, the deadline of tool_call_started (20 s) replaces the default 605 s.
    const progress: CallProgress[] = [];
    let progressed: () => void = () => undefined;
    const long = client.call("slow_task", {}, { callId: "w-2", onProgress: (p) => (progress.push(p), progressed()) });
    const longState = track(long);
    const request = await fake.nextRequest("tools.call", (r) => r.params?.callId === "w-2");
    const seen = new Promise<void>((resolve) => (progressed = resolve));
    request.connection.send({ jsonrpc: "2.0", method: "tool_call_started", params: { requestId: request.id, callId: "w-2", deadlineMs: 20_000 } });
    request.connection.send({ jsonrpc: "2.0", method: "tool_call_progress", params: { requestId: request.id, callId: "w-2", progress: 0.1 } });
    await seen;
    await vi.advanceTimersByTimeAsync(24_999);
    expect(longState.settled).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    expect(await rejection(long)).toMatchObject({ type: "connection_error", callId: "w-2" });

    // Without timeoutMs or a start notification: 605 s.
    const plain = client.call("slow_task", {}, { callId: "w-3" });
    const plainState = track(plain);
    await fake.nextRequest("tools.call", (r) => r.params?.callId === "w-3");
    await vi.advanceTimersByTimeAsync(604_999);
    expect(plainState.settled).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    expect(await rejection(plain)).toMatchObject({ type: "connection_error", details: { timeoutMs: 605_000 } });
  });

  it("a parking notice moves the watchdog to the approval's expiry + the deadline + 5 s", async () => {
    const fake = await startFakeControl(cleanups);
    const client = await connected(fake);
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    let progressed: () => void = () => undefined;
    const seen = new Promise<void>((resolve) => (progressed = resolve));
    const parked = client.call("slow_task", {}, { callId: "w-4", timeoutMs: 1000, onProgress: () => progressed() });
    const state = track(parked);
    const request = await fake.nextRequest("tools.call", (r) => r.params?.callId === "w-4");
    expect(request.params?.progress).toBe(true);
    // Parked until 30 s from now (Date is real; the approval expires on a whole second).
    const expiresAt = Math.floor(Date.now() / 1000) + 30;
    const earliest = expiresAt * 1000 - Date.now() + 1000 + 5000;
    request.connection.send({ jsonrpc: "2.0", method: "tool_call_progress", params: { requestId: request.id, callId: "w-4", sessionId: SUMMARY.sessionId, approvalId: "apr_x", expiresAt, message: "Waiting for an operator" } });
    await seen;
    await vi.advanceTimersByTimeAsync(earliest - 1);
    expect(state.settled).toBe(false);
    await vi.advanceTimersByTimeAsync(2_000);
    expect(await rejection(parked)).toMatchObject({ type: "connection_error", callId: "w-4" });
  });

  it("a connection lost mid-call is connection_error with details.callId", async () => {
    const fake = await startFakeControl(cleanups);
    const client = await connected(fake);
    const call = client.call("slow_task", {}, { callId: "lost-1" });
    const request = await fake.nextRequest("tools.call");
    request.connection.socket.destroy();
    expect(await rejection(call)).toMatchObject({ type: "connection_error", callId: "lost-1", details: { callId: "lost-1" } });
    // Later requests on the dead connection fail at once.
    expect((await rejection(client.tools())).type).toBe("connection_error");
  });
});

describe("framing", () => {
  async function open(fake: FakeControl, maxLineBytes?: number): Promise<RpcConnection> {
    const connection = await RpcConnection.open(fake.socketPath, maxLineBytes === undefined ? {} : { maxLineBytes });
    cleanups.push(() => connection.close());
    return connection;
  }

  it("reads responses split across writes, several per write, with CRLF and empty lines", async () => {
    const fake = await startFakeControl(cleanups);
    const connection = await open(fake);
    const one = connection.request("m.one", undefined, { timeoutMs: null });
    const two = connection.request("m.two", { x: 1 }, { timeoutMs: null });
    const three = connection.request("m.three", undefined, { timeoutMs: null });
    await fake.nextRequest("m.three");
    const server = fake.connections[0]?.socket as net.Socket;
    const text = '\n{"jsonrpc":"2.0","id":2,"result":"héllo"}\r\n\r\n{"jsonrpc":"2.0","id":1,"result":[1]}\n{"jsonrpc":"2.0","id":3,"result":null}\n';
    const bytes = Buffer.from(text);
    // Byte by byte, splitting the 2-byte "é" too.
    for (let i = 0; i < bytes.length; i++) server.write(bytes.subarray(i, i + 1));
    expect(await Promise.all([one, two, three])).toEqual([[1], "héllo", null]);
    expect(fake.connections[0]?.lines).toEqual(['{"jsonrpc":"2.0","id":1,"method":"m.one"}', '{"jsonrpc":"2.0","id":2,"method":"m.two","params":{"x":1}}', '{"jsonrpc":"2.0","id":3,"method":"m.three"}']);
  });

  it("ignores late or foreign responses, id-less errors and unknown notifications", async () => {
    const fake = await startFakeControl(cleanups);
    const connection = await open(fake);
    const notes: [string, unknown][] = [];
    connection.onNotification((method, params) => notes.push([method, params]));
    const pending = connection.request("m", undefined, { timeoutMs: null });
    const request = await fake.nextRequest("m");
    request.connection.send({ jsonrpc: "2.0", id: 77, result: "nobody asked" });
    request.connection.send({ jsonrpc: "2.0", id: "1", result: "string id" });
    request.connection.send({ jsonrpc: "2.0", id: null, error: { code: -32700, message: "Parse error", data: { type: "invalid_request" } } });
    request.connection.send({ jsonrpc: "2.0", method: "unknown_notification", params: { a: 1 } });
    request.reply("mine");
    expect(await pending).toBe("mine");
    expect(notes).toEqual([["unknown_notification", { a: 1 }]]);
    expect(connection.closed).toBe(false);
  });

  it.each([
    ["not JSON", "garbage\n"],
    ["not UTF-8", Buffer.from([0x7b, 0xff, 0x7d, 0x0a])],
    ["not an object", "[1,2]\n"],
    ["a response without result or error", '{"jsonrpc":"2.0","id":1}\n'],
  ])("a line that is %s ends the connection: pending requests fail with internal_error", async (_what, line) => {
    const fake = await startFakeControl(cleanups);
    const connection = await open(fake);
    const pending = connection.request("m", undefined, { timeoutMs: null });
    const request = await fake.nextRequest("m");
    request.connection.socket.write(line);
    expect(await rejection(pending)).toMatchObject({ type: "internal_error", details: { reason: "malformed_line" } });
    await request.connection.ended;
    expect(connection.closed).toBe(true);
  });

  it("a daemon line over the cap ends the connection, before its newline arrives", async () => {
    const fake = await startFakeControl(cleanups);
    const connection = await open(fake, 64);
    const pending = connection.request("m", undefined, { timeoutMs: null, callId: "c-1" });
    const request = await fake.nextRequest("m");
    request.connection.socket.write(`{"jsonrpc":"2.0","id":1,"result":"${"x".repeat(40)}`);
    request.connection.socket.write("x".repeat(40));
    expect(await rejection(pending)).toMatchObject({ type: "internal_error", callId: "c-1", details: { reason: "line_too_long", maxLineBytes: 64, callId: "c-1" } });
  });

  it("a line of exactly the cap is accepted", async () => {
    const fake = await startFakeControl(cleanups);
    const prefix = '{"jsonrpc":"2.0","id":1,"result":"';
    const connection = await open(fake, 64);
    const pending = connection.request("m", undefined, { timeoutMs: null });
    const request = await fake.nextRequest("m");
    request.connection.socket.write(`${prefix}${"y".repeat(64 - prefix.length - 2)}"}\n`);
    expect(await pending).toBe("y".repeat(64 - prefix.length - 2));
  });

  it("refuses to send a request line over 1 MiB (the daemon would close the connection)", async () => {
    const fake = await startFakeControl(cleanups);
    const client = await connected(fake);
    const error = await rejection(client.call("sum", { blob: "z".repeat(1_048_576) }));
    expect(error).toMatchObject({ type: "client_error", details: { maxLineBytes: 1_048_576 } });
    expect(fake.requests.map((r) => r.method)).toEqual(["sessions.describe"]);
    fake.answer("tools.list", (r) => r.reply({ tools: [] }));
    expect(await client.tools()).toEqual([]);
  });

  it("a value JSON cannot encode is client_error", async () => {
    const fake = await startFakeControl(cleanups);
    const client = await connected(fake);
    expect((await rejection(client.call("sum", { n: 1n }))).type).toBe("client_error");
  });
});

const EVENT = { kind: "app_event", sessionId: SUMMARY.sessionId, alias: "pixel-8", ts: 1764493923120, seq: 3, data: { name: "checkout_completed", payload: { orderId: "A-17" }, ts: 1764493923101 } };
const TRUNCATED = { ...EVENT, seq: 4, data: { name: "big", payloadPreview: '{"text":"h', truncated: true, payloadBytes: 24, ts: 1764493923200 } };

describe("events", () => {
  it("pages with events.since and flattens full, payload-less and truncated events", async () => {
    const fake = await startFakeControl(cleanups);
    const bare = { ...EVENT, seq: 5, data: { name: "bare", ts: 7 } };
    fake.answer("events.since", (r) => r.reply({ events: [EVENT, TRUNCATED, bare], cursor: 5, dropped: 2, remaining: 0 }));
    const client = await connected(fake);
    expect(await client.events({ since: 2, limit: 10, name: "*", payloadMaxBytes: 11 })).toEqual({
      events: [
        { name: "checkout_completed", payload: { orderId: "A-17" }, ts: 1764493923101, seq: 3, sessionId: SUMMARY.sessionId, alias: "pixel-8" },
        { name: "big", payloadPreview: '{"text":"h', truncated: true, payloadBytes: 24, ts: 1764493923200, seq: 4, sessionId: SUMMARY.sessionId, alias: "pixel-8" },
        { name: "bare", payload: null, ts: 7, seq: 5, sessionId: SUMMARY.sessionId, alias: "pixel-8" },
      ],
      cursor: 5,
      dropped: 2,
      remaining: 0,
    });
    await client.events();
    expect(fake.requests.filter((r) => r.method === "events.since").map((r) => r.params)).toEqual([
      { selector: SUMMARY.sessionId, since: 2, limit: 10, name: "*", payloadMaxBytes: 11 },
      { selector: SUMMARY.sessionId },
    ]);
  });

  it("rejects a negative since and an empty glob with client_error", async () => {
    const fake = await startFakeControl(cleanups);
    const client = await connected(fake);
    expect(await rejection(client.events({ since: -1 }))).toMatchObject({ type: "client_error", details: { param: "since" } });
    expect(await rejection(client.events({ name: "" }))).toMatchObject({ type: "client_error", details: { param: "name" } });
    expect(await rejection(client.waitForEvent(""))).toMatchObject({ type: "client_error", details: { param: "nameGlob" } });
    expect(await rejection(client.waitForEvent("*", { since: -5 }))).toMatchObject({ type: "client_error", details: { param: "since" } });
    expect(await rejection(client.waitForEvent("*", { timeoutMs: -1 }))).toMatchObject({ type: "client_error", details: { param: "timeoutMs" } });
    expect(fake.connections).toHaveLength(1);
    expect(fake.requests.map((r) => r.method)).toEqual(["sessions.describe"]);
  });
});

describe("waitForEvent", () => {
  it("subscribes on its own connection with replay from 0 and resolves with the first match", async () => {
    const fake = await startFakeControl(cleanups);
    const client = await connected(fake);
    const wait = client.waitForEvent("checkout_*", { payloadMaxBytes: 100 });
    const subscribe = await fake.nextRequest("events.subscribe");
    expect(subscribe.connection).toBe(fake.connections[1]);
    expect(subscribe.params).toEqual({ sessionSelector: SUMMARY.sessionId, kinds: ["app_event"], name: "checkout_*", payloadMaxBytes: 100, since: 0 });
    subscribe.reply({ ok: true, sessionId: SUMMARY.sessionId, replay: { count: 1, dropped: 0, cursor: 3 } });
    subscribe.connection.send({ jsonrpc: "2.0", method: "event", params: { ...EVENT, sessionId: "another-session" } });
    subscribe.connection.send({ jsonrpc: "2.0", method: "event", params: { ...EVENT, kind: "tools_changed", seq: 0 } });
    subscribe.connection.send({ jsonrpc: "2.0", method: "event", params: EVENT });
    expect(await wait).toEqual({ name: "checkout_completed", payload: { orderId: "A-17" }, ts: 1764493923101, seq: 3, sessionId: SUMMARY.sessionId, alias: "pixel-8" });
    await subscribe.connection.ended;
  });

  it("gives up after timeoutMs with type timeout and closes its connection", async () => {
    const fake = await startFakeControl(cleanups);
    const client = await connected(fake);
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    const wait = client.waitForEvent("never", { timeoutMs: 250 });
    const state = track(wait);
    const subscribe = await fake.nextRequest("events.subscribe");
    subscribe.reply({ ok: true });
    await vi.advanceTimersByTimeAsync(249);
    expect(state.settled).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    expect(await rejection(wait)).toMatchObject({ type: "timeout", details: { name: "never", timeoutMs: 250 } });
    await subscribe.connection.ended;
  });

  it("keeps timers within 2^31 − 1 ms: a huge timeoutMs does not fire at once", async () => {
    const fake = await startFakeControl(cleanups);
    const client = await connected(fake);
    const wait = client.waitForEvent("checkout_*", { timeoutMs: 2 ** 40 });
    const subscribe = await fake.nextRequest("events.subscribe");
    subscribe.reply({ ok: true });
    // An overflowing Node timer would have fired after 1 ms, long before this round trip ends.
    fake.answer("tools.list", (r) => r.reply({ tools: [] }));
    await client.tools();
    subscribe.connection.send({ jsonrpc: "2.0", method: "event", params: EVENT });
    expect((await wait).seq).toBe(3);
  });

  it("a lost connection is connection_error; a daemon error is passed through", async () => {
    const fake = await startFakeControl(cleanups);
    const client = await connected(fake);
    const lost = client.waitForEvent("a");
    (await fake.nextRequest("events.subscribe")).connection.socket.destroy();
    expect((await rejection(lost)).type).toBe("connection_error");
    const refused = client.waitForEvent("b");
    (await fake.nextRequest("events.subscribe", (r) => r.params?.name === "b")).fail("unknown_session", "No connected session matches it", { selector: SUMMARY.sessionId });
    expect((await rejection(refused)).type).toBe("unknown_session");
  });

  it("an abort rejects with the signal's reason", async () => {
    const fake = await startFakeControl(cleanups);
    const client = await connected(fake);
    const abort = new AbortController();
    const wait = client.waitForEvent("x", { signal: abort.signal });
    const subscribe = await fake.nextRequest("events.subscribe");
    abort.abort(new Error("test over"));
    await expect(wait).rejects.toThrow("test over");
    await subscribe.connection.ended;
    await expect(client.waitForEvent("x", { signal: AbortSignal.abort(new Error("already")) })).rejects.toThrow("already");
  });
});

describe("close", () => {
  it("rejects pending requests and waits (even one still opening) with connection_error, once", async () => {
    const fake = await startFakeControl(cleanups);
    const client = await connected(fake);
    const subscribed = rejection(client.waitForEvent("a"));
    (await fake.nextRequest("events.subscribe")).reply({ ok: true });
    const tools = rejection(client.tools());
    await fake.nextRequest("tools.list");
    const opening = rejection(client.waitForEvent("b"));
    const closing = client.close();
    expect(client.close()).toBe(closing);
    await closing;
    for (const pending of [subscribed, tools, opening]) expect((await pending).type).toBe("connection_error");
    await Promise.all(fake.connections.map((c) => c.ended));
  });

  it("later calls reject at once with connection_error and spawn nothing", async () => {
    const fake = await startFakeControl(cleanups);
    const record = path.join(fake.stateDir, "spawned.jsonl");
    const client = await connect({ stateDir: fake.stateDir, bin: fakeBin("record", { FAKE_RECORD: record }) });
    await client.close();
    const connections = fake.connections.length;
    for (const later of [client.tools(), client.call("sum", {}), client.events(), client.waitForEvent("*")]) {
      expect((await rejection(later)).type).toBe("connection_error");
    }
    expect(fake.connections).toHaveLength(connections);
    expect(existsSync(record)).toBe(false);
  });
});

describe("waitForSession", () => {
  it("subscribes, then describes; waits for a pending link's claim and connects to that session", async () => {
    const fake = await startFakeControl(cleanups);
    fake.answer("sessions.describe", (r) => {
      if (r.connection === fake.connections[0]) r.fail("unknown_session", "Session Zk3 has not been claimed yet", { selector: "Zk3", pending: true });
      else r.reply({ ...SUMMARY, sessionId: "Zk3", alias: "node-js" });
    });
    const waiting = waitForSession("Zk3", { stateDir: fake.stateDir, autoSpawn: false });
    const subscribe = await fake.nextRequest("events.subscribe");
    expect(subscribe.params).toEqual({ kinds: ["session_claimed", "session_revoked", "link_expired", "link_refused"] });
    subscribe.reply({ ok: true });
    await fake.nextRequest("sessions.describe");
    expect(fake.connections[0]?.lines.map((l) => (JSON.parse(l) as { method: string }).method)).toEqual(["events.subscribe", "sessions.describe"]);
    subscribe.connection.send({ jsonrpc: "2.0", method: "event", params: { kind: "session_claimed", sessionId: "other", alias: "x", ts: 1, seq: 0, data: {} } });
    subscribe.connection.send({ jsonrpc: "2.0", method: "event", params: { kind: "session_claimed", sessionId: "Zk3", alias: "node-js", ts: 2, seq: 0, data: {} } });
    const client = await waiting;
    cleanups.push(() => client.close());
    expect([client.sessionId, client.alias]).toEqual(["Zk3", "node-js"]);
    await subscribe.connection.ended;
    expect(fake.requests.filter((r) => r.method === "sessions.describe").map((r) => r.params)).toEqual([{ selector: "Zk3" }, { selector: "Zk3" }]);
  });

  it("after the claim, does not resolve before the registry arrives (issue #23)", async () => {
    const fake = await startFakeControl(cleanups);
    let tools = false;
    fake.answer("events.subscribe", (r) => r.reply({ ok: true }));
    fake.answer("sessions.describe", (r) => {
      if (r.connection === fake.connections[0]) r.fail("unknown_session", "not claimed yet", { selector: "Zk3", pending: true });
      else r.reply({ ...SUMMARY, sessionId: "Zk3", alias: "node-js", registry: tools ? "received" : "pending", toolCount: tools ? 2 : 0 });
    });
    const waiting = waitForSession("Zk3", { stateDir: fake.stateDir, autoSpawn: false });
    const state = track(waiting);
    await fake.nextRequest("sessions.describe");
    fake.connections[0]?.send({ jsonrpc: "2.0", method: "event", params: { kind: "session_claimed", sessionId: "Zk3", alias: "node-js", ts: 1, seq: 0, data: {} } });
    // The registry wait subscribes to tools_changed, then looks: still pending.
    const registrySub = await fake.nextRequest("events.subscribe", (r) => JSON.stringify(r.params) === JSON.stringify({ kinds: ["tools_changed"] }));
    await fake.nextRequest("sessions.describe", (r) => r.connection === registrySub.connection);
    expect(state.settled).toBe(false);
    // Another session's tools change nothing; this one's do.
    registrySub.connection.send({ jsonrpc: "2.0", method: "event", params: { kind: "tools_changed", sessionId: "other", ts: 2, seq: 0, data: { toolCount: 1 } } });
    tools = true;
    registrySub.connection.send({ jsonrpc: "2.0", method: "event", params: { kind: "tools_changed", sessionId: "Zk3", alias: "node-js", ts: 3, seq: 0, data: { toolCount: 2 } } });
    const client = await waiting;
    cleanups.push(() => client.close());
    expect([client.sessionId, client.registry]).toEqual(["Zk3", "received"]);
  });

  it("reports registry pending when the tools do not come by the deadline and the grace", async () => {
    const fake = await startFakeControl(cleanups);
    fake.answer("events.subscribe", (r) => r.reply({ ok: true }));
    fake.answer("sessions.describe", (r) => r.reply({ ...SUMMARY, registry: "pending" }));
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "Date"] });
    const waiting = waitForSession(SUMMARY.sessionId, { stateDir: fake.stateDir, autoSpawn: false, timeoutMs: 500 });
    const state = track(waiting);
    await fake.nextRequest("events.subscribe", (r) => JSON.stringify(r.params) === JSON.stringify({ kinds: ["tools_changed"] }));
    // At least 2 s after the claim, even though timeoutMs was 500.
    await vi.advanceTimersByTimeAsync(1_500);
    expect(state.settled).toBe(false);
    await vi.advanceTimersByTimeAsync(600);
    const client = await waiting;
    cleanups.push(() => client.close());
    expect(client.registry).toBe("pending");
  });

  it("a refused link rejects at once with unknown_session, its reason and a hint", async () => {
    const fake = await startFakeControl(cleanups);
    fake.answer("events.subscribe", (r) => r.reply({ ok: true }));
    fake.answer("sessions.describe", (r) => r.fail("unknown_session", "not claimed yet", { selector: "R1", pending: true }));
    const waiting = waitForSession("R1", { stateDir: fake.stateDir, autoSpawn: false });
    const describe = await fake.nextRequest("sessions.describe");
    describe.connection.send({ jsonrpc: "2.0", method: "event", params: { kind: "link_refused", sessionId: "R1", ts: 1, seq: 0, data: { reason: "unsupported_link" } } });
    const error = await rejection(waiting);
    expect(error).toMatchObject({ type: "unknown_session", details: { selector: "R1", refused: "unsupported_link" } });
    expect(String((error.details as { hint: string }).hint)).toContain("--for react-native");
    // Refused before the wait began: the describe says so.
    const fake2 = await startFakeControl(cleanups);
    fake2.answer("events.subscribe", (r) => r.reply({ ok: true }));
    fake2.answer("sessions.describe", (r) => r.fail("unknown_session", "not claimed yet", { selector: "R2", pending: true, refused: "pin_mismatch" }));
    expect(await rejection(waitForSession("R2", { stateDir: fake2.stateDir, autoSpawn: false }))).toMatchObject({ type: "unknown_session", details: { refused: "pin_mismatch" } });
  });

  it("resolves at once when the session is already claimed", async () => {
    const fake = await startFakeControl(cleanups);
    fake.answer("events.subscribe", (r) => r.reply({ ok: true }));
    const client = await waitForSession(SUMMARY.sessionId, { stateDir: fake.stateDir, autoSpawn: false });
    cleanups.push(() => client.close());
    expect(client.alias).toBe("pixel-8");
  });

  it.each([
    ["link_expired", "expired"],
    ["session_revoked", "revoked"],
  ])("a link ended by %s rejects with unknown_session", async (kind, reason) => {
    const fake = await startFakeControl(cleanups);
    fake.answer("events.subscribe", (r) => r.reply({ ok: true }));
    fake.answer("sessions.describe", (r) => r.fail("unknown_session", "not claimed yet", { selector: "L1", pending: true }));
    const waiting = waitForSession("L1", { stateDir: fake.stateDir, autoSpawn: false });
    const describe = await fake.nextRequest("sessions.describe");
    describe.connection.send({ jsonrpc: "2.0", method: "event", params: { kind, sessionId: "L1", ts: 1, seq: 0, data: {} } });
    expect(await rejection(waiting)).toMatchObject({ type: "unknown_session", details: { selector: "L1", reason } });
  });

  it("an id that is neither live nor pending rejects at once with the daemon's unknown_session", async () => {
    const fake = await startFakeControl(cleanups);
    fake.answer("events.subscribe", (r) => r.reply({ ok: true }));
    fake.answer("sessions.describe", (r) => r.fail("unknown_session", 'No connected session matches "nope"', { selector: "nope" }));
    expect(await rejection(waitForSession("nope", { stateDir: fake.stateDir, autoSpawn: false }))).toMatchObject({ type: "unknown_session", details: { selector: "nope" } });
  });

  it("gives up after timeoutMs with type timeout; rejects an empty id with client_error", async () => {
    const fake = await startFakeControl(cleanups);
    fake.answer("events.subscribe", (r) => r.reply({ ok: true }));
    fake.answer("sessions.describe", (r) => r.fail("unknown_session", "not claimed yet", { selector: "L2", pending: true }));
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    const waiting = waitForSession("L2", { stateDir: fake.stateDir, autoSpawn: false, timeoutMs: 1_000 });
    const state = track(waiting);
    await fake.nextRequest("sessions.describe");
    await vi.advanceTimersByTimeAsync(999);
    expect(state.settled).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    expect(await rejection(waiting)).toMatchObject({ type: "timeout", details: { sessionId: "L2", timeoutMs: 1_000 } });
    expect((await rejection(waitForSession("", { stateDir: fake.stateDir }))).type).toBe("client_error");
  });
});

describe("spawning", () => {
  it("with no daemon runs `<bin> daemon start --json --state-dir <dir>` once, then connects", async () => {
    const fake = await startFakeControl(cleanups, { listen: false });
    const gatePath = path.join(fake.stateDir, "gate.sock");
    const spawned: string[][] = [];
    const gate = net.createServer((socket) => {
      socket.once("data", (data) => {
        spawned.push(JSON.parse(data.toString()) as string[]);
        // The fake binary "starts the daemon": listen, then let it print its envelope.
        void fake.listen().then(() => socket.write("go\n"));
      });
    });
    gate.listen(gatePath);
    cleanups.push(() => new Promise<void>((resolve) => gate.close(() => resolve())));
    const client = await connect({ stateDir: fake.stateDir, bin: fakeBin("gate", { FAKE_GATE: gatePath }) });
    cleanups.push(() => client.close());
    expect(spawned).toEqual([["daemon", "start", "--json", "--state-dir", fake.stateDir]]);
    expect(client.sessionId).toBe(SUMMARY.sessionId);
  });

  it("a failed spawn is connection_error carrying the CLI's message; a missing binary too", async () => {
    const stateDir = tempStateDir(cleanups);
    const record = path.join(stateDir, "spawned.jsonl");
    const failed = await rejection(connect({ stateDir, bin: fakeBin("record", { FAKE_RECORD: record }) }));
    expect(failed.type).toBe("connection_error");
    expect(failed.message).toContain("spawn refused by the fake");
    expect(readFileSync(record, "utf8").trim().split("\n")).toHaveLength(1);
    const missing = await rejection(connect({ stateDir, bin: path.join(stateDir, "no-such-appduct") }));
    expect(missing.type).toBe("connection_error");
  });
});

describe("link", () => {
  it("runs `sessions link --json` with the matching flags, in cwd, with env added", async () => {
    const cwd = tempStateDir(cleanups);
    const stateDir = tempStateDir(cleanups);
    const data = (await link({
      target: "android",
      device: "emulator-5554",
      appId: "com.example.app",
      relaunch: true,
      scheme: "myapp",
      url: "http://localhost:5173/",
      for: "web",
      transport: "web",
      ttlSeconds: 60,
      cwd,
      stateDir,
      env: { FAKE_MARKER: "from-env" },
      bin: fakeBin("echo"),
    })) as unknown as { sessionId: string; argv: string[]; cwd: string; marker: string };
    expect(data).toEqual({
      sessionId: "echo-session",
      argv: ["sessions", "link", "--json", "--open", "android", "--device", "emulator-5554", "--app-id", "com.example.app", "--relaunch", "--scheme", "myapp", "--url", "http://localhost:5173/", "--for", "web", "--transport", "web", "--ttl", "60", "--state-dir", stateDir],
      cwd,
      marker: "from-env",
    });
    const bare = (await link({ bin: fakeBin("echo") })) as unknown as { argv: string[] };
    expect(bare.argv).toEqual(["sessions", "link", "--json"]);
  });

  it("a failure envelope rejects with the CLI's type; other output with client_error; no binary with connection_error", async () => {
    expect(await rejection(link({ bin: fakeBin("fail") }))).toMatchObject({ type: "usage_error", message: "--url requires --open web", details: { flag: "--url" } });
    const garbage = await rejection(link({ bin: fakeBin("garbage") }));
    expect(garbage).toMatchObject({ type: "client_error", details: { exitCode: 0, stdout: "Link created\n  Session: x\n" } });
    expect((await rejection(link({ bin: path.join(tempStateDir(cleanups), "missing") }))).type).toBe("connection_error");
  });
});

describe("lease (§T18)", () => {
  it("takes the lease with ttlMs and steal, releases it, and reports session_leased with its holder", async () => {
    const fake = await startFakeControl(cleanups);
    fake.answer("sessions.lease", (r) =>
      r.reply({ sessionId: SUMMARY.sessionId, alias: "pixel-8", holder: { client: "vitest", pid: 7 }, expiresAt: 1796083332, ttlMs: r.params?.ttlMs ?? 60000, renewed: false, stolenFrom: { client: "appduct-mcp", pid: 9 } }),
    );
    fake.answer("sessions.release", (r) => r.reply({ sessionId: SUMMARY.sessionId, alias: "pixel-8", released: true }));
    const client = await connected(fake);
    const lease = await client.lease({ ttlMs: 120000, steal: true });
    expect(lease).toMatchObject({ holder: { client: "vitest", pid: 7 }, expiresAt: 1796083332, ttlMs: 120000, renewed: false, stolenFrom: { client: "appduct-mcp", pid: 9 } });
    expect(fake.requests.find((r) => r.method === "sessions.lease")?.params).toEqual({ selector: SUMMARY.sessionId, ttlMs: 120000, steal: true });
    expect(await lease.release()).toBe(true);
    expect(fake.requests.find((r) => r.method === "sessions.release")?.params).toEqual({ selector: SUMMARY.sessionId });

    fake.answer("sessions.lease", (r) => r.fail("session_leased", "pixel-8 is leased by appduct-mcp (pid 9)", { sessionId: SUMMARY.sessionId, alias: "pixel-8", holder: { client: "appduct-mcp", pid: 9 }, expiresAt: 1796083332 }));
    const error = await rejection(client.lease());
    expect(error).toMatchObject({ type: "session_leased", details: { holder: { client: "appduct-mcp", pid: 9 } } });
    expect(fake.requests.filter((r) => r.method === "sessions.lease").at(-1)?.params).toEqual({ selector: SUMMARY.sessionId });
  });

  it("refuses a ttlMs outside 1000–3600000 before sending anything", async () => {
    const fake = await startFakeControl(cleanups);
    const client = await connected(fake);
    for (const ttlMs of [999, 3_600_001, 1.5]) {
      expect((await rejection(client.lease({ ttlMs }))).type).toBe("client_error");
    }
    expect(fake.requests.some((r) => r.method === "sessions.lease")).toBe(false);
  });
});
