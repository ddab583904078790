// The playground contract on a client over the fake transport (§T14.3): the exact wire
// descriptors, the event declaration, and each tool's behaviour, with slow_task's three progress
// frames 500 ms apart on a manual clock.

import { describe, expect, it } from "vitest";

import { createAppductClient } from "../../packages/sdk/src/core/client.js";
import type { AppductClient } from "../../packages/sdk/src/core/types.js";
import { FakeTransport, flush, type FakeSocket } from "../../packages/sdk/test/support/fake-transport.js";
import { ManualClock } from "../../packages/sdk/test/support/manual-clock.js";
import { registerPlayground, type Playground } from "../src/playground.js";

const START = 1_700_000_000_000;

/** The committed wire snapshot: `appduct tools ls --json` must be identical on every playground. */
const EXPECTED_TOOLS =
  '[{"name":"sum","description":"Adds a and b and returns the total. Each call raises call_count by one.","input_schema":{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}},"required":["a","b"],"additionalProperties":false},"output_schema":{"type":"object","properties":{"total":{"type":"number"}},"required":["total"],"additionalProperties":false},"testCases":[{"name":"adds two numbers","arguments":{"a":1,"b":2},"expect":{"schema":{"type":"object","required":["total"],"properties":{"total":{"const":3}}}}}]},' +
  '{"name":"call_count","description":"Returns how many times sum and slow_task have completed. Read-only.","input_schema":{"type":"object","properties":{},"additionalProperties":false},"output_schema":{"type":"object","properties":{"count":{"type":"integer","minimum":0}},"required":["count"],"additionalProperties":false},"annotations":{"readOnlyHint":true},"group":"counter","testCases":[{"name":"returns the count","arguments":{},"expect":{"schema":{"type":"object","required":["count"],"properties":{"count":{"type":"integer"}}}}}]},' +
  '{"name":"reset_counter","description":"Sets the call counter back to zero. Destructive; repeating it changes nothing.","input_schema":{"type":"object","properties":{},"additionalProperties":false},"output_schema":{"type":"object","properties":{"count":{"type":"integer","minimum":0}},"required":["count"],"additionalProperties":false},"annotations":{"destructiveHint":true,"idempotentHint":true},"group":"counter","testCases":[{"name":"sets the count to zero","arguments":{},"expect":{"schema":{"type":"object","required":["count"],"properties":{"count":{"const":0}}}}}]},' +
  '{"name":"slow_task","description":"Runs for about 1.5 s and reports progress three times, then raises call_count by one.","input_schema":{"type":"object","properties":{},"additionalProperties":false},"output_schema":{"type":"object","properties":{"done":{"type":"boolean"}},"required":["done"],"additionalProperties":false},"timeout_ms":5000,"group":"diagnostics/progress"},' +
  '{"name":"throwing_tool","description":"Fails every time with tool_execution_error and changes nothing.","input_schema":{"type":"object","properties":{},"additionalProperties":false},"annotations":{"readOnlyHint":true},"group":"diagnostics","testCases":[{"name":"always fails","arguments":{},"expect":{"error":"tool_execution_error"}}]}]';

const EXPECTED_EVENTS = [
  {
    name: "playground_ping",
    description: "Posted when the playground's ping control is pressed.",
    payload_schema: { type: "object", properties: { at: { type: "number" } }, required: ["at"] },
  },
];

interface Setup {
  client: AppductClient;
  clock: ManualClock;
  socket: FakeSocket;
  playground: Playground;
  /** Delivers a tool_call, lets it run, returns the frames sent since. */
  call: (name: string, args?: Record<string, unknown>, id?: string) => Promise<Record<string, unknown>[]>;
}

async function setup(): Promise<Setup> {
  const transport = new FakeTransport();
  const clock = new ManualClock(START);
  const client = createAppductClient({ transport: transport.factory, clock, random: () => 0.5, logger: { warn: () => undefined, error: () => undefined } });
  const playground = registerPlayground(client, clock);
  void client.connectBootstrap({ sessionId: "s1", token: "t", expiresAt: START / 1000 + 300, address: "127.0.0.1", port: 8443, transport: "native" });
  await flush();
  const socket = transport.newest;
  socket.receive({ type: "session_ack", session_id: "s1", status: "ok", alias: "pg", resume_token: "r1", keepalive_interval_s: 15, grace_s: 600, event_registry: true });
  const call = async (name: string, args: Record<string, unknown> = {}, id = "call-1"): Promise<Record<string, unknown>[]> => {
    const before = socket.sent.length;
    socket.receive({ type: "tool_call", session_id: "s1", id, name, args });
    await flush();
    return socket.frames.slice(before);
  };
  return { client, clock, socket, playground, call };
}

