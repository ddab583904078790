// The `AppClient` (§T13): one persistent control connection for requests and calls, one
// extra connection per `waitForEvent`. Every request names the resolved session id (§C6).

import { randomBytes } from "node:crypto";

import { encodeBase64url } from "../core/base64.js";
import { isJsonObject, isPlainObject } from "../core/text.js";
import { MAX_TIMER_MS, type RpcConnection } from "./connection.js";
import type { DaemonTarget } from "./daemon.js";
import { AppductError, clientError } from "./errors.js";
import type { AppClient, AppEvent, RegistryState, AppEventFull, CallOptions, CallProgress, EventsOptions, EventsPage, Lease, LeaseHolder, LeaseOptions, ListedTool, WaitForEventOptions } from "./types.js";
import { startStreamWait, waitTimeout, type StreamWait } from "./wait.js";

/** Default `waitForEvent` timeout (§T13.2). */
export const DEFAULT_EVENT_WAIT_MS = 30_000;
/** Added to a call's deadline for the watchdog (§C10.3). */
const WATCHDOG_SLACK_MS = 5_000;
/** Deadline assumed when the caller sent no `timeoutMs` and the tool's is unknown (§C10.3). */
const MAX_CALL_DEADLINE_MS = 600_000;
const MIN_CALL_DEADLINE_MS = 1_000;

/** `clamp(x)` of §C10.3. */
export function clampDeadline(ms: number): number {
  return Math.min(MAX_CALL_DEADLINE_MS, Math.max(MIN_CALL_DEADLINE_MS, Math.trunc(ms)));
}

/** `client_` + base64url of 16 random bytes (§T13.2). */
export function mintCallId(): string {
  return `client_${encodeBase64url(randomBytes(16))}`;
}

/** An `EventNotification` (§C13.1) flattened to the client's `AppEvent`. */
export function flattenEvent(notification: Record<string, unknown>): AppEvent {
  const data = isJsonObject(notification.data) ? notification.data : {};
  const common = { ts: data.ts as number, seq: notification.seq as number, sessionId: notification.sessionId as string, alias: notification.alias as string };
  if (data.truncated === true) {
    return { name: data.name as string, payloadPreview: data.payloadPreview as string, truncated: true, payloadBytes: data.payloadBytes as number, ...common };
  }
  return { name: data.name as string, payload: "payload" in data ? data.payload : null, ...common };
}

function unexpected(method: string): AppductError {
  return new AppductError("internal_error", `The appduct daemon answered ${method} with an unexpected result.`, { details: { method } });
}

/** `since` and a glob are checked here; the daemon checks everything else (§C8.12, §C8.13). */
function checkSince(since: unknown): void {
  if (typeof since === "number" && since < 0) throw clientError(`since must be ≥ 0; got ${since}.`, { param: "since" });
}

function checkGlob(glob: unknown, param: string): void {
  if (typeof glob !== "string" || glob === "") throw clientError(`${param} must be a non-empty name glob.`, { param });
}

interface CallRoute {
  onProgress?: (progress: CallProgress) => void;
  started(deadlineMs: unknown): void;
  /** The call was parked for an operator until `expiresAt` (unix seconds, §C11.1). */
  parked(expiresAt: number): void;
}

export class ControlAppClient implements AppClient {
  private closing: Promise<void> | null = null;
  private readonly calls = new Map<string, CallRoute>();
  private readonly waits = new Set<StreamWait<unknown>>();

  constructor(
    private readonly connection: RpcConnection,
    readonly sessionId: string,
    readonly alias: string,
    /** Where wait connections go; they never spawn a daemon (a new one would not know the session). */
    private readonly target: DaemonTarget,
    private readonly requestTimeoutMs: number,
    /** As `sessions.describe` reported it (`waitForSession` updates it once tools arrive). */
    public registry: RegistryState = "received",
  ) {
    connection.onNotification((method, params) => this.onNotification(method, params));
  }

  async tools(): Promise<ListedTool[]> {
    const result = await this.request("tools.list", { selector: this.sessionId });
    if (!isJsonObject(result) || !Array.isArray(result.tools)) throw unexpected("tools.list");
    return result.tools.map((tool: Record<string, unknown>) => ({ ...tool, group: tool.group ?? null }) as ListedTool);
  }

