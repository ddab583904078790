// Events (§T6): postEvent never throws, drop rules and warnings, frame shape, ordering with
// registry deltas.

import { describe, expect, it } from "vitest";

import { flush } from "./support/fake-transport.js";
import { activate, lastFrame, makeHarness, SESSION, START_MS, startClaim } from "./support/harness.js";
import { standard } from "./support/schemas.js";

describe("postEvent", () => {
  it("sends event {name, payload, ts} with the clock's unix ms, omitting an undefined payload", async () => {
    const h = makeHarness();
    const socket = await activate(h);
    h.client.postEvent("cart.item_added", { sku: "TEE-42" });
    expect(lastFrame(socket)).toEqual({ type: "event", session_id: SESSION, name: "cart.item_added", payload: { sku: "TEE-42" }, ts: START_MS });
    h.clock.advance(5);
    h.client.postEvent("ping");
    expect(lastFrame(socket)).toEqual({ type: "event", session_id: SESSION, name: "ping", ts: START_MS + 5 });
    h.client.postEvent("null", null);
    expect(lastFrame(socket)).toMatchObject({ payload: null });
  });

  it("never throws in any state and drops events when not active, warning only in development", async () => {
    const dev = makeHarness({ dev: true });
    expect(() => dev.client.postEvent("idle")).not.toThrow();
    const { socket } = await startClaim(dev);
    expect(() => dev.client.postEvent("connecting")).not.toThrow();
    await dev.client.disconnect();
    expect(() => dev.client.postEvent("closed")).not.toThrow();
    expect(socket.frames.filter((f) => f.type === "event")).toEqual([]);
    expect(dev.warnings.filter((w) => w.includes("no active session"))).toHaveLength(3);
    expect(dev.errors).toEqual([]);

    const release = makeHarness();
    release.client.postEvent("idle");
    expect(release.warnings).toEqual([]);
  });

  it("drops an invalid name or an unserializable payload with a warning and an event_not_sent error, keeping the connection", async () => {
    const h = makeHarness();
    const socket = await activate(h);
    const count = socket.sent.length;
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    h.client.postEvent("", 1);
    h.client.postEvent(42 as never, 1);
    h.client.postEvent("x".repeat(4097));
    h.client.postEvent("cycle", cyclic);
    h.client.postEvent("bigint", 1n);
    h.client.postEvent("function", () => 1);
    expect(socket.sent.length).toBe(count);
    expect(h.errors.map((e) => [e.phase, e.code])).toEqual(Array(6).fill(["socket", "event_not_sent"]));
    expect(h.warnings).toHaveLength(6);
    expect(h.client.getAppductState()).toBe("active");
    h.client.postEvent("ok");
    expect(socket.sent.length).toBe(count + 1);
  });

  it("never throws even when an error listener or the transport throws", async () => {
    const h = makeHarness();
    h.client.addAppductListener("error", () => {
      throw new Error("listener bug");
    });
    const socket = await activate(h);
    expect(() => h.client.postEvent("", 1)).not.toThrow();
    socket.send = () => {
      throw new Error("socket gone");
    };
    expect(() => h.client.postEvent("ok")).not.toThrow();
  });

  it("warns once per undeclared name and on payloads failing a declared schema, in development only", async () => {
    const h = makeHarness({ dev: true });
    h.client.registerEvent({
      name: "declared",
      description: "d",
      payloadSchema: { schema: standard((v) => (typeof v === "number" ? { value: v } : { issues: [{ message: "expected a number" }] })), jsonSchema: { type: "number" } },
    });
    const socket = await activate(h);
    h.client.postEvent("undeclared");
    h.client.postEvent("undeclared");
    h.client.postEvent("declared", "text");
    h.client.postEvent("declared", 3);
    await flush();
    expect(h.warnings.filter((w) => w.includes('"undeclared"'))).toHaveLength(1);
    expect(h.warnings.filter((w) => w.includes("expected a number"))).toHaveLength(1);
    // Every event still went out.
    expect(socket.frames.filter((f) => f.type === "event")).toHaveLength(4);
  });

  it("goes out in call order with registry deltas", async () => {
    const h = makeHarness();
    const socket = await activate(h);
    const count = socket.sent.length;
    h.client.postEvent("a");
    h.client.registerEvent({ name: "b", description: "d" });
    h.client.postEvent("b");
    expect(socket.frames.slice(count).map((f) => `${String(f.type)}:${String(f.name ?? (f.event as { name: string }).name)}`)).toEqual([
      "event:a",
      "event_registry_delta:b",
      "event:b",
    ]);
  });
});
