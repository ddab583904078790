// One control-plane connection (§C1–§C3, §C16): newline-delimited JSON-RPC 2.0 over the daemon's
// Unix socket. Requests are numbered from 1 and correlated by id; notifications go to one
// handler; every pending request fails when the connection ends.

import net from "node:net";

import { isJsonObject } from "../core/text.js";
import { AppductError, clientError, errorFromRpc } from "./errors.js";

/** The daemon rejects (and closes on) an inbound line longer than this (§C2). */
export const MAX_REQUEST_LINE_BYTES = 1_048_576;
/**
 * Longest daemon line accepted: 4 × the 64 MiB minimum of §C2, as the Rust client does,
 * because an `events.since` page of 256 events of 256 KiB grows past 64 MiB once JSON-escaped.
 */
export const MAX_RESPONSE_LINE_BYTES = 4 * 64 * 1_048_576;
/** Largest delay a Node timer keeps (longer ones fire at once). */
export const MAX_TIMER_MS = 2 ** 31 - 1;

export type NotificationHandler = (method: string, params: unknown) => void;

export interface ConnectionOptions {
  /** Inbound line cap, in bytes; tests use a small one. */
  maxLineBytes?: number;
}

export interface RequestOptions {
  /** Fails the request with `connection_error` after this many ms; `null` waits forever. */
  timeoutMs: number | null;
  /** The `tools.call` handle, carried by its connection errors (§C16). */
  callId?: string;
}

/** A request in flight; its timeout can be re-armed (the `tools.call` watchdog, §C10.3). */
export interface PendingRequest<T = unknown> {
  readonly id: number;
  readonly promise: Promise<T>;
  rearm(timeoutMs: number): void;
}

interface Pending {
  method: string;
  callId?: string;
  resolve(value: unknown): void;
  reject(error: AppductError): void;
  timer: ReturnType<typeof setTimeout> | null;
}

const utf8 = new TextDecoder("utf-8", { fatal: true });

export class RpcConnection {
  private readonly pending = new Map<number, Pending>();
  private readonly maxLineBytes: number;
  private nextId = 1;
  private chunks: Buffer[] = [];
  private buffered = 0;
  private failure: AppductError | null = null;
  private readonly closedPromise: Promise<void>;
  private notificationHandler: NotificationHandler | null = null;
  private closeHandlers: ((error: AppductError) => void)[] = [];
  private ended = false;

  private constructor(
    private readonly socket: net.Socket,
    readonly socketPath: string,
    options: ConnectionOptions,
  ) {
    this.maxLineBytes = options.maxLineBytes ?? MAX_RESPONSE_LINE_BYTES;
    socket.on("data", (chunk: Buffer) => this.onData(chunk));
    socket.on("error", (error) => {
      this.failure ??= new AppductError("connection_error", `The connection to the appduct daemon at ${socketPath} failed: ${error.message}`, {
        details: { socketPath },
        cause: error,
      });
    });
    this.closedPromise = new Promise((resolve) => {
      socket.on("close", () => {
        this.ended = true;
        this.failure ??= new AppductError("connection_error", `The connection to the appduct daemon at ${socketPath} closed.`, { details: { socketPath } });
        this.failAll(this.failure);
        for (const handler of this.closeHandlers.splice(0)) handler(this.failure);
        resolve();
      });
    });
  }

  /**
   * Connects to `socketPath`. Rejects with the socket's own error (its `code` tells a missing or
   * refusing socket from other failures; the caller decides about spawning).
   */
  static open(socketPath: string, options: ConnectionOptions = {}): Promise<RpcConnection> {
    return new Promise((resolve, reject) => {
      const socket = net.createConnection({ path: socketPath });
      const onError = (error: Error): void => {
        socket.destroy();
        reject(error);
      };
      socket.once("error", onError);
      socket.once("connect", () => {
        socket.off("error", onError);
        resolve(new RpcConnection(socket, socketPath, options));
      });
    });
  }

  /** Whether the connection has ended (every later request fails at once). */
  get closed(): boolean {
    return this.failure !== null || this.socket.destroyed;
  }

  /** Sets the one notification handler. Set it before the request that can trigger it. */
  onNotification(handler: NotificationHandler | null): void {
    this.notificationHandler = handler;
  }

  /** Runs `handler` once when the connection ends, with the error pending requests got. */
  onClose(handler: (error: AppductError) => void): void {
    if (this.ended && this.failure !== null) handler(this.failure);
    else this.closeHandlers.push(handler);
  }

  request<T = unknown>(method: string, params: Record<string, unknown> | undefined, options: RequestOptions): Promise<T> {
    return this.start<T>(method, params, options).promise;
  }

