// Hand-built Standard Schema values (no schema library is a dependency).

import type { JsonSchemaConverter, StandardIssue, StandardSchemaV1 } from "../../src/core/standard-schema.js";

type Check<T> = (value: unknown) => { value: T } | { issues: StandardIssue[] };

/** A Standard Schema v1 value; with `json`, it also carries a Standard JSON Schema converter. */
export function standard<T>(check: Check<T>, json?: JsonSchemaConverter, options: { async?: boolean } = {}): StandardSchemaV1<unknown, T> {
  const validate = (value: unknown) => {
    const result = check(value);
    return options.async ? Promise.resolve(result) : result;
  };
  return {
    "~standard": json === undefined ? { version: 1, vendor: "test", validate } : { version: 1, vendor: "test", validate, jsonSchema: json },
  };
}

/** A converter returning fixed input and output schemas and recording the options it got. */
export function converter(input: Record<string, unknown>, output: Record<string, unknown> = input): JsonSchemaConverter & { calls: unknown[] } {
  const calls: unknown[] = [];
  return {
    calls,
    input: (options) => {
      calls.push({ direction: "input", options });
      return input;
    },
    output: (options) => {
      calls.push({ direction: "output", options });
      return output;
    },
  };
}

/** `{a: number, b: number}` with a default for `b`: validation applies the default. */
export const sumArgs = standard<{ a: number; b: number }>(
  (value) => {
    const v = value as { a?: unknown; b?: unknown };
    if (typeof v !== "object" || v === null) return { issues: [{ message: "expected an object" }] };
    if (typeof v.a !== "number") return { issues: [{ message: "a must be a number", path: ["a"] }] };
    if (v.b !== undefined && typeof v.b !== "number") return { issues: [{ message: "b must be a number", path: [{ key: "b" }] }] };
    return { value: { a: v.a, b: (v.b as number | undefined) ?? 1 } };
  },
  converter({ type: "object", properties: { a: { type: "number" }, b: { type: "number" } }, required: ["a"] }),
);

/** `{total: number}`. */
export const totalResult = standard<{ total: number }>(
  (value) => {
    const v = value as { total?: unknown };
    return typeof v === "object" && v !== null && typeof v.total === "number" ? { value: { total: v.total } } : { issues: [{ message: "total must be a number", path: ["total"] }] };
  },
  converter({ type: "object", properties: { total: { type: "number" } } }),
);
