// Tool and event registration (§T3, §T4, §T6): validation, wire form, lenient timeoutMs,
// identity-safe disposers, groups, schema forms, and snapshot/delta ordering (§D13.3).

import { describe, expect, it } from "vitest";

import { AppductRegistrationError } from "../src/core/errors.js";
import { jsonSchema } from "../src/core/standard-schema.js";
import type { ToolDefinition } from "../src/core/types.js";
import { flush } from "./support/fake-transport.js";
import { ack, activate, framesAfterHandshake, makeHarness, startClaim } from "./support/harness.js";
import { converter, standard, sumArgs, totalResult } from "./support/schemas.js";

const noop = (): undefined => undefined;
const tool = (overrides: Partial<ToolDefinition> = {}): ToolDefinition => ({ name: "t", description: "A tool.", handler: noop, ...overrides });

function registrationError(fn: () => unknown): AppductRegistrationError {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(AppductRegistrationError);
    expect(error).toBeInstanceOf(TypeError);
    return error as AppductRegistrationError;
  }
  throw new Error("expected an AppductRegistrationError");
}

describe("registerTool validation", () => {
  it("rejects each invalid field synchronously, naming field and rule, committing nothing", () => {
    const { client } = makeHarness();
    const cases: [Partial<ToolDefinition> | Record<string, unknown>, string][] = [
      [{ name: "has space" }, "name"],
      [{ name: "tool\n" }, "name"],
      [{ name: "a".repeat(65) }, "name"],
      [{ description: "" }, "description"],
      [{ description: "x".repeat(4097) }, "description"],
      [{ handler: "nope" }, "handler"],
      [{ annotations: { readOnlyHint: true, extraHint: true } }, "annotations"],
      [{ annotations: { readOnlyHint: "yes" } }, "annotations"],
      [{ group: null }, "group"],
      [{ group: "a/b/c" }, "group"],
      [{ group: "" }, "group"],
      [{ inputSchema: [] }, "inputSchema"],
      [{ outputSchema: "string" }, "outputSchema"],
    ];
    for (const [overrides, field] of cases) {
      const error = registrationError(() => client.registerTool(tool(overrides as Partial<ToolDefinition>)));
      expect(error.field).toBe(field);
      expect(error.message).toContain(field);
      expect(error.message).toContain(error.rule);
    }
    expect(client.getRegisteredTools()).toEqual([]);
  });

  it("builds the wire form in key order, omitting absent fields", () => {
    const { client } = makeHarness();
    client.registerTool(
      tool({
        group: "checkout/cart",
        timeoutMs: 3000,
        annotations: { destructiveHint: true, idempotentHint: true },
        outputSchema: { type: "object" },
        inputSchema: { type: "object", properties: {} },
        name: "clear_cart",
      }),
    );
    client.registerTool(tool({ name: "plain" }));
    const [full, plain] = client.getRegisteredTools();
    expect(Object.keys(full!)).toEqual(["name", "description", "input_schema", "output_schema", "annotations", "timeout_ms", "group"]);
    expect(full).toEqual({
      name: "clear_cart",
      description: "A tool.",
      input_schema: { type: "object", properties: {} },
      output_schema: { type: "object" },
      annotations: { destructiveHint: true, idempotentHint: true },
      timeout_ms: 3000,
      group: "checkout/cart",
    });
    expect(plain).toEqual({ name: "plain", description: "A tool." });
  });

  it("treats timeoutMs leniently: non-finite ignored, finite truncated and clamped, with development warnings", () => {
    const h = makeHarness({ dev: true });
    const wireTimeout = (timeoutMs: number): number | undefined => {
      h.client.registerTool(tool({ timeoutMs }));
      return h.client.getRegisteredTools()[0]?.timeout_ms;
    };
    expect(wireTimeout(Number.NaN)).toBeUndefined();
    expect(wireTimeout(Infinity)).toBeUndefined();
    expect(wireTimeout(1)).toBe(1000);
    expect(wireTimeout(5000.9)).toBe(5000);
    expect(wireTimeout(700_000)).toBe(600_000);
    expect(wireTimeout(2500)).toBe(2500);
    expect(h.warnings.filter((w) => w.includes("timeoutMs"))).toHaveLength(5);
  });

  it("replaces a registration of the same name, with a development warning", () => {
    const h = makeHarness({ dev: true });
    h.client.registerTool(tool({ description: "first" }));
    h.client.registerTool(tool({ description: "second" }));
    expect(h.client.getRegisteredTools()).toEqual([{ name: "t", description: "second" }]);
    expect(h.warnings.some((w) => w.includes("replaces"))).toBe(true);
  });

  it("has an identity-safe disposer: an old one never removes a newer registration", () => {
    const { client } = makeHarness();
    const first = client.registerTool(tool());
    const second = client.registerTool(tool({ description: "newer" }));
    expect(first.name).toBe("t");
    first.remove();
    expect(client.getRegisteredTools()).toHaveLength(1);
    second.remove();
    second.remove();
    expect(client.getRegisteredTools()).toEqual([]);
  });

  it("warns in development when an input schema's root type rules out an object", () => {
    const h = makeHarness({ dev: true });
    h.client.registerTool(tool({ name: "a", inputSchema: { type: "string" } }));
    h.client.registerTool(tool({ name: "b", inputSchema: { type: ["null", "array"] } }));
    h.client.registerTool(tool({ name: "c", inputSchema: { anyOf: [{ type: "string" }] } }));
    h.client.registerTool(tool({ name: "d", inputSchema: { type: ["object", "null"] } }));
    expect(h.warnings.filter((w) => w.includes("root type"))).toHaveLength(2);
    expect(h.client.getRegisteredTools()).toHaveLength(4);
  });
});

