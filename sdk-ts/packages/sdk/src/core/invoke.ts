// One tool invocation, from received args to the reply frame's content (§T5.2).

import { type ContentBlock, isToolContent } from "./content.js";
import { AppductToolError, type ToolErrorType } from "./errors.js";
import type { ToolEntry } from "./registry.js";
import type { Validation } from "./schema.js";
import { MAX_FREE_TEXT_LENGTH, truncateUtf16 } from "./text.js";
import type { ToolContext } from "./types.js";

export interface ToolFailure {
  type: ToolErrorType;
  message: string;
  details?: unknown;
}

/**
 * `result` is the JSON result (`undefined`: none, only with `content`); `content` the blocks of
 * a content-form return (§D17.1).
 */
export type ToolOutcome = { ok: true; result: unknown; content?: ContentBlock[] } | { ok: false; error: ToolFailure };

const fail = (type: ToolErrorType, message: string, details?: unknown): ToolOutcome => ({
  ok: false,
  error: details === undefined ? { type, message } : { type, message, details },
});

/** Every message the SDK sends is cut to 4096 UTF-16 code units (§D13.6). */
export function cutMessage(message: string): string {
  return truncateUtf16(message, MAX_FREE_TEXT_LENGTH);
}

async function runValidation(validate: (value: unknown) => Validation | Promise<Validation>, value: unknown): Promise<Validation> {
  try {
    return await validate(value);
  } catch (error) {
    return { ok: false, issues: [{ message: describeThrown(error).message }] };
  }
}

/** The `message` and `name` a thrown value is reported with (§T5.2). */
export function describeThrown(value: unknown): { message: string; name: string } {
  let name: string = typeof value;
  let message: string;
  if (typeof value === "object" && value !== null) {
    const maybe = value as { name?: unknown; message?: unknown };
    if (typeof maybe.name === "string") name = maybe.name;
    if (typeof maybe.message === "string") {
      return { message: maybe.message, name };
    }
  }
  try {
    message = String(value);
  } catch {
    // A null-prototype object has no toString.
    message = Object.prototype.toString.call(value);
  }
  return { message, name };
}

/**
 * Validates `args`, runs the handler and validates its output. Never rejects: every failure
 * becomes a `ToolFailure`. Serialization is checked by the caller, which owns the frame.
 */
export async function invokeTool(tool: ToolEntry, args: Record<string, unknown>, ctx: ToolContext): Promise<ToolOutcome> {
  const name = tool.name;
  let input: unknown;
  if (!tool.input) {
    const keys = Object.keys(args);
    if (keys.length > 0) {
      return fail("tool_input_validation_error", `Tool "${name}" takes no arguments.`, {
        issues: keys.map((key) => ({ message: "unexpected argument", path: [key] })),
      });
    }
    input = undefined;
  } else if (tool.input.validate) {
    const checked = await runValidation(tool.input.validate, args);
    if (!checked.ok) {
      const first = checked.issues[0]?.message ?? "invalid arguments";
      return fail("tool_input_validation_error", `Invalid arguments for tool "${name}": ${first}`, { issues: checked.issues });
    }
    input = checked.value;
  } else {
    input = args;
  }

  let output: unknown;
  try {
    output = await tool.handler(input, ctx);
  } catch (error) {
    if (error instanceof AppductToolError) {
      return fail(error.type, error.message, error.details);
    }
    const { message, name: errorName } = describeThrown(error);
    return fail("tool_execution_error", message, { name: errorName });
  }

  // The content form: the blocks go out as they are; its `result`, when given, is checked
  // like any result.
  let content: ContentBlock[] | undefined;
  if (isToolContent(output)) {
    content = output.content;
    output = output.result;
    if (output === undefined) return { ok: true, result: undefined, content };
  }
  const done = (result: unknown): ToolOutcome => (content ? { ok: true, result, content } : { ok: true, result });

  if (!tool.output) {
    if (output === undefined) {
      return { ok: true, result: null };
    }
    return fail("tool_output_validation_error", `Tool "${name}" returned a value but declares no output schema.`);
  }
  if (tool.output.validate) {
    const checked = await runValidation(tool.output.validate, output);
    if (!checked.ok) {
      return fail("tool_output_validation_error", `Tool "${name}" returned a value that does not match its output schema.`, {
        issues: checked.issues,
      });
    }
    return done(checked.value);
  }
  return done(output);
}
