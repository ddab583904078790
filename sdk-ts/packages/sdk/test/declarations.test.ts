// Registry declarations (§T16, device.md §D18): riskLevel, requiredPermissions and testCases
// reach the wire descriptor as written, and a bad shape throws before anything is sent.

import { describe, expect, it } from "vitest";

import { validateToolDescriptor } from "../src/core/descriptors.js";
import { AppductRegistrationError } from "../src/core/errors.js";
import type { ToolDefinition } from "../src/core/types.js";
import { makeHarness } from "./support/harness.js";

const noop = (): undefined => undefined;
const tool = (overrides: Record<string, unknown> = {}): ToolDefinition =>
  ({ name: "t", description: "A tool.", handler: noop, ...overrides }) as ToolDefinition;

describe("registry declarations", () => {
  it("are sent as declared, after the v2 fields, permissions deduplicated", () => {
    const { client } = makeHarness();
    const testCases = [
      { name: "adds", arguments: { a: 1 }, expect: { schema: { type: "object", required: ["total"] } } },
      { arguments: {}, expect: { error: "tool_input_validation_error" } },
    ];
    client.registerTool(
      tool({ group: "g", riskLevel: "high", requiredPermissions: ["cart.write", "net", "cart.write"], testCases }),
    );
    const [wire] = client.getRegisteredTools();
    expect(Object.keys(wire!)).toEqual(["name", "description", "group", "riskLevel", "requiredPermissions", "testCases"]);
    expect(wire).toMatchObject({ riskLevel: "high", requiredPermissions: ["cart.write", "net"], testCases });
  });

  it("leave a definition without them unchanged", () => {
    const { client } = makeHarness();
    client.registerTool(tool());
    expect(client.getRegisteredTools()).toEqual([{ name: "t", description: "A tool." }]);
  });

  it("throw AppductRegistrationError naming the field for a bad shape", () => {
    const { client } = makeHarness();
    const cases: [Record<string, unknown>, string][] = [
      [{ riskLevel: "severe" }, "riskLevel"],
      [{ requiredPermissions: "camera" }, "requiredPermissions"],
      [{ requiredPermissions: [""] }, "requiredPermissions"],
      [{ requiredPermissions: Array.from({ length: 33 }, (_, i) => `p${i}`) }, "requiredPermissions"],
      [{ testCases: [] }, "testCases"],
      [{ testCases: [{ expect: {} }] }, "testCases[0]"],
      [{ testCases: [{ arguments: {}, expect: {} }, { arguments: {}, expect: { error: "x", schema: {} } }] }, "testCases[1].expect"],
      [{ testCases: [{ arguments: {}, expect: { error: "Not a type" } }] }, "testCases[0].expect.error"],
      [{ testCases: [{ arguments: {}, expect: { schema: { pattern: "a" } } }] }, "testCases[0].expect.schema"],
      [{ testCases: [{ arguments: {}, expect: { schema: { properties: { a: { type: "strin" } } } } }] }, "testCases[0].expect.schema"],
      [{ testCases: [{ name: "", arguments: {}, expect: {} }] }, "testCases[0].name"],
      // Unknown keys are refused, as the daemon refuses them (§D18.3).
      [{ testCases: [{ arguments: {}, expect: {} }, { arguments: {}, expect: {}, note: "x" }] }, "testCases[1]"],
      [{ testCases: [{ arguments: {}, expect: { shcema: { type: "object" } } }] }, "testCases[0].expect"],
      [{ testCases: [{ arguments: { s: "x".repeat(16_384) }, expect: {} }] }, "testCases"],
    ];
    for (const [overrides, field] of cases) {
      let error: unknown;
      try {
        client.registerTool(tool(overrides));
      } catch (e) {
        error = e;
      }
      expect(error, field).toBeInstanceOf(AppductRegistrationError);
      expect((error as AppductRegistrationError).field).toBe(field);
    }
    expect(client.getRegisteredTools()).toEqual([]);
  });

  it("validateToolDescriptor accepts every §D18.4 keyword", () => {
    const shape = {
      $schema: "https://json-schema.org/draft/2020-12/schema", title: "t", description: "d",
      type: ["object", "null"], required: ["a"], additionalProperties: false,
      properties: { a: { type: "array", minItems: 1, maxItems: 3, items: { enum: [1, 2], const: 1 } } },
    };
    expect(validateToolDescriptor({ name: "t", description: "d", testCases: [{ arguments: {}, expect: { schema: shape } }] })).toEqual({ valid: true });
  });
});
