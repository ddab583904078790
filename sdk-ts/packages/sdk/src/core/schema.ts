// Resolution of the accepted schema forms (§T4) into a descriptor field and a validator.

import { AppductRegistrationError } from "./errors.js";
import type { StandardIssue, StandardResult } from "./standard-schema.js";
import { isPlainObject } from "./text.js";

const JSON_SCHEMA_TYPES = ["object", "array", "string", "number", "integer", "boolean", "null"];
const CONVERTER_OPTIONS = { target: "draft-2020-12" } as const;

/** One validation issue as the wire carries it in `details.issues`. */
export interface WireIssue {
  message: string;
  path?: (string | number)[];
}

export type Validation = { ok: true; value: unknown } | { ok: false; issues: WireIssue[] };

/** What a schema slot resolves to. */
export interface ResolvedSchema {
  /** The descriptor field; `undefined` when the slot is omitted from the wire. */
  jsonSchema: Record<string, unknown> | undefined;
  /** The validator of forms 1, 2 and 4; `undefined` for form 3 (values pass as sent). */
  validate: ((value: unknown) => Validation | Promise<Validation>) | undefined;
}

export interface SchemaContext {
  /** Whose schema this is, for messages: `tool "x"` or `event "y"`. */
  subject: string;
  /** Registration field name: `inputSchema`, `outputSchema` or `payloadSchema`. */
  field: string;
  direction: "input" | "output";
  dev: boolean;
  warn: (message: string) => void;
}

interface StandardLike {
  "~standard": { validate: (value: unknown) => unknown; jsonSchema?: unknown };
}

function hasStandard(value: unknown): value is StandardLike {
  if ((typeof value !== "object" && typeof value !== "function") || value === null) {
    return false;
  }
  const std = (value as { "~standard"?: unknown })["~standard"];
  return typeof std === "object" && std !== null && typeof (std as { validate?: unknown }).validate === "function";
}

function isConverter(value: unknown): value is { input: (o: unknown) => unknown; output: (o: unknown) => unknown } {
  return (
    typeof value === "object" &&
    value !== null &&
    typeof (value as { input?: unknown }).input === "function" &&
    typeof (value as { output?: unknown }).output === "function"
  );
}

/** A plain object whose own `type`, if any, names JSON Schema types (form 3). */
function isPlainJsonSchema(value: unknown): value is Record<string, unknown> {
  if (!isPlainObject(value)) {
    return false;
  }
  if (!Object.prototype.hasOwnProperty.call(value, "type")) {
    return true;
  }
  const type = value.type;
  if (typeof type === "string") {
    return JSON_SCHEMA_TYPES.includes(type);
  }
  return Array.isArray(type) && type.length > 0 && type.every((t) => typeof t === "string" && JSON_SCHEMA_TYPES.includes(t));
}

function normalizeIssues(issues: ReadonlyArray<StandardIssue>): WireIssue[] {
  return issues.map((issue) => {
    const out: WireIssue = { message: typeof issue.message === "string" ? issue.message : String(issue.message) };
    if (issue.path && issue.path.length > 0) {
      out.path = issue.path.map((segment) => {
        const key = typeof segment === "object" && segment !== null ? segment.key : segment;
        return typeof key === "number" ? key : String(key);
      });
    }
    return out;
  });
}

function standardValidator(schema: StandardLike): (value: unknown) => Validation | Promise<Validation> {
  const convert = (result: unknown): Validation => {
    const r = result as StandardResult<unknown>;
    if (r.issues) {
      const issues = normalizeIssues(r.issues);
      return { ok: false, issues: issues.length > 0 ? issues : [{ message: "invalid value" }] };
    }
    return { ok: true, value: (r as { value: unknown }).value };
  };
  return (value) => {
    const result = schema["~standard"].validate(value);
    return result instanceof Promise ? result.then(convert) : convert(result);
  };
}