  async call<T = unknown>(name: string, args: Record<string, unknown> = {}, options: CallOptions = {}): Promise<T> {
    if (this.closing !== null) throw this.closedError();
    if (!isPlainObject(args)) throw clientError(`args of "${name}" must be a plain object.`, { param: "args" });
    const { timeoutMs, signal, onProgress } = options;
    if (timeoutMs !== undefined && (typeof timeoutMs !== "number" || !Number.isFinite(timeoutMs))) {
      throw clientError(`timeoutMs must be a finite number; got ${String(timeoutMs)}.`, { param: "timeoutMs" });
    }
    const callId = options.callId ?? mintCallId();
    if (this.calls.has(callId)) {
      throw clientError(`callId "${callId}" belongs to another call in flight on this client.`, { reason: "call_id_in_use", callId });
    }
    if (signal?.aborted) {
      // Nothing was sent, so nothing reaches the app or the audit log.
      throw new AppductError("tool_cancelled", `The call of "${name}" was not sent: its signal was already aborted.`, {
        callId,
        details: { reason: "client_cancelled", settledBy: "client" },
      });
    }

    const params: Record<string, unknown> = { selector: this.sessionId, name, args, caller: "client", callId };
    if (timeoutMs !== undefined) params.timeoutMs = timeoutMs;
    // Progress notifications also tell when the callId is live, which a racing cancel needs,
    // and whether the call was parked for an operator, which moves the watchdog (§C10.3).
    params.progress = true;

    let settled = false;
    let started = false;
    let cancelOnStart = false;
    let cancels = 0;
    const sendCancel = (): void => {
      cancels++;
      this.connection.request("tools.cancel", { callId, selector: this.sessionId, reason: "client_cancelled" }, { timeoutMs: this.requestTimeoutMs }).then(
        (result) => {
          // The daemon runs requests concurrently: a cancel can be handled before the call reserved
          // its callId. Ask once more when the call is known to be live.
          if (settled || cancels !== 1 || !isJsonObject(result) || result.cancelled !== false) return;
          if (started) sendCancel();
          else cancelOnStart = true;
        },
        () => undefined,
      );
    };
    const onAbort = (): void => sendCancel();

    const deadline = timeoutMs !== undefined ? clampDeadline(timeoutMs) : MAX_CALL_DEADLINE_MS;
    const watchdog = deadline + WATCHDOG_SLACK_MS;
    const route: CallRoute = {
      // The approval may take until expiresAt; the deadline starts only after it (§C11.1).
      parked: (expiresAt) => {
        if (started) return;
        const wait = Math.max(0, (expiresAt + 1) * 1000 - Date.now()) + deadline + WATCHDOG_SLACK_MS;
        pending.rearm(Math.min(wait, MAX_TIMER_MS));
      },
      started: (deadlineMs) => {
        started = true;
        if (typeof deadlineMs === "number" && Number.isFinite(deadlineMs)) pending.rearm(Math.min(deadlineMs + WATCHDOG_SLACK_MS, MAX_TIMER_MS));
        if (cancelOnStart) {
          cancelOnStart = false;
          sendCancel();
        }
      },
    };
    if (onProgress !== undefined) route.onProgress = onProgress;
    this.calls.set(callId, route);
    const pending = this.connection.start("tools.call", params, { timeoutMs: watchdog, callId });
    signal?.addEventListener("abort", onAbort, { once: true });
    try {
      const response = await pending.promise;
      if (!isJsonObject(response)) throw unexpected("tools.call");
      return response.result as T;
    } finally {
      settled = true;
      signal?.removeEventListener("abort", onAbort);
      this.calls.delete(callId);
    }
  }

  events(options?: Omit<EventsOptions, "payloadMaxBytes"> & { payloadMaxBytes?: undefined }): Promise<EventsPage<AppEventFull>>;
  events(options: EventsOptions): Promise<EventsPage>;
  async events(options: EventsOptions = {}): Promise<EventsPage> {
    checkSince(options.since);
    if (options.name !== undefined) checkGlob(options.name, "name");
    const params: Record<string, unknown> = { selector: this.sessionId };
    for (const key of ["since", "limit", "name", "payloadMaxBytes"] as const) {
      if (options[key] !== undefined) params[key] = options[key];
    }
    const result = await this.request("events.since", params);
    if (!isJsonObject(result) || !Array.isArray(result.events)) throw unexpected("events.since");
    return {
      events: result.events.filter(isJsonObject).map(flattenEvent),
      cursor: result.cursor as number,
      dropped: result.dropped as number,
      remaining: result.remaining as number,
    };
  }

