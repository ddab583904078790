// Calls in flight on the app side (§T5.2, §T5.3): the app-side deadline, cancellation,
// progress, and the one reply each call may send, on the connection it arrived on.

import { MAX_CONTENT_BLOCKS } from "./content.js";
import { splitBody } from "./parts.js";
import { encodeFrame } from "./frame.js";
import { cutMessage, invokeTool, type ToolFailure, type ToolOutcome } from "./invoke.js";
import type { ToolEntry } from "./registry.js";
import { isJsonObject, isStringWithin, MAX_FRAME_BYTES, MAX_IDENTIFIER_LENGTH, utf8ByteLength } from "./text.js";
import type { Clock, ToolContext } from "./types.js";

/** What the call table needs from the session core; `C` is the core's connection. */
export interface CallHost<C> {
  readonly clock: Clock;
  /** Whether `conn` is still the acked connection of an active session: replies may go out. */
  isLive(conn: C): boolean;
  /** Sends a frame after measuring it; `false` when it was not sent. */
  sendFrame(conn: C, frame: Record<string, unknown>): boolean;
  /** Sends already encoded and measured text. */
  write(conn: C, text: string): boolean;
  log(level: "warn" | "error", ...args: unknown[]): void;
  /** What the latest `session_ack` of `conn` announced (§D17.1). */
  features(conn: C): ResultFeatures;
}

/** The result extensions a `session_ack` announced; absent fields mean plain v2. */
export interface ResultFeatures {
  /** `result_content: true`: `tool_result` may carry `content`. */
  resultContent: boolean;
  /** `result_parts_max_bytes`: bodies up to this size may go as `tool_result_part` frames. */
  partsMaxBytes: number | null;
}

export interface InFlightCall<C> {
  readonly id: string;
  readonly name: string;
  readonly conn: C;
  readonly sessionId: string;
  readonly controller: AbortController;
  timer: unknown;
  /** Replied to, timed out, cancelled or lost: nothing more is sent for this id. */
  settled: boolean;
}

export class CallTable<C> {
  private readonly calls = new Map<string, InFlightCall<C>>();

  constructor(private readonly host: CallHost<C>) {}

  /** Handles one `tool_call` frame received on `conn`. */
  receive(conn: C, sessionId: string, frame: Record<string, unknown>, tools: ReadonlyMap<string, ToolEntry>): void {
    const id = frame.id;
    const name = frame.name;
    if (!isStringWithin(id, 1, MAX_IDENTIFIER_LENGTH) || typeof name !== "string") return;
    // A second tool_call with the id of a call in flight is ignored (§T5.3).
    if (this.calls.has(id)) return;
    const tool = tools.get(name);
    if (!tool) {
      this.sendToolError(conn, sessionId, id, { type: "tool_not_found", message: `Tool "${name}" is not registered.` });
      return;
    }
    const args = isJsonObject(frame.args) ? frame.args : {};
    const call: InFlightCall<C> = { id, name, conn, sessionId, controller: new AbortController(), timer: null, settled: false };
    // The deadline runs from the frame's arrival.
    call.timer = this.host.clock.setTimeout(() => this.onDeadline(call, tool.deadlineMs), tool.deadlineMs);
    this.calls.set(id, call);
    const ctx: ToolContext = {
      sessionId,
      invocationId: id,
      receivedAt: new Date(this.host.clock.now()).toISOString(),
      reportProgress: (progress, message) => this.reportProgress(call, progress, message),
      signal: call.controller.signal,
    };
    invokeTool(tool, args, ctx).then(
      (outcome) => this.settle(call, outcome),
      (error: unknown) => this.settle(call, { ok: false, error: { type: "tool_execution_error", message: String(error) } }),
    );
  }

  /** Handles `tool_cancel`: answer `tool_cancelled` at once, then abort the handler. */
  cancel(frame: Record<string, unknown>): void {
    const id = frame.id;
    if (typeof id !== "string") return;
    const call = this.calls.get(id);
    if (!call || call.settled) return;
    const reason = typeof frame.reason === "string" && frame.reason !== "" ? frame.reason : "cancelled";
    this.end(call);
    this.sendToolError(call.conn, call.sessionId, call.id, { type: "tool_cancelled", message: `Tool "${call.name}" was cancelled.` });
    this.abortSignal(call, reason);
  }

  /** Removes every call in flight; their signals abort later, after the listeners ran. */
  takeAll(): InFlightCall<C>[] {
    const calls = Array.from(this.calls.values());
    for (const call of calls) this.end(call);
    return calls;
  }

  abortAll(calls: InFlightCall<C>[], reason: string): void {
    for (const call of calls) this.abortSignal(call, reason);
  }

  private onDeadline(call: InFlightCall<C>, ms: number): void {
    if (call.settled) return;
    call.timer = null;
    this.end(call);
    if (this.host.isLive(call.conn)) {
      this.sendToolError(call.conn, call.sessionId, call.id, { type: "tool_timeout", message: `Tool "${call.name}" did not respond within ${ms}ms.` });
    }
    this.abortSignal(call, "timeout");
  }

