// Invocation (§T5): one test per row of the §T5.2 table and per rule of §T5.3, on a
// manual clock over the fake transport.

import { describe, expect, it } from "vitest";

import { AppductToolError } from "../src/core/errors.js";
import type { ToolContext, ToolDefinition } from "../src/core/types.js";
import type { FakeSocket } from "./support/fake-transport.js";
import { flush } from "./support/fake-transport.js";
import { activate, lastFrame, makeHarness, START_MS, type Harness } from "./support/harness.js";
import { standard, sumArgs, totalResult } from "./support/schemas.js";

interface Setup {
  h: Harness;
  socket: FakeSocket;
  /** Delivers a tool_call and lets the invocation run; returns frames sent after it. */
  call: (name: string, args?: unknown, id?: string) => Promise<Record<string, unknown>[]>;
}

// Each tool's handler types its own args; the list erases them.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type AnyTool = ToolDefinition<any, unknown>;

async function setup(...tools: AnyTool[]): Promise<Setup> {
  const h = makeHarness();
  for (const t of tools) h.client.registerTool(t);
  const socket = await activate(h);
  const call = async (name: string, args: unknown = {}, id = "call-1"): Promise<Record<string, unknown>[]> => {
    const before = socket.sent.length;
    const frame: Record<string, unknown> = { type: "tool_call", session_id: "session-1", id, name };
    if (args !== undefined) frame.args = args;
    socket.receive(frame);
    await flush();
    return socket.frames.slice(before);
  };
  return { h, socket, call };
}

const toolError = (type: string, message: string, details?: unknown): Record<string, unknown> => ({
  type: "tool_error",
  session_id: "session-1",
  id: "call-1",
  error: details === undefined ? { type, message } : { type, message, details },
});
const toolResult = (result: unknown): Record<string, unknown> => ({ type: "tool_result", session_id: "session-1", id: "call-1", result });