describe("createToolGroup", () => {
  it("validates the group and binds it to every tool", () => {
    const { client } = makeHarness();
    expect(registrationError(() => client.createToolGroup("a//b")).field).toBe("group");
    const group = client.createToolGroup("checkout");
    expect(group.group).toBe("checkout");
    group.registerTool({ name: "pay", description: "Pay.", handler: noop });
    expect(client.getRegisteredTools()).toEqual([{ name: "pay", description: "Pay.", group: "checkout" }]);
  });

  it("rejects a group given inside the definition", () => {
    const { client } = makeHarness();
    const group = client.createToolGroup("checkout");
    const def = { name: "pay", description: "Pay.", handler: noop, group: "other" };
    expect(registrationError(() => group.registerTool(def as never)).field).toBe("group");
  });
});

describe("schema forms", () => {
  it("form 1: exports input and output through the Standard JSON Schema converter (draft 2020-12)", () => {
    const { client } = makeHarness();
    const json = converter({ $schema: "https://json-schema.org/draft/2020-12/schema", type: "object" }, { type: "object", title: "out" });
    const schema = standard((v) => ({ value: v }), json);
    client.registerTool(tool({ inputSchema: schema, outputSchema: schema }));
    expect(client.getRegisteredTools()[0]).toMatchObject({
      input_schema: { $schema: "https://json-schema.org/draft/2020-12/schema", type: "object" },
      output_schema: { type: "object", title: "out" },
    });
    expect(json.calls).toEqual([
      { direction: "input", options: { target: "draft-2020-12" } },
      { direction: "output", options: { target: "draft-2020-12" } },
    ]);
  });

  it("form 1: a callable schema carrying ~standard counts", () => {
    const { client } = makeHarness();
    const callable = Object.assign(() => undefined, standard((v) => ({ value: v }), converter({ type: "object" })));
    client.registerTool(tool({ inputSchema: callable }));
    expect(client.getRegisteredTools()[0]?.input_schema).toEqual({ type: "object" });
  });

  it("form 2: a {schema, jsonSchema} pair with a plain object or a converter", () => {
    const { client } = makeHarness();
    const schema = standard((v) => ({ value: v }));
    client.registerTool(tool({ name: "a", inputSchema: { schema, jsonSchema: { type: "object", properties: { x: {} } } } }));
    client.registerTool(tool({ name: "b", outputSchema: { schema, jsonSchema: converter({ type: "object" }, { type: "array" }) } }));
    const [a, b] = client.getRegisteredTools();
    expect(a?.input_schema).toEqual({ type: "object", properties: { x: {} } });
    expect(b?.output_schema).toEqual({ type: "array" });
  });

  it("form 3: a plain JSON Schema object verbatim, with or without a type", () => {
    const { client } = makeHarness();
    client.registerTool(tool({ name: "a", inputSchema: jsonSchema<{ x: number }>({ type: "object", properties: { x: { type: "number" } } }) }));
    client.registerTool(tool({ name: "b", inputSchema: Object.assign(Object.create(null) as object, { anyOf: [] }) }));
    expect(client.getRegisteredTools().map((t) => t.input_schema)).toEqual([{ type: "object", properties: { x: { type: "number" } } }, { anyOf: [] }]);
  });

  it("form 4: development throws a TypeError naming the tool and slot; release omits the field and warns once", () => {
    const noJson = standard((v) => ({ value: v }));
    const dev = makeHarness({ dev: true });
    const error = registrationError(() => dev.client.registerTool(tool({ name: "t4", outputSchema: noJson })));
    expect(error.message).toContain('tool "t4"');
    expect(error.message).toContain("outputSchema");
    const release = makeHarness({ dev: false });
    release.client.registerTool(tool({ name: "t4", inputSchema: noJson, outputSchema: noJson }));
    expect(release.client.getRegisteredTools()).toEqual([{ name: "t4", description: "A tool." }]);
    expect(release.warnings.filter((w) => w.includes('tool "t4"'))).toHaveLength(2);
  });

  it("a converter that throws or returns a non-object is handled like form 4", () => {
    const throwing = standard((v) => ({ value: v }), {
      input: () => {
        throw new Error("cannot express");
      },
      output: () => ["not", "an", "object"],
    });
    expect(registrationError(() => makeHarness({ dev: true }).client.registerTool(tool({ inputSchema: throwing }))).field).toBe("inputSchema");
    const release = makeHarness();
    release.client.registerTool(tool({ inputSchema: throwing, outputSchema: throwing }));
    expect(release.client.getRegisteredTools()[0]).toEqual({ name: "t", description: "A tool." });
  });

  it("rejects arrays, class instances, unknown type names and malformed pairs", () => {
    const { client } = makeHarness();
    class YupLike {
      type = "object";
    }
    const bad: unknown[] = [
      [],
      new YupLike(),
      { type: "strnig" },
      { type: ["object", 1] },
      { jsonSchema: { type: "object" } },
      { schema: standard((v) => ({ value: v })) },
      { schema: { type: "object" }, jsonSchema: { type: "object" } },
      { schema: standard((v) => ({ value: v })), jsonSchema: "object" },
      null,
      42,
    ];
    for (const schema of bad) {
      expect(registrationError(() => client.registerTool(tool({ inputSchema: schema as never }))).field).toBe("inputSchema");
    }
    expect(client.getRegisteredTools()).toEqual([]);
  });
});