  /** Sends a request; the pending entry is registered before the line is written (§C14). */
  start<T = unknown>(method: string, params: Record<string, unknown> | undefined, options: RequestOptions): PendingRequest<T> {
    const id = this.nextId++;
    let entry: Pending | undefined;
    const promise = new Promise<T>((resolve, reject) => {
      entry = { method, resolve: resolve as (v: unknown) => void, reject, timer: null };
      if (options.callId !== undefined) entry.callId = options.callId;
    });
    const pending = entry as Pending;
    const rearm = (timeoutMs: number): void => {
      if (pending.timer !== null) clearTimeout(pending.timer);
      pending.timer = setTimeout(() => {
        if (this.pending.get(id) !== pending) return;
        this.pending.delete(id);
        pending.reject(this.withCallId(new AppductError("connection_error", `The appduct daemon did not answer ${method} within ${timeoutMs} ms.`, { details: { method, timeoutMs } }), pending));
      }, Math.min(Math.max(0, timeoutMs), MAX_TIMER_MS));
    };
    const handle: PendingRequest<T> = {
      id,
      promise,
      rearm: (timeoutMs) => {
        if (this.pending.get(id) === pending) rearm(timeoutMs);
      },
    };

    if (this.failure !== null || this.socket.destroyed) {
      pending.reject(this.withCallId(this.failure ?? new AppductError("connection_error", "The connection to the appduct daemon is closed."), pending));
      return handle;
    }
    let line: string;
    try {
      line = `${JSON.stringify(params === undefined ? { jsonrpc: "2.0", id, method } : { jsonrpc: "2.0", id, method, params })}\n`;
    } catch (error) {
      pending.reject(new AppductError("client_error", `The ${method} request cannot be encoded as JSON: ${(error as Error).message}`, { cause: error }));
      return handle;
    }
    const bytes = Buffer.byteLength(line) - 1;
    if (bytes > MAX_REQUEST_LINE_BYTES) {
      // The daemon would answer by closing the connection, failing every other request on it.
      pending.reject(clientError(`The ${method} request is ${bytes} bytes; the daemon accepts lines of at most ${MAX_REQUEST_LINE_BYTES} bytes.`, { bytes, maxLineBytes: MAX_REQUEST_LINE_BYTES }));
      return handle;
    }
    this.pending.set(id, pending);
    if (options.timeoutMs !== null) rearm(options.timeoutMs);
    this.socket.write(line);
    return handle;
  }

  /** Ends the connection; pending requests fail with `connection_error`. Idempotent. */
  close(): Promise<void> {
    this.failure ??= new AppductError("connection_error", "The connection to the appduct daemon was closed by the client.", { details: { socketPath: this.socketPath } });
    this.socket.destroy();
    return this.closedPromise;
  }

  /** A client-side failure of a `tools.call` names its callId, so it can still be cancelled. */
  private withCallId(error: AppductError, pending: Pending): AppductError {
    if (pending.callId === undefined) return error;
    const details = isJsonObject(error.details) ? { ...error.details, callId: pending.callId } : { callId: pending.callId };
    return new AppductError(error.type, error.message, { details, callId: pending.callId, cause: error.cause });
  }

  private failAll(error: AppductError): void {
    for (const [id, pending] of this.pending) {
      this.pending.delete(id);
      if (pending.timer !== null) clearTimeout(pending.timer);
      pending.reject(this.withCallId(error, pending));
    }
  }

  /** A daemon message this client cannot use: the stream is no longer trustworthy. */
  private protocolFailure(reason: string, message: string, details: Record<string, unknown> = {}): void {
    this.failure ??= new AppductError("internal_error", message, { details: { reason, ...details } });
    this.socket.destroy();
  }

  private onData(chunk: Buffer): void {
    let start = 0;
    while (this.failure === null) {
      const newline = chunk.indexOf(10, start);
      if (newline === -1) {
        const rest = chunk.subarray(start);
        if (this.buffered + rest.length > this.maxLineBytes) {
          this.lineTooLong();
          return;
        }
        if (rest.length > 0) {
          this.chunks.push(rest);
          this.buffered += rest.length;
        }
        return;
      }
      const tail = chunk.subarray(start, newline);
      start = newline + 1;
      if (this.buffered + tail.length > this.maxLineBytes) {
        this.lineTooLong();
        return;
      }
      const line = this.chunks.length === 0 ? tail : Buffer.concat([...this.chunks, tail]);
      this.chunks = [];
      this.buffered = 0;
      this.onLine(line);
    }
  }

  private lineTooLong(): void {
    this.chunks = [];
    this.buffered = 0;
    this.protocolFailure("line_too_long", `The appduct daemon sent a line longer than ${this.maxLineBytes} bytes.`, { maxLineBytes: this.maxLineBytes });
  }

  private onLine(raw: Buffer): void {
    const bytes = raw.length > 0 && raw[raw.length - 1] === 13 ? raw.subarray(0, raw.length - 1) : raw;
    if (bytes.length === 0) return;
    let message: unknown;
    try {
      message = JSON.parse(utf8.decode(bytes));
    } catch {
      this.protocolFailure("malformed_line", "The appduct daemon sent a line that is not UTF-8 JSON.");
      return;
    }
    if (!isJsonObject(message)) {
      this.protocolFailure("malformed_line", "The appduct daemon sent a line that is not a JSON-RPC object.");
      return;
    }
    if (typeof message.method === "string" && message.id === undefined) {
      try {
        this.notificationHandler?.(message.method, message.params);
      } catch (error) {
        console.error("appduct client: a notification handler threw", error);
      }
      return;
    }
    if (!("result" in message) && !("error" in message)) {
      this.protocolFailure("malformed_line", "The appduct daemon sent a response with neither result nor error.");
      return;
    }
    // A response to no request of ours: an id-less rejection, or a late answer after a timeout.
    if (typeof message.id !== "number") return;
    const pending = this.pending.get(message.id);
    if (pending === undefined) return;
    this.pending.delete(message.id);
    if (pending.timer !== null) clearTimeout(pending.timer);
    if ("error" in message) pending.reject(errorFromRpc(message.error, pending.callId));
    else pending.resolve(message.result);
  }
}