describe("§T5.2 rows", () => {
  it("name not registered → tool_not_found", async () => {
    const { call } = await setup();
    expect(await call("ghost")).toEqual([toolError("tool_not_found", 'Tool "ghost" is not registered.')]);
  });

  it("no input schema and {} → handler called with undefined", async () => {
    const seen: unknown[] = [];
    const { call } = await setup({ name: "t", description: "d", handler: (args) => void seen.push(args) });
    expect(await call("t", {})).toEqual([toolResult(null)]);
    expect(seen).toEqual([undefined]);
  });

  it("args that are not an object are treated as {}", async () => {
    const seen: unknown[] = [];
    const { call } = await setup({ name: "t", description: "d", handler: (args) => void seen.push(args) });
    expect(await call("t", [1, 2])).toEqual([toolResult(null)]);
    expect(await call("t", undefined, "call-2")).toHaveLength(1);
    expect(seen).toEqual([undefined, undefined]);
  });

  it("no input schema and keys → tool_input_validation_error, one issue per key, handler not called", async () => {
    let called = false;
    const { call } = await setup({ name: "t", description: "d", handler: () => void (called = true) });
    expect(await call("t", { a: 1, b: 2 })).toEqual([
      toolError("tool_input_validation_error", 'Tool "t" takes no arguments.', {
        issues: [
          { message: "unexpected argument", path: ["a"] },
          { message: "unexpected argument", path: ["b"] },
        ],
      }),
    ]);
    expect(called).toBe(false);
  });

  it("forms 1, 2, 4: failing validation → tool_input_validation_error with the first issue, handler not called", async () => {
    let called = false;
    const { call } = await setup({ name: "sum", description: "d", inputSchema: sumArgs, handler: () => void (called = true) });
    expect(await call("sum", { a: 1, b: "x" })).toEqual([
      toolError("tool_input_validation_error", 'Invalid arguments for tool "sum": b must be a number', { issues: [{ message: "b must be a number", path: ["b"] }] }),
    ]);
    expect(called).toBe(false);
  });

  it("forms 1, 2, 4: passing validation → handler gets the validated value (defaults applied), sync or async validators", async () => {
    const seen: unknown[] = [];
    const asyncSchema = standard((v) => ({ value: { wrapped: v } }), undefined, { async: true });
    const { call } = await setup(
      { name: "sum", description: "d", inputSchema: sumArgs, outputSchema: totalResult, handler: (args: { a: number; b: number }) => ({ total: args.a + args.b }) },
      { name: "pair", description: "d", inputSchema: { schema: asyncSchema, jsonSchema: { type: "object" } }, handler: (args) => void seen.push(args) },
    );
    expect(await call("sum", { a: 1.5 })).toEqual([toolResult({ total: 2.5 })]);
    await call("pair", { x: 1 }, "call-2");
    expect(seen).toEqual([{ wrapped: { x: 1 } }]);
  });

  it("form 3 → handler gets args as sent", async () => {
    const seen: unknown[] = [];
    const { call } = await setup({ name: "t", description: "d", inputSchema: { type: "object" }, handler: (args) => void seen.push(args) });
    await call("t", { anything: [1] });
    expect(seen).toEqual([{ anything: [1] }]);
  });

  it("handler throws AppductToolError → its type, message and details", async () => {
    const { call } = await setup({
      name: "t",
      description: "d",
      handler: () => {
        throw new AppductToolError("tool_input_validation_error", "sku unknown", { sku: "X" });
      },
    });
    expect(await call("t")).toEqual([toolError("tool_input_validation_error", "sku unknown", { sku: "X" })]);
  });

  it("AppductToolError refuses a type outside the seven tool types", () => {
    expect(() => new AppductToolError("policy_denied" as never, "no")).toThrow(TypeError);
  });

  it("handler throws anything else → tool_execution_error with details.name", async () => {
    class HttpError extends Error {
      override name = "HttpError";
    }
    const { call } = await setup(
      {
        name: "err",
        description: "d",
        handler: async () => {
          throw new HttpError("Cart service unavailable");
        },
      },
      {
        name: "str",
        description: "d",
        handler: () => {
          throw "plain string";
        },
      },
    );
    expect(await call("err")).toEqual([toolError("tool_execution_error", "Cart service unavailable", { name: "HttpError" })]);
    expect((await call("str", {}, "call-2"))[0]).toMatchObject({ error: { type: "tool_execution_error", message: "plain string", details: { name: "string" } } });
  });

  it("no output schema, undefined → result null; a value → tool_output_validation_error", async () => {
    const { call } = await setup({ name: "none", description: "d", handler: () => undefined }, { name: "value", description: "d", handler: () => 42 });
    expect(await call("none")).toEqual([toolResult(null)]);
    expect((await call("value", {}, "call-2"))[0]).toMatchObject({
      error: { type: "tool_output_validation_error", message: 'Tool "value" returned a value but declares no output schema.' },
    });
  });

  it("forms 1, 2, 4 output: failing validation → tool_output_validation_error with issues", async () => {
    const { call } = await setup({ name: "t", description: "d", outputSchema: totalResult, handler: () => ({ total: "many" }) });
    expect(await call("t")).toEqual([
      toolError("tool_output_validation_error", 'Tool "t" returned a value that does not match its output schema.', {
        issues: [{ message: "total must be a number", path: ["total"] }],
      }),
    ]);
  });

  it("output passes → validated value; form 3 → as returned", async () => {
    const { call } = await setup(
      { name: "t", description: "d", outputSchema: totalResult, handler: () => ({ total: 3, extra: true }) },
      { name: "raw", description: "d", outputSchema: { type: "object" }, handler: () => ({ extra: true }) },
    );
    expect(await call("t")).toEqual([toolResult({ total: 3 })]);
    expect((await call("raw", {}, "call-2"))[0]).toMatchObject({ result: { extra: true } });
  });

  it("JSON.stringify throws or yields undefined → tool_serialization_error", async () => {
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    const { call } = await setup(
      { name: "cycle", description: "d", outputSchema: { type: "object" }, handler: () => cyclic },
      { name: "big", description: "d", outputSchema: { type: "object" }, handler: () => 10n },
      { name: "fn", description: "d", outputSchema: { type: "object" }, handler: () => () => 1 },
    );
    const message = (name: string): string => `Tool "${name}" returned a value that is not JSON-serializable.`;
    expect(await call("cycle")).toEqual([toolError("tool_serialization_error", message("cycle"))]);
    expect((await call("big", {}, "call-2"))[0]).toMatchObject({ error: { type: "tool_serialization_error", message: message("big") } });
    expect((await call("fn", {}, "call-3"))[0]).toMatchObject({ error: { type: "tool_serialization_error", message: message("fn") } });
  });

  it("an encoded tool_result over 262144 bytes → tool_serialization_error naming its size", async () => {
    const { call } = await setup({ name: "huge", description: "d", outputSchema: { type: "string" }, handler: () => "a".repeat(262_144) });
    const bytes = JSON.stringify(toolResult("a".repeat(262_144))).length;
    expect(await call("huge")).toEqual([
      toolError("tool_serialization_error", `Tool "huge" returned ${bytes} bytes; the frame limit is 262144.`, { bytes, limitBytes: 262144 }),
    ]);
  });

  it("cuts every error message to 4096 UTF-16 units, never inside a surrogate pair", async () => {
    const { call } = await setup({
      name: "long",
      description: "d",
      handler: () => {
        throw new Error(`${"x".repeat(4095)}😀tail`);
      },
    });
    const [frame] = await call("long");
    expect((frame as { error: { message: string } }).error.message).toBe("x".repeat(4095));
  });

  it("drops details that cannot be serialized rather than the error", async () => {
    const { call } = await setup({
      name: "t",
      description: "d",
      handler: () => {
        throw new AppductToolError("tool_execution_error", "bad details", { n: 1n });
      },
    });
    expect(await call("t")).toEqual([toolError("tool_execution_error", "bad details")]);
  });
});