const result = (id: string, value: unknown): Record<string, unknown> => ({ type: "tool_result", session_id: "s1", id, result: value });

describe("playground contract", () => {
  it("registers the exact wire descriptors in order, and the event declaration", async () => {
    const { client, socket } = await setup();
    expect(JSON.stringify(client.getRegisteredTools())).toBe(EXPECTED_TOOLS);
    const [toolSnapshot, eventSnapshot] = socket.frames.slice(1);
    expect(JSON.stringify((toolSnapshot as { tools: unknown }).tools)).toBe(EXPECTED_TOOLS);
    expect(eventSnapshot).toEqual({ type: "event_registry_snapshot", session_id: "s1", events: EXPECTED_EVENTS });
  });

  it("sum returns the total as numbers and raises the counter", async () => {
    const { call, playground } = await setup();
    const seen: number[] = [];
    playground.onCountChange((c) => seen.push(c));
    expect(await call("sum", { a: 1.5, b: 2 })).toEqual([result("call-1", { total: 3.5 })]);
    expect(await call("call_count", {}, "call-2")).toEqual([result("call-2", { count: 1 })]);
    expect(playground.count).toBe(1);
    expect(seen).toEqual([1]);
  });

  it("sum refuses missing or extra arguments without counting", async () => {
    const { call, playground } = await setup();
    const [missing] = await call("sum", { a: 1 });
    expect(missing).toMatchObject({ type: "tool_error", error: { type: "tool_input_validation_error" } });
    const [extra] = await call("sum", { a: 1, b: 2, c: 3 }, "call-2");
    expect(extra).toMatchObject({ type: "tool_error", error: { type: "tool_input_validation_error" } });
    expect(playground.count).toBe(0);
  });

  it("reset_counter sets the counter to 0", async () => {
    const { call, playground } = await setup();
    await call("sum", { a: 1, b: 1 });
    expect(await call("reset_counter", {}, "call-2")).toEqual([result("call-2", { count: 0 })]);
    expect(playground.count).toBe(0);
  });

  it("slow_task reports progress three times 500 ms apart, then counts and returns done", async () => {
    const { call, clock, socket, playground } = await setup();
    expect(await call("slow_task")).toEqual([]);
    const progress = (p: number, message: string): Record<string, unknown> => ({ type: "tool_call_progress", session_id: "s1", id: "call-1", progress: p, message });
    const sent: Record<string, unknown>[][] = [];
    for (let i = 0; i < 3; i++) {
      const before = socket.sent.length;
      clock.advance(499);
      await flush();
      expect(socket.sent.length).toBe(before);
      clock.advance(1);
      await flush();
      sent.push(socket.frames.slice(before));
    }
    expect(sent).toEqual([[progress(0.33, "warming up")], [progress(0.66, "almost there")], [progress(1, "done"), result("call-1", { done: true })]]);
    expect(playground.count).toBe(1);
  });

  it("an aborted slow_task stops at the next step without counting", async () => {
    const { call, clock, socket, playground } = await setup();
    await call("slow_task");
    clock.advance(500);
    await flush();
    socket.receive({ type: "tool_cancel", session_id: "s1", id: "call-1", reason: "client_cancelled" });
    const before = socket.sent.length;
    clock.advance(2000);
    await flush();
    expect(socket.sent.length).toBe(before);
    expect(playground.count).toBe(0);
  });

  it("throwing_tool fails with tool_execution_error, its exact message and details.name", async () => {
    const { call, playground } = await setup();
    expect(await call("throwing_tool")).toEqual([
      { type: "tool_error", session_id: "s1", id: "call-1", error: { type: "tool_execution_error", message: "throwing_tool always fails on purpose.", details: { name: "Error" } } },
    ]);
    expect(playground.count).toBe(0);
  });

  it("the ping control posts playground_ping with the current time", async () => {
    const { socket, playground, clock } = await setup();
    clock.advance(42);
    expect(playground.ping()).toBe(START + 42);
    expect(socket.frames.at(-1)).toEqual({ type: "event", session_id: "s1", name: "playground_ping", payload: { at: START + 42 }, ts: START + 42 });
  });
});