describe("registerEvent", () => {
  it("validates names (any characters, 1..4096 UTF-16 units), descriptions and schemas", () => {
    const { client } = makeHarness();
    expect(client.registerEvent({ name: "cart.item added 😀", description: "d" }).name).toBe("cart.item added 😀");
    expect(registrationError(() => client.registerEvent({ name: "", description: "d" })).field).toBe("name");
    expect(registrationError(() => client.registerEvent({ name: "x".repeat(4097), description: "d" })).field).toBe("name");
    expect(registrationError(() => client.registerEvent({ name: "e", description: "" })).field).toBe("description");
    expect(registrationError(() => client.registerEvent({ name: "e", description: "d", payloadSchema: [] as never })).field).toBe("payloadSchema");
  });

  it("exports a Standard Schema payload through the output direction", async () => {
    const h = makeHarness();
    const json = converter({ type: "object", title: "in" }, { type: "object", title: "out" });
    h.client.registerEvent({ name: "e", description: "d", payloadSchema: standard((v) => ({ value: v }), json) });
    const socket = await activate(h);
    expect(framesAfterHandshake(socket)[1]).toEqual({
      type: "event_registry_snapshot",
      session_id: "session-1",
      events: [{ name: "e", description: "d", payload_schema: { type: "object", title: "out" } }],
    });
  });
});

