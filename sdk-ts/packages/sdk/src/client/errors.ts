// The error class of the test-runner client (§T13.3) and the mapping of control-plane error
// objects onto it (§C4).

import { isJsonObject } from "../core/text.js";

/** Every `error.data.type` the daemon may send on the control socket (§C4.3). */
export const CONTROL_ERROR_TYPES = [
  "invalid_request",
  "no_session",
  "ambiguous_session",
  "unknown_session",
  "session_not_active",
  "session_suspended",
  "session_leased",
  "policy_denied",
  "tool_not_found",
  "tool_input_validation_error",
  "tool_output_validation_error",
  "tool_execution_error",
  "tool_serialization_error",
  "tool_timeout",
  "tool_cancelled",
  "internal_error",
] as const;

/** Failures the client itself detects (§T13.3). */
export const CLIENT_ERROR_TYPES = ["connection_error", "timeout", "client_error"] as const;

export type ControlErrorType = (typeof CONTROL_ERROR_TYPES)[number];
export type ClientErrorType = (typeof CLIENT_ERROR_TYPES)[number];

export interface AppductErrorOptions {
  details?: unknown;
  code?: number;
  callId?: string;
  cause?: unknown;
}

/**
 * A failure of the test-runner client: a control-plane error type verbatim, one of the client's
 * own types (`connection_error`, `timeout`, `client_error`), or a CLI type from `link()`.
 */
export class AppductError extends Error {
  override name = "AppductError";
  readonly type: string;
  /** `error.data.details` of the daemon's error, or the client's own details. */
  readonly details?: unknown;
  /** The JSON-RPC code, when the error came from the daemon. */
  readonly code?: number;
  /** The call's handle, for `call()` errors. */
  readonly callId?: string;

  constructor(type: string, message: string, options: AppductErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.type = type;
    if (options.details !== undefined) this.details = options.details;
    if (options.code !== undefined) this.code = options.code;
    if (options.callId !== undefined) this.callId = options.callId;
  }
}

/**
 * The `AppductError` for a JSON-RPC error object. A type outside the closed enum is
 * `internal_error` (§C4.3). `callId` is the request's own handle, used when the error names
 * none.
 */
export function errorFromRpc(error: unknown, callId?: string): AppductError {
  const obj = isJsonObject(error) ? error : {};
  const data = isJsonObject(obj.data) ? obj.data : {};
  const type = typeof data.type === "string" && (CONTROL_ERROR_TYPES as readonly string[]).includes(data.type) ? data.type : "internal_error";
  const message = typeof obj.message === "string" ? obj.message : "The appduct daemon answered with an error.";
  const options: AppductErrorOptions = {};
  if (data.details !== undefined) options.details = data.details;
  if (typeof obj.code === "number") options.code = obj.code;
  const id = typeof data.callId === "string" ? data.callId : callId;
  if (id !== undefined) options.callId = id;
  return new AppductError(type, message, options);
}

/** Misuse detected before any request. */
export function clientError(message: string, details?: unknown): AppductError {
  return new AppductError("client_error", message, details === undefined ? {} : { details });
}
