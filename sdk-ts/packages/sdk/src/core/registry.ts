// Tool and event definitions → validated registry entries with their wire descriptors
// (§T3, §T4, §T6).

import {
  isValidAnnotations,
  isValidDescription,
  isValidEventName,
  isValidGroup,
  isValidToolName,
  validateEventDescriptor,
  validateToolDescriptor,
  type ToolAnnotations,
  type WireEventDescriptor,
  type WireToolDescriptor,
} from "./descriptors.js";
import { AppductRegistrationError } from "./errors.js";
import { resolveSchema, rootTypeExcludesObject, type ResolvedSchema } from "./schema.js";
import { isJsonObject } from "./text.js";
import type { EventDefinition, ToolContext, ToolDefinition } from "./types.js";

/** Call deadline bounds and default, in milliseconds (§D8.1, §D13.5). */
export const MIN_TIMEOUT_MS = 1_000;
export const MAX_TIMEOUT_MS = 600_000;
export const DEFAULT_TIMEOUT_MS = 10_000;

export interface ToolEntry {
  readonly name: string;
  readonly wire: WireToolDescriptor;
  readonly input: ResolvedSchema | undefined;
  readonly output: ResolvedSchema | undefined;
  /** The app-side deadline: declared `timeoutMs` clamped, else 10000. */
  readonly deadlineMs: number;
  readonly handler: (args: unknown, ctx: ToolContext) => unknown;
}

export interface EventEntry {
  readonly name: string;
  readonly wire: WireEventDescriptor;
  readonly payload: ResolvedSchema | undefined;
}

export interface BuildContext {
  dev: boolean;
  warn: (message: string) => void;
}

function has(obj: object, key: string): boolean {
  return Object.prototype.hasOwnProperty.call(obj, key) && (obj as Record<string, unknown>)[key] !== undefined;
}

/** `timeoutMs` is lenient (§T3.1): non-finite ignored; finite truncated and clamped. */
function resolveTimeout(def: ToolDefinition<unknown, unknown>, subject: string, ctx: BuildContext): number | undefined {
  if (!has(def, "timeoutMs")) {
    return undefined;
  }
  const raw = def.timeoutMs;
  if (typeof raw !== "number" || !Number.isFinite(raw)) {
    if (ctx.dev) ctx.warn(`appduct: ${subject}: timeoutMs ${String(raw)} is not a finite number; it is ignored.`);
    return undefined;
  }
  const clamped = Math.min(MAX_TIMEOUT_MS, Math.max(MIN_TIMEOUT_MS, Math.trunc(raw)));
  if (clamped !== raw && ctx.dev) {
    ctx.warn(`appduct: ${subject}: timeoutMs ${raw} is clamped to ${clamped}.`);
  }
  return clamped;
}

/** Validates a tool definition and builds its entry; throws `AppductRegistrationError`. */
export function buildToolEntry(def: ToolDefinition<unknown, unknown>, ctx: BuildContext): ToolEntry {
  if (!isJsonObject(def)) {
    throw new AppductRegistrationError("definition", "must be an object");
  }
  if (!isValidToolName(def.name)) {
    throw new AppductRegistrationError("name", "must match ^[A-Za-z0-9_-]{1,64}$", "registerTool");
  }
  const subject = `tool "${def.name}"`;
  if (!isValidDescription(def.description)) {
    throw new AppductRegistrationError("description", "must be a string of 1 to 4096 UTF-16 code units", subject);
  }
  if (typeof def.handler !== "function") {
    throw new AppductRegistrationError("handler", "must be a function", subject);
  }
  if (has(def, "annotations") && !isValidAnnotations(def.annotations)) {
    throw new AppductRegistrationError("annotations", "may hold only readOnlyHint, destructiveHint and idempotentHint, each boolean", subject);
  }
  // `group: null` is invalid, unlike an absent group.
  if (Object.prototype.hasOwnProperty.call(def, "group") && def.group !== undefined && !isValidGroup(def.group)) {
    throw new AppductRegistrationError("group", "must match ^[A-Za-z0-9_-]{1,64}(/[A-Za-z0-9_-]{1,64})?$", subject);
  }
  const timeoutMs = resolveTimeout(def, subject, ctx);
  const input = has(def, "inputSchema")
    ? resolveSchema(def.inputSchema, { subject, field: "inputSchema", direction: "input", ...ctx })
    : undefined;
  const output = has(def, "outputSchema")
    ? resolveSchema(def.outputSchema, { subject, field: "outputSchema", direction: "output", ...ctx })
    : undefined;
  if (ctx.dev && rootTypeExcludesObject(input?.jsonSchema)) {
    ctx.warn(`appduct: ${subject}: the input schema's root type rules out an object; tool arguments are always an object.`);
  }

  const wire: WireToolDescriptor = { name: def.name, description: def.description };
  if (input?.jsonSchema) wire.input_schema = input.jsonSchema;
  if (output?.jsonSchema) wire.output_schema = output.jsonSchema;
  if (has(def, "annotations")) wire.annotations = copyAnnotations(def.annotations as ToolAnnotations);
  if (timeoutMs !== undefined) wire.timeout_ms = timeoutMs;
  if (def.group !== undefined) wire.group = def.group;
  // §T16: registry declarations, passed on as written (checked below, as the daemon checks them).
  if (def.riskLevel !== undefined) wire.riskLevel = def.riskLevel;
  if (def.requiredPermissions !== undefined) {
    // Not an array (a string is iterable too): passed as is, so the check below refuses it.
    wire.requiredPermissions = Array.isArray(def.requiredPermissions)
      ? [...new Set(def.requiredPermissions)]
      : def.requiredPermissions;
  }
  if (def.testCases !== undefined) wire.testCases = def.testCases;

  const verdict = validateToolDescriptor(wire);
  if (!verdict.valid) {
    throw new AppductRegistrationError(verdict.field, verdict.rule, subject);
  }
  return {
    name: def.name,
    wire,
    input,
    output,
    deadlineMs: timeoutMs ?? DEFAULT_TIMEOUT_MS,
    handler: def.handler as (args: unknown, ctx: ToolContext) => unknown,
  };
}

function copyAnnotations(annotations: ToolAnnotations): ToolAnnotations {
  const out: ToolAnnotations = {};
  for (const key of ["readOnlyHint", "destructiveHint", "idempotentHint"] as const) {
    if (annotations[key] !== undefined) out[key] = annotations[key];
  }
  return out;
}

/** Validates an event declaration and builds its entry; throws `AppductRegistrationError`. */
export function buildEventEntry(def: EventDefinition<unknown>, ctx: BuildContext): EventEntry {
  if (!isJsonObject(def)) {
    throw new AppductRegistrationError("definition", "must be an object");
  }
  if (!isValidEventName(def.name)) {
    throw new AppductRegistrationError("name", "must be a string of 1 to 4096 UTF-16 code units", "registerEvent");
  }
  const subject = `event "${def.name}"`;
  if (!isValidDescription(def.description)) {
    throw new AppductRegistrationError("description", "must be a string of 1 to 4096 UTF-16 code units", subject);
  }
  const payload = has(def, "payloadSchema")
    ? resolveSchema(def.payloadSchema, { subject, field: "payloadSchema", direction: "output", ...ctx })
    : undefined;
  const wire: WireEventDescriptor = { name: def.name, description: def.description };
  if (payload?.jsonSchema) wire.payload_schema = payload.jsonSchema;
  const verdict = validateEventDescriptor(wire);
  if (!verdict.valid) {
    throw new AppductRegistrationError(verdict.field, verdict.rule, subject);
  }
  return { name: def.name, wire, payload };
}