  private settle(call: InFlightCall<C>, outcome: ToolOutcome): void {
    // After a timeout, a cancel or a loss nothing more is sent for this id.
    if (call.settled) return;
    this.end(call);
    if (!this.host.isLive(call.conn)) return;
    if (!outcome.ok) {
      this.sendToolError(call.conn, call.sessionId, call.id, outcome.error);
      return;
    }
    const notSerializable: ToolFailure = {
      type: "tool_serialization_error",
      message: `Tool "${call.name}" returned a value that is not JSON-serializable.`,
    };
    const features = this.host.features(call.conn);
    const body: Record<string, unknown> = {};
    let content = outcome.content;
    if (content && !features.resultContent) {
      // A daemon without the extension (§D7.2): plain v2, the blocks are dropped.
      this.host.log("warn", `appduct: the daemon does not accept content results; the ${content.length} content block(s) of "${call.name}" were dropped.`);
      content = undefined;
    }
    if (content && content.length > MAX_CONTENT_BLOCKS) {
      this.sendToolError(call.conn, call.sessionId, call.id, {
        type: "tool_serialization_error",
        message: `Tool "${call.name}" returned ${content.length} content blocks; at most ${MAX_CONTENT_BLOCKS} are allowed.`,
        details: { reason: "invalid_content", index: MAX_CONTENT_BLOCKS, problem: "too_many" },
      });
      return;
    }
    if (outcome.result !== undefined || !content) body.result = outcome.result === undefined ? null : outcome.result;
    if (content) body.content = content;
    let bodyText: string | undefined;
    try {
      // A result JSON cannot encode (a function, `undefined` inside the form) is refused, not
      // dropped by the object around it.
      bodyText = "result" in body && JSON.stringify(body.result) === undefined ? undefined : JSON.stringify(body);
    } catch {
      bodyText = undefined;
    }
    if (bodyText === undefined) {
      this.sendToolError(call.conn, call.sessionId, call.id, notSerializable);
      return;
    }
    const encoded = encodeFrame({ type: "tool_result", session_id: call.sessionId, id: call.id, ...body });
    if (encoded.ok) {
      this.host.write(call.conn, encoded.text);
      return;
    }
    if (encoded.reason !== "too_large") {
      this.sendToolError(call.conn, call.sessionId, call.id, notSerializable);
      return;
    }
    // Too big for one frame: parts when the daemon announced them and the body fits.
    const bodyBytes = utf8ByteLength(bodyText);
    const max = features.partsMaxBytes;
    if (max !== null && bodyBytes <= max) {
      for (const part of splitBody(bodyText)) {
        if (!this.host.isLive(call.conn)) return;
        if (!this.host.sendFrame(call.conn, { type: "tool_result_part", session_id: call.sessionId, id: call.id, ...part })) return;
      }
      return;
    }
    const [bytes, limit, what] = max === null ? [encoded.bytes, MAX_FRAME_BYTES, "frame"] : [bodyBytes, max, "result"];
    this.sendToolError(call.conn, call.sessionId, call.id, {
      type: "tool_serialization_error",
      message: `Tool "${call.name}" returned ${bytes} bytes; the ${what} limit is ${limit}.`,
      details: { bytes, limitBytes: limit },
    });
  }

  /** Sends a `tool_error`; details that cannot be sent are dropped rather than the error. */
  private sendToolError(conn: C, sessionId: string, id: string, error: ToolFailure): void {
    const body: Record<string, unknown> = { type: error.type, message: cutMessage(error.message) };
    const frame = { type: "tool_error", session_id: sessionId, id, error: body };
    if (error.details !== undefined) {
      body.details = error.details;
      const encoded = encodeFrame(frame);
      if (encoded.ok) {
        this.host.write(conn, encoded.text);
        return;
      }
      delete body.details;
    }
    this.host.sendFrame(conn, frame);
  }

  /** Best effort, never rejects: only while the call is in flight on a live connection. */
  private reportProgress(call: InFlightCall<C>, progress?: number, message?: string): Promise<void> {
    try {
      if (call.settled || !this.host.isLive(call.conn)) return Promise.resolve();
      const frame: Record<string, unknown> = { type: "tool_call_progress", session_id: call.sessionId, id: call.id };
      if (typeof progress === "number" && Number.isFinite(progress)) frame.progress = progress;
      if (typeof message === "string") frame.message = cutMessage(message);
      this.host.sendFrame(call.conn, frame);
    } catch (error) {
      this.host.log("warn", "appduct: reportProgress failed:", error);
    }
    return Promise.resolve();
  }

  private end(call: InFlightCall<C>): void {
    call.settled = true;
    if (call.timer !== null) {
      this.host.clock.clearTimeout(call.timer);
      call.timer = null;
    }
    if (this.calls.get(call.id) === call) this.calls.delete(call.id);
  }

  private abortSignal(call: InFlightCall<C>, reason: string): void {
    try {
      call.controller.abort(reason);
    } catch (error) {
      // An abort listener threw; the call is over either way.
      this.host.log("error", "appduct: an abort listener threw:", error);
    }
  }
}
