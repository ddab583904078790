// Real zod (§T4), not hand-built fakes: zod 4 through its own Standard JSON Schema converter
// (form 1) and zod 3 with zod-to-json-schema, the pairing zod 3 documents (form 2). Each schema
// covers objects (nested), enums, optionals, unions, defaults and descriptions. The assertions
// are on the `tool_registry_snapshot` frame the daemon receives over the fake transport, and on
// calls: invalid arguments are refused with zod's issue, valid ones reach the handler with
// zod's defaults applied.

import { z } from "zod";
import { z as z3 } from "zod3";
import { zodToJsonSchema } from "zod-to-json-schema";
import { describe, expect, it } from "vitest";

import type { FakeSocket } from "./support/fake-transport.js";
import { flush } from "./support/fake-transport.js";
import { activate, makeHarness, type Harness } from "./support/harness.js";

interface WireTool {
  name: string;
  input_schema?: Record<string, unknown>;
  output_schema?: Record<string, unknown>;
}

/** Registers, activates, and returns the tools of the snapshot the daemon got, plus a caller. */
async function registered(register: (h: Harness) => void): Promise<{
  tools: WireTool[];
  call: (name: string, args: unknown, id: string) => Promise<Record<string, unknown>>;
}> {
  const h = makeHarness();
  register(h);
  const socket: FakeSocket = await activate(h);
  const snapshot = socket.frames.find((f) => f.type === "tool_registry_snapshot") as { tools: WireTool[] } | undefined;
  if (!snapshot) throw new Error("no tool_registry_snapshot was sent");
  const call = async (name: string, args: unknown, id: string): Promise<Record<string, unknown>> => {
    const before = socket.sent.length;
    socket.receive({ type: "tool_call", session_id: "session-1", id, name, args });
    await flush();
    const [reply] = socket.frames.slice(before);
    return reply as Record<string, unknown>;
  };
  return { tools: snapshot.tools, call };
}

/** What every test schema expresses, checked on the JSON Schema the daemon received. */
function expectCoverage(schema: Record<string, unknown>, io: "input" | "output"): void {
  const props = schema.properties as Record<string, Record<string, unknown>>;
  expect(schema.type).toBe("object");
  // enum + description
  expect(props.size).toMatchObject({ enum: ["s", "m", "l"], description: "Cup size" });
  // nested object with its own optional key
  expect(props.milk).toMatchObject({ type: "object", properties: { kind: { enum: ["oat", "cow"] } }, required: ["kind"] });
  // union of objects
  const payment = props.payment as { anyOf?: unknown[]; oneOf?: unknown[] };
  const branches = payment.anyOf ?? payment.oneOf;
  expect(branches).toHaveLength(2);
  expect(branches).toEqual(
    expect.arrayContaining([
      expect.objectContaining({ properties: expect.objectContaining({ method: expect.objectContaining({ const: "card" }) }) }),
      expect.objectContaining({ properties: expect.objectContaining({ method: expect.objectContaining({ const: "cash" }) }) }),
    ]),
  );
  // default
  expect(props.shots).toMatchObject({ type: "integer", default: 1 });
  // optional: not required; a default is required only on the output side (zod 4 marks it so)
  const required = schema.required as string[];
  expect(required).toEqual(expect.arrayContaining(["size", "payment"]));
  expect(required).not.toContain("note");
  expect(required).not.toContain("milk");
  if (io === "input") expect(required).not.toContain("shots");
}

const ORDER_OK = { size: "m", payment: { method: "cash" } };

