// Descriptor validators (§D8.1, §D8.2): the shared verdicts that agree with
// `tool-descriptors.json` and `event-descriptors.json`.

import { isJsonObject, isStringWithin, isWireInteger, MAX_FREE_TEXT_LENGTH, utf8ByteLength } from "./text.js";

export const TOOL_NAME_PATTERN = /^[A-Za-z0-9_-]{1,64}$/;
export const GROUP_PATTERN = /^[A-Za-z0-9_-]{1,64}(\/[A-Za-z0-9_-]{1,64})?$/;
export const ANNOTATION_KEYS = ["readOnlyHint", "destructiveHint", "idempotentHint"] as const;

export interface ToolAnnotations {
  readOnlyHint?: boolean;
  destructiveHint?: boolean;
  idempotentHint?: boolean;
}

/** A tool descriptor in wire form (§D8.1), keys in the order the SDK emits them. */
export interface WireToolDescriptor {
  name: string;
  description: string;
  input_schema?: Record<string, unknown>;
  output_schema?: Record<string, unknown>;
  annotations?: ToolAnnotations;
  timeout_ms?: number;
  group?: string;
  /** §D18 (an extension): registry declarations. */
  riskLevel?: "low" | "medium" | "high";
  requiredPermissions?: string[];
  testCases?: { name?: string; arguments: Record<string, unknown>; expect: { schema?: Record<string, unknown>; error?: string } }[];
}

/** An event descriptor in wire form (§D8.2). */
export interface WireEventDescriptor {
  name: string;
  description: string;
  payload_schema?: Record<string, unknown>;
}

/** A validator verdict: valid, or the first offending field and the rule it breaks. */
export type DescriptorVerdict = { valid: true } | { valid: false; field: string; rule: string };

const VALID: DescriptorVerdict = { valid: true };
const invalid = (field: string, rule: string): DescriptorVerdict => ({ valid: false, field, rule });

/** An optional field: absent (or `undefined`, which JSON drops) or present with any value. */
function present(obj: Record<string, unknown>, key: string): boolean {
  return Object.prototype.hasOwnProperty.call(obj, key) && obj[key] !== undefined;
}

export function isValidToolName(name: unknown): name is string {
  return typeof name === "string" && TOOL_NAME_PATTERN.test(name);
}

export function isValidGroup(group: unknown): group is string {
  return typeof group === "string" && GROUP_PATTERN.test(group);
}

export function isValidDescription(description: unknown): description is string {
  return isStringWithin(description, 1, MAX_FREE_TEXT_LENGTH);
}

/** Event names: 1..=4096 UTF-16 code units, any characters (§D8.2). */
export function isValidEventName(name: unknown): name is string {
  return isStringWithin(name, 1, MAX_FREE_TEXT_LENGTH);
}

/** Annotations: an object holding only the three hint keys, each boolean. */
export function isValidAnnotations(value: unknown): value is ToolAnnotations {
  if (!isJsonObject(value)) {
    return false;
  }
  return Object.entries(value).every(
    ([key, v]) => (ANNOTATION_KEYS as readonly string[]).includes(key) && (typeof v === "boolean" || v === undefined),
  );
}

/** Verdict on a tool descriptor (§D8.1). Unknown keys (such as `timeoutMs`) are ignored. */
export function validateToolDescriptor(descriptor: unknown): DescriptorVerdict {
  if (!isJsonObject(descriptor)) {
    return invalid("descriptor", "must be a JSON object");
  }
  if (!isValidToolName(descriptor.name)) {
    return invalid("name", "must match ^[A-Za-z0-9_-]{1,64}$");
  }
  if (!isValidDescription(descriptor.description)) {
    return invalid("description", "must be a string of 1 to 4096 UTF-16 code units");
  }
  for (const key of ["input_schema", "output_schema"]) {
    if (present(descriptor, key) && !isJsonObject(descriptor[key])) {
      return invalid(key, "must be a JSON object");
    }
  }
  if (present(descriptor, "annotations") && !isValidAnnotations(descriptor.annotations)) {
    return invalid("annotations", "must hold only readOnlyHint, destructiveHint and idempotentHint, each boolean");
  }
  if (present(descriptor, "timeout_ms") && !(isWireInteger(descriptor.timeout_ms) && descriptor.timeout_ms >= 1)) {
    return invalid("timeout_ms", "must be an integer >= 1");
  }
  if (present(descriptor, "group") && !isValidGroup(descriptor.group)) {
    return invalid("group", "must match ^[A-Za-z0-9_-]{1,64}(/[A-Za-z0-9_-]{1,64})?$");
  }
  return validateDeclarations(descriptor);
}

/** The JSON Schema keywords a test case's result shape may use (device.md §D18.4). */
export const SHAPE_KEYWORDS = [
  "type", "properties", "required", "additionalProperties", "items", "enum", "const",
  "minItems", "maxItems", "$schema", "title", "description",
] as const;
const SHAPE_TYPES = ["null", "boolean", "object", "array", "number", "integer", "string"];
const ERROR_TYPE_PATTERN = /^[a-z_]{1,64}$/;
const MAX_TEST_CASES_BYTES = 16_384;