describe("handler context", () => {
  it("carries the session, the wire id, the receive time and a live signal", async () => {
    let ctx: ToolContext | undefined;
    const { call } = await setup({ name: "t", description: "d", handler: (_a, c) => void (ctx = c) });
    await call("t", {}, "call_k2Xh9QmT0bZr1sVw3yLpAg");
    expect(ctx).toMatchObject({ sessionId: "session-1", invocationId: "call_k2Xh9QmT0bZr1sVw3yLpAg", receivedAt: new Date(START_MS).toISOString() });
    expect(ctx?.receivedAt).toBe("2023-11-14T22:13:20.000Z");
    expect(ctx?.signal.aborted).toBe(false);
  });

  it("reportProgress sends progress while in flight, omits non-finite values, cuts messages, never rejects", async () => {
    let ctx: ToolContext | undefined;
    let finish: (v: unknown) => void = () => undefined;
    const { socket, call } = await setup({
      name: "t",
      description: "d",
      handler: (_a, c) => {
        ctx = c;
        return new Promise((resolve) => (finish = resolve));
      },
    });
    await call("t");
    const before = socket.sent.length;
    await expect(ctx!.reportProgress(0.5, "halfway")).resolves.toBeUndefined();
    await ctx!.reportProgress(Number.NaN, "😀".repeat(3000));
    await ctx!.reportProgress();
    finish(undefined);
    await flush();
    await ctx!.reportProgress(1, "late");
    const frames = socket.frames.slice(before);
    expect(frames[0]).toEqual({ type: "tool_call_progress", session_id: "session-1", id: "call-1", progress: 0.5, message: "halfway" });
    expect(frames[1]).toEqual({ type: "tool_call_progress", session_id: "session-1", id: "call-1", message: "😀".repeat(2048) });
    expect(frames[2]).toEqual({ type: "tool_call_progress", session_id: "session-1", id: "call-1" });
    expect(frames[3]).toEqual(toolResult(null));
    expect(frames).toHaveLength(4);
  });
});