/** Runs a converter; a throw or a non-plain-object result is `undefined`. */
function convert(converter: unknown, direction: "input" | "output"): Record<string, unknown> | undefined {
  if (!isConverter(converter)) {
    return undefined;
  }
  try {
    const out = converter[direction](CONVERTER_OPTIONS);
    return isPlainObject(out) ? out : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Resolves one schema slot. Throws `AppductRegistrationError` for rejected values and, in
 * development, for a Standard Schema that cannot export a JSON Schema (form 4).
 */
export function resolveSchema(value: unknown, ctx: SchemaContext): ResolvedSchema {
  const unexportable = (validate: ResolvedSchema["validate"], why: string): ResolvedSchema => {
    if (ctx.dev) {
      throw new AppductRegistrationError(ctx.field, `cannot be exported as JSON Schema (${why}); pass {schema, jsonSchema}`, ctx.subject);
    }
    ctx.warn(`appduct: ${ctx.subject}: ${ctx.field} cannot be exported as JSON Schema (${why}); the descriptor omits it.`);
    return { jsonSchema: undefined, validate };
  };

  // Form 1 or 4: a Standard Schema value (objects and callable schemas alike).
  if (hasStandard(value)) {
    const validate = standardValidator(value);
    const converter = value["~standard"].jsonSchema;
    if (converter === undefined) {
      return unexportable(validate, "no Standard JSON Schema converter");
    }
    const exported = convert(converter, ctx.direction);
    return exported ? { jsonSchema: exported, validate } : unexportable(validate, "its converter failed");
  }

  if (isPlainObject(value)) {
    const keys = Object.keys(value);
    const isPairShape = keys.length > 0 && keys.every((k) => k === "schema" || k === "jsonSchema");
    // Form 2: {schema, jsonSchema}; a lone half of a pair is rejected.
    if (isPairShape) {
      if (keys.length !== 2) {
        throw new AppductRegistrationError(ctx.field, "must give both schema and jsonSchema in a pair", ctx.subject);
      }
      if (!hasStandard(value.schema)) {
        throw new AppductRegistrationError(ctx.field, "pair's schema must be a Standard Schema", ctx.subject);
      }
      const validate = standardValidator(value.schema);
      const js = value.jsonSchema;
      if (isConverter(js)) {
        const exported = convert(js, ctx.direction);
        return exported ? { jsonSchema: exported, validate } : unexportable(validate, "its converter failed");
      }
      if (isPlainJsonSchema(js)) {
        return { jsonSchema: js, validate };
      }
      throw new AppductRegistrationError(ctx.field, "pair's jsonSchema must be a plain JSON Schema object or a converter", ctx.subject);
    }
    // Form 3: a plain JSON Schema object, verbatim, no validation.
    if (isPlainJsonSchema(value)) {
      return { jsonSchema: value, validate: undefined };
    }
    throw new AppductRegistrationError(ctx.field, "has a type that is not a JSON Schema type name", ctx.subject);
  }

  throw new AppductRegistrationError(
    ctx.field,
    "must be a Standard Schema, a {schema, jsonSchema} pair or a plain JSON Schema object",
    ctx.subject,
  );
}

/** Whether an input schema's root `type` rules out an object (a development warning, §T4). */
export function rootTypeExcludesObject(schema: Record<string, unknown> | undefined): boolean {
  if (!schema || !Object.prototype.hasOwnProperty.call(schema, "type")) {
    return false;
  }
  const type = schema.type;
  if (typeof type === "string") {
    return type !== "object";
  }
  return Array.isArray(type) && !type.includes("object");
}

/**
 * The JSON Schema a schema slot would put on the wire, without validating or throwing: what the
 * React bindings compare by value to decide whether a definition changed (§T12). `undefined`
 * when the value cannot be exported (such schemas compare by identity).
 */
export function exportJsonSchema(value: unknown, direction: "input" | "output"): Record<string, unknown> | undefined {
  if (hasStandard(value)) {
    return convert(value["~standard"].jsonSchema, direction);
  }
  if (!isPlainObject(value)) {
    return undefined;
  }
  const keys = Object.keys(value);
  if (keys.length === 2 && keys.includes("schema") && keys.includes("jsonSchema")) {
    const js = value.jsonSchema;
    if (isConverter(js)) return convert(js, direction);
    return isPlainJsonSchema(js) ? js : undefined;
  }
  return isPlainJsonSchema(value) ? value : undefined;
}