function isValidShape(shape: unknown, depth = 0): boolean {
  if (depth > 16 || !isJsonObject(shape)) return false;
  return Object.entries(shape).every(([key, v]) => {
    switch (key) {
      case "type":
        return typeof v === "string"
          ? SHAPE_TYPES.includes(v)
          : Array.isArray(v) && v.length > 0 && v.every((t) => typeof t === "string" && SHAPE_TYPES.includes(t));
      case "properties":
        return isJsonObject(v) && Object.values(v).every((sub) => isValidShape(sub, depth + 1));
      case "items":
        return isValidShape(v, depth + 1);
      case "required":
        return Array.isArray(v) && v.every((r) => typeof r === "string");
      case "additionalProperties":
        return typeof v === "boolean";
      case "enum":
        return Array.isArray(v);
      case "minItems":
      case "maxItems":
        return isWireInteger(v) && v >= 0;
      default:
        return (SHAPE_KEYWORDS as readonly string[]).includes(key);
    }
  });
}

/** The keys a test case and its `expect` may hold (§D18.3). */
const CASE_KEYS = ["name", "arguments", "expect"];
const EXPECT_KEYS = ["schema", "error"];

/** The registry declarations of §D18, as the daemon checks them. */
function validateDeclarations(descriptor: Record<string, unknown>): DescriptorVerdict {
  if (present(descriptor, "riskLevel") && !["low", "medium", "high"].includes(descriptor.riskLevel as string)) {
    return invalid("riskLevel", 'must be "low", "medium" or "high"');
  }
  if (present(descriptor, "requiredPermissions")) {
    const p = descriptor.requiredPermissions;
    if (!Array.isArray(p) || p.length > 32 || !p.every((s) => isStringWithin(s, 1, 128))) {
      return invalid("requiredPermissions", "must hold at most 32 strings of 1 to 128 UTF-16 code units");
    }
  }
  if (present(descriptor, "testCases")) {
    const cases = descriptor.testCases;
    if (!Array.isArray(cases) || cases.length < 1 || cases.length > 16) {
      return invalid("testCases", "must be an array of 1 to 16 cases");
    }
    for (const [i, c] of cases.entries()) {
      const at = `testCases[${i}]`;
      if (!isJsonObject(c) || !isJsonObject(c.arguments) || !isJsonObject(c.expect)) {
        return invalid(at, "must be an object with an `arguments` object and an `expect` object");
      }
      // Unknown keys are refused, as the daemon does (§D18.3): a typo in `expect` would
      // otherwise mean "any success passes".
      if (Object.keys(c).some((k) => !CASE_KEYS.includes(k) && present(c, k))) {
        return invalid(at, "has a key other than `name`, `arguments` and `expect`");
      }
      const exp = c.expect as Record<string, unknown>;
      if (Object.keys(exp).some((k) => !EXPECT_KEYS.includes(k) && present(exp, k))) {
        return invalid(`${at}.expect`, "has a key other than `schema` and `error`");
      }
      if (present(c, "name") && !isStringWithin(c.name, 1, 128)) {
        return invalid(`${at}.name`, "must be a string of 1 to 128 UTF-16 code units");
      }
      const { schema, error } = c.expect as Record<string, unknown>;
      if (schema !== undefined && error !== undefined) {
        return invalid(`${at}.expect`, "may hold `schema` or `error`, not both");
      }
      if (schema !== undefined && !isValidShape(schema)) {
        return invalid(`${at}.expect.schema`, "must use only the keywords of §D18.4, with values of their type");
      }
      if (error !== undefined && !(typeof error === "string" && ERROR_TYPE_PATTERN.test(error))) {
        return invalid(`${at}.expect.error`, "must be an error type (^[a-z_]{1,64}$)");
      }
    }
    if (utf8ByteLength(JSON.stringify(cases)) > MAX_TEST_CASES_BYTES) {
      return invalid("testCases", "must take at most 16384 bytes as compact JSON");
    }
  }
  return VALID;
}

/** Verdict on an event descriptor (§D8.2). */
export function validateEventDescriptor(descriptor: unknown): DescriptorVerdict {
  if (!isJsonObject(descriptor)) {
    return invalid("descriptor", "must be a JSON object");
  }
  if (!isValidEventName(descriptor.name)) {
    return invalid("name", "must be a string of 1 to 4096 UTF-16 code units");
  }
  if (!isValidDescription(descriptor.description)) {
    return invalid("description", "must be a string of 1 to 4096 UTF-16 code units");
  }
  if (present(descriptor, "payload_schema") && !isJsonObject(descriptor.payload_schema)) {
    return invalid("payload_schema", "must be a JSON object");
  }
  return VALID;
}