describe("snapshots and deltas (§D13.3)", () => {
  it("sends the tool snapshot, then the event snapshot, then deltas in call order", async () => {
    const h = makeHarness();
    h.client.registerTool(tool({ name: "before" }));
    const socket = await activate(h);
    const reg = h.client.registerTool(tool({ name: "after" }));
    reg.remove();
    h.client.registerTool(tool({ name: "after", description: "again" }));
    const event = h.client.registerEvent({ name: "e", description: "d" });
    event.remove();
    expect(framesAfterHandshake(socket)).toEqual([
      { type: "tool_registry_snapshot", session_id: "session-1", tools: [{ name: "before", description: "A tool." }] },
      { type: "event_registry_snapshot", session_id: "session-1", events: [] },
      { type: "tool_registry_delta", session_id: "session-1", operation: "upsert", tool: { name: "after", description: "A tool." } },
      { type: "tool_registry_delta", session_id: "session-1", operation: "remove", name: "after" },
      { type: "tool_registry_delta", session_id: "session-1", operation: "upsert", tool: { name: "after", description: "again" } },
      { type: "event_registry_delta", session_id: "session-1", operation: "upsert", event: { name: "e", description: "d" } },
      { type: "event_registry_delta", session_id: "session-1", operation: "remove", name: "e" },
    ]);
  });

  it("puts registrations made inside the ack's listeners into the snapshot, not into deltas", async () => {
    const h = makeHarness();
    h.client.addAppductListener("stateChange", (e) => {
      if (e.state === "active") h.client.registerTool(tool({ name: "from_state" }));
    });
    h.client.addAppductListener("sessionChange", (e) => {
      if (e.type === "claimed") h.client.registerEvent({ name: "from_session", description: "d" });
    });
    const socket = await activate(h);
    expect(framesAfterHandshake(socket)).toEqual([
      { type: "tool_registry_snapshot", session_id: "session-1", tools: [{ name: "from_state", description: "A tool." }] },
      { type: "event_registry_snapshot", session_id: "session-1", events: [{ name: "from_session", description: "d" }] },
    ]);
  });

  it("sends no event registry frames to a daemon whose ack lacks event_registry", async () => {
    const h = makeHarness();
    h.client.registerEvent({ name: "e", description: "d" });
    const { socket } = await startClaim(h);
    socket.receive(ack({ event_registry: undefined }));
    h.client.registerEvent({ name: "f", description: "d" });
    expect(framesAfterHandshake(socket).map((f) => f.type)).toEqual(["tool_registry_snapshot"]);
  });

  it("sends nothing for registrations while not active; the next snapshot carries them", async () => {
    const h = makeHarness();
    const socket = await activate(h);
    socket.serverClose({});
    await flush();
    h.client.registerTool(tool({ name: "offline" }));
    h.clock.advance(250);
    await flush();
    const resume = h.transport.newest;
    expect(resume).not.toBe(socket);
    resume.receive(ack({ resume_token: "resume-2" }));
    expect(framesAfterHandshake(socket).map((f) => f.type)).toEqual(["tool_registry_snapshot", "event_registry_snapshot"]);
    expect(framesAfterHandshake(resume)[0]).toEqual({ type: "tool_registry_snapshot", session_id: "session-1", tools: [{ name: "offline", description: "A tool." }] });
  });

  it("snapshots list tools with input and output forms", () => {
    const { client } = makeHarness();
    client.registerTool({ name: "sum", description: "Adds.", inputSchema: sumArgs, outputSchema: totalResult, handler: ({ a, b }) => ({ total: a + b }) });
    expect(client.getRegisteredTools()[0]).toMatchObject({ input_schema: { required: ["a"] }, output_schema: { properties: { total: { type: "number" } } } });
  });
});
