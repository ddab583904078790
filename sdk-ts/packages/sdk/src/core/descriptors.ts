// Descriptor validators (§D8.1, §D8.2): the shared verdicts that agree with
// `tool-descriptors.json` and `event-descriptors.json`.

import { isJsonObject, isStringWithin, isWireInteger, MAX_FREE_TEXT_LENGTH } from "./text.js";

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
