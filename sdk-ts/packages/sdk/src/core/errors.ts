// Error classes of the app-side API (§T5.4).

/** The seven tool error types a `tool_error` frame may carry (§D7.3). */
export const TOOL_ERROR_TYPES = [
  "tool_not_found",
  "tool_input_validation_error",
  "tool_output_validation_error",
  "tool_execution_error",
  "tool_serialization_error",
  "tool_timeout",
  "tool_cancelled",
] as const;
export type ToolErrorType = (typeof TOOL_ERROR_TYPES)[number];

export function isToolErrorType(value: unknown): value is ToolErrorType {
  return typeof value === "string" && (TOOL_ERROR_TYPES as readonly string[]).includes(value);
}

/** An invalid tool or event definition, or an invalid group. */
export class AppductRegistrationError extends TypeError {
  override name = "AppductRegistrationError";
  readonly field: string;
  readonly rule: string;

  constructor(field: string, rule: string, subject?: string) {
    super(`${subject ? `${subject}: ` : ""}"${field}" ${rule}`);
    this.field = field;
    this.rule = rule;
  }
}

/** Thrown by tool handlers to choose the tool error type of their failure. */
export class AppductToolError extends Error {
  override name = "AppductToolError";
  readonly type: ToolErrorType;
  readonly details?: unknown;

  constructor(type: ToolErrorType, message: string, details?: unknown) {
    if (!isToolErrorType(type)) {
      throw new TypeError(`AppductToolError type must be one of ${TOOL_ERROR_TYPES.join(", ")}; got ${String(type)}`);
    }
    super(message);
    this.type = type;
    if (details !== undefined) {
      this.details = details;
    }
  }
}

export type AppductConnectErrorCode =
  | "invalid_url"
  | "missing_payload"
  | "invalid_payload"
  | "expired_payload"
  | "missing_pin"
  | "pin_mismatch"
  | "address_not_allowed"
  | "unsupported_link"
  | "handshake_failed"
  | "connect_error"
  | "superseded"
  | "closed_by_app"
  | "appduct_disabled";

/** `connect()` rejected. `closeReason` is the daemon's close reason when a close ended the claim. */
export class AppductConnectError extends Error {
  override name = "AppductConnectError";
  readonly code: AppductConnectErrorCode;
  readonly closeReason?: string;

  constructor(code: AppductConnectErrorCode, message: string, closeReason?: string) {
    super(message);
    this.code = code;
    if (closeReason !== undefined) {
      this.closeReason = closeReason;
    }
  }
}

/** `connect()` on an inert entry. */
export class AppductDisabledError extends AppductConnectError {
  override name = "AppductDisabledError";
  declare readonly code: "appduct_disabled";

  constructor(message = "appduct is disabled in this build.") {
    super("appduct_disabled", message);
  }
}