  waitForEvent(nameGlob: string, options?: Omit<WaitForEventOptions, "payloadMaxBytes"> & { payloadMaxBytes?: undefined }): Promise<AppEventFull>;
  waitForEvent(nameGlob: string, options: WaitForEventOptions): Promise<AppEvent>;
  async waitForEvent(nameGlob: string, options: WaitForEventOptions = {}): Promise<AppEvent> {
    checkGlob(nameGlob, "nameGlob");
    checkSince(options.since);
    const timeoutMs = waitTimeout(options.timeoutMs, DEFAULT_EVENT_WAIT_MS);
    if (this.closing !== null) throw this.closedError();
    const subscribe: Record<string, unknown> = { sessionSelector: this.sessionId, kinds: ["app_event"], name: nameGlob, since: options.since ?? 0 };
    if (options.payloadMaxBytes !== undefined) subscribe.payloadMaxBytes = options.payloadMaxBytes;
    const wait = startStreamWait<AppEvent>({
      target: this.target,
      timeoutMs,
      timeoutError: () => new AppductError("timeout", `No app event matching "${nameGlob}" arrived within ${timeoutMs} ms.`, { details: { name: nameGlob, timeoutMs } }),
      ...(options.signal === undefined ? {} : { signal: options.signal }),
      run: (connection, { resolve, reject }) => {
        connection.onNotification((method, params) => {
          if (method !== "event" || !isJsonObject(params) || params.kind !== "app_event" || params.sessionId !== this.sessionId) return;
          resolve(flattenEvent(params));
        });
        connection.request("events.subscribe", subscribe, { timeoutMs: this.requestTimeoutMs }).catch(reject);
      },
    });
    this.waits.add(wait);
    try {
      return await wait.promise;
    } finally {
      this.waits.delete(wait);
    }
  }

  close(): Promise<void> {
    if (this.closing === null) {
      const error = new AppductError("connection_error", "The AppClient was closed.");
      const waits = [...this.waits].map((wait) => wait.cancel(error));
      this.closing = Promise.all([this.connection.close(), ...waits]).then(() => undefined);
    }
    return this.closing;
  }

  private closedError(): AppductError {
    return new AppductError("connection_error", "The AppClient is closed.");
  }

  async lease(options: LeaseOptions = {}): Promise<Lease> {
    const { ttlMs, steal } = options;
    if (ttlMs !== undefined && (!Number.isInteger(ttlMs) || ttlMs < 1_000 || ttlMs > 3_600_000)) {
      throw clientError(`ttlMs must be an integer from 1000 to 3600000; got ${String(ttlMs)}.`, { param: "ttlMs" });
    }
    const params: Record<string, unknown> = { selector: this.sessionId };
    if (ttlMs !== undefined) params.ttlMs = ttlMs;
    if (steal === true) params.steal = true;
    const result = await this.request("sessions.lease", params);
    if (!isJsonObject(result) || typeof result.expiresAt !== "number" || !isJsonObject(result.holder)) throw unexpected("sessions.lease");
    const lease: Lease = {
      holder: result.holder as LeaseHolder,
      expiresAt: result.expiresAt,
      ttlMs: result.ttlMs as number,
      renewed: result.renewed === true,
      ...(isJsonObject(result.stolenFrom) ? { stolenFrom: result.stolenFrom as LeaseHolder } : {}),
      release: async () => {
        const released = await this.request("sessions.release", { selector: this.sessionId });
        if (!isJsonObject(released) || typeof released.released !== "boolean") throw unexpected("sessions.release");
        return released.released;
      },
    };
    return lease;
  }

  private request(method: string, params: Record<string, unknown>): Promise<unknown> {
    if (this.closing !== null) return Promise.reject(this.closedError());
    return this.connection.request(method, params, { timeoutMs: this.requestTimeoutMs });
  }

  /** Per-call notifications, routed by callId (§C10.5). */
  private onNotification(method: string, params: unknown): void {
    if (!isJsonObject(params) || typeof params.callId !== "string") return;
    const route = this.calls.get(params.callId);
    if (route === undefined) return;
    if (method === "tool_call_started") {
      route.started(params.deadlineMs);
    } else if (method === "tool_call_progress") {
      if (typeof params.approvalId === "string" && typeof params.expiresAt === "number" && Number.isFinite(params.expiresAt)) {
        route.parked(params.expiresAt);
      }
      if (route.onProgress === undefined) return;
      const progress: CallProgress = {};
      if (typeof params.progress === "number") progress.progress = params.progress;
      if (typeof params.message === "string") progress.message = params.message;
      try {
        route.onProgress(progress);
      } catch (error) {
        console.error("appduct client: an onProgress callback threw", error);
      }
    }
  }
}