describe("zod 4 (form 1: its Standard JSON Schema converter)", () => {
  const order = z
    .object({
      size: z.enum(["s", "m", "l"]).describe("Cup size"),
      milk: z.object({ kind: z.enum(["oat", "cow"]), warm: z.boolean().optional() }).optional(),
      payment: z.union([z.object({ method: z.literal("card"), last4: z.string().length(4) }), z.object({ method: z.literal("cash") })]),
      shots: z.number().int().min(1).max(4).default(1),
      note: z.string().max(80).optional().describe("For the barista"),
    })
    .describe("A coffee order");
  const receipt = z.object({ id: z.string(), total: z.number().describe("In cents") });

  it("the daemon receives zod's draft 2020-12 JSON Schema for input and output", async () => {
    const { tools } = await registered((h) =>
      h.client.registerTool({ name: "order", description: "Order a coffee.", inputSchema: order, outputSchema: receipt, handler: () => ({ id: "r1", total: 350 }) }),
    );
    const [tool] = tools;
    expect(tool?.input_schema).toEqual(z.toJSONSchema(order, { io: "input", target: "draft-2020-12" }));
    expect(tool?.output_schema).toEqual(z.toJSONSchema(receipt, { io: "output", target: "draft-2020-12" }));
    expect(tool?.input_schema?.$schema).toBe("https://json-schema.org/draft/2020-12/schema");
    expect(tool?.input_schema?.description).toBe("A coffee order");
    expectCoverage(tool!.input_schema!, "input");
    expect(tool?.output_schema).toMatchObject({ properties: { total: { type: "number", description: "In cents" } }, required: ["id", "total"] });
  });

  it("zod validates calls: invalid arguments are refused with its issue, defaults reach the handler", async () => {
    const seen: unknown[] = [];
    const { call } = await registered((h) =>
      h.client.registerTool({ name: "order", description: "Order a coffee.", inputSchema: order, handler: (args) => void seen.push(args) }),
    );
    const refused = await call("order", { size: "xl", payment: { method: "cash" } }, "c1");
    expect(refused).toMatchObject({ type: "tool_error", id: "c1", error: { type: "tool_input_validation_error" } });
    expect((refused.error as { details: { issues: { path: unknown[] }[] } }).details.issues[0]?.path).toEqual(["size"]);
    expect(await call("order", ORDER_OK, "c2")).toMatchObject({ type: "tool_result", id: "c2" });
    expect(seen).toEqual([{ size: "m", payment: { method: "cash" }, shots: 1 }]);
  });
});

describe("zod 3 (form 2: with zod-to-json-schema)", () => {
  const order = z3
    .object({
      size: z3.enum(["s", "m", "l"]).describe("Cup size"),
      milk: z3.object({ kind: z3.enum(["oat", "cow"]), warm: z3.boolean().optional() }).optional(),
      payment: z3.union([z3.object({ method: z3.literal("card"), last4: z3.string().length(4) }), z3.object({ method: z3.literal("cash") })]),
      shots: z3.number().int().min(1).max(4).default(1),
      note: z3.string().max(80).optional().describe("For the barista"),
    })
    .describe("A coffee order");
  // zod-to-json-schema's types name the `zod` package, which is zod 4 here (zod 3 is installed
  // under the alias `zod3`); in a zod 3 project the call needs no cast.
  const json = zodToJsonSchema(order as never) as Record<string, unknown>;

  it("the daemon receives the schema zod-to-json-schema produced, verbatim", async () => {
    const { tools } = await registered((h) =>
      h.client.registerTool({ name: "order", description: "Order a coffee.", inputSchema: { schema: order, jsonSchema: json }, handler: () => null }),
    );
    expect(tools[0]?.input_schema).toEqual(json);
    expect(tools[0]?.input_schema?.description).toBe("A coffee order");
    expectCoverage(tools[0]!.input_schema!, "input");
  });

  it("zod 3's Standard Schema validates calls; defaults reach the handler", async () => {
    const seen: unknown[] = [];
    const { call } = await registered((h) =>
      h.client.registerTool({ name: "order", description: "Order a coffee.", inputSchema: { schema: order, jsonSchema: json }, handler: (args) => void seen.push(args) }),
    );
    const refused = await call("order", { size: "m", payment: { method: "card", last4: "12" } }, "c1");
    expect(refused).toMatchObject({ type: "tool_error", error: { type: "tool_input_validation_error" } });
    expect((refused.error as { details: { issues: { path: unknown[] }[] } }).details.issues[0]?.path).toEqual(["payment", "last4"]);
    expect(await call("order", ORDER_OK, "c2")).toMatchObject({ type: "tool_result", id: "c2" });
    expect(seen).toEqual([{ size: "m", payment: { method: "cash" }, shots: 1 }]);
  });
});