describe("§T5.3 deadline and cancellation", () => {
  const waiting = (name: string, extra: Partial<ToolDefinition> = {}): ToolDefinition => ({
    name,
    description: "d",
    handler: () => new Promise(() => undefined),
    ...extra,
  });

  it("default deadline 10000 ms → tool_timeout, signal aborted with timeout, nothing after", async () => {
    let signal: AbortSignal | undefined;
    let finish: (v: unknown) => void = () => undefined;
    const { h, socket, call } = await setup({
      name: "slow",
      description: "d",
      handler: (_a, c) => {
        signal = c.signal;
        return new Promise((resolve) => (finish = resolve));
      },
    });
    await call("slow");
    const before = socket.sent.length;
    h.clock.advance(9999);
    expect(socket.sent.length).toBe(before);
    h.clock.advance(1);
    expect(lastFrame(socket)).toEqual(toolError("tool_timeout", 'Tool "slow" did not respond within 10000ms.'));
    expect(signal?.reason).toBe("timeout");
    finish(undefined);
    await flush();
    expect(socket.sent.length).toBe(before + 1);
  });

  it("a declared timeoutMs is the deadline (clamped)", async () => {
    const { h, socket, call } = await setup(waiting("quick", { timeoutMs: 10 }));
    await call("quick");
    h.clock.advance(1000);
    expect(lastFrame(socket)).toMatchObject({ error: { type: "tool_timeout", message: 'Tool "quick" did not respond within 1000ms.' } });
  });

  it("tool_cancel → tool_cancelled at once, signal aborted with the frame's reason, no tool_timeout later", async () => {
    let signal: AbortSignal | undefined;
    const { h, socket, call } = await setup({ ...waiting("slow"), handler: (_a, c) => ((signal = c.signal), new Promise(() => undefined)) });
    await call("slow");
    socket.receive({ type: "tool_cancel", session_id: "session-1", id: "call-1", reason: "mcp_client_cancelled" });
    expect(lastFrame(socket)).toEqual(toolError("tool_cancelled", 'Tool "slow" was cancelled.'));
    expect(signal?.reason).toBe("mcp_client_cancelled");
    const count = socket.sent.length;
    h.clock.advance(20_000);
    socket.receive({ type: "tool_cancel", session_id: "session-1", id: "call-1", reason: "again" });
    socket.receive({ type: "tool_cancel", session_id: "session-1", id: "unknown", reason: "x" });
    expect(socket.sent.length).toBe(count);
  });

  it("socket loss aborts calls with session_suspended and sends nothing", async () => {
    let signal: AbortSignal | undefined;
    let finish: (v: unknown) => void = () => undefined;
    const { h, socket, call } = await setup({
      name: "slow",
      description: "d",
      handler: (_a, c) => {
        signal = c.signal;
        return new Promise((resolve) => (finish = resolve));
      },
    });
    await call("slow");
    const count = socket.sent.length;
    socket.serverClose({ code: 1006 });
    expect(signal?.reason).toBe("session_suspended");
    finish(undefined);
    h.clock.advance(20_000);
    await flush();
    expect(socket.sent.length).toBe(count);
  });

  it("a second tool_call with the id of a call in flight is ignored", async () => {
    let invocations = 0;
    const { socket, call } = await setup({ ...waiting("slow"), handler: () => (invocations++, new Promise(() => undefined)) });
    await call("slow");
    const count = socket.sent.length;
    await call("slow");
    expect(invocations).toBe(1);
    expect(socket.sent.length).toBe(count);
  });
});
