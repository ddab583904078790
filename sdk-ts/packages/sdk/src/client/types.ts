// Public types of the test-runner client (§T13.1).

import type { ToolAnnotations } from "../core/descriptors.js";

export interface ConnectOptions {
  /** Session id or alias, resolved once with `sessions.describe`; absent = the only session. */
  selector?: string;
  /** Default: `APPDUCT_STATE_DIR`, else `~/.appduct`. */
  stateDir?: string;
  /** Default `true`: run `<bin> daemon start` when no daemon answers. */
  autoSpawn?: boolean;
  /** Default: `APPDUCT_BIN`, else `appduct` on `PATH`. */
  bin?: string;
  /** Default 10000. */
  requestTimeoutMs?: number;
}

export interface LinkOptions {
  target?: "android" | "ios-sim" | "ios-device" | "web";
  device?: string;
  appId?: string;
  relaunch?: boolean;
  scheme?: string;
  url?: string;
  /**
   * The kind of app the link is for, which picks its transport (`react-native` → sealed, `web` →
   * web, `native` → native). Default: the project's `platform` (`appduct init --platform`), else
   * `native`.
   */
  for?: "react-native" | "web" | "native";
  /** The link's transport directly; must agree with `for` when both are given. */
  transport?: "native" | "web" | "sealed";
  ttlSeconds?: number;
  cwd?: string;
  stateDir?: string;
  bin?: string;
  /** Added to this process's environment for the CLI. */
  env?: Record<string, string>;
}

/** `appduct sessions link --json` `data` for a device link (native, web or sealed transport). */
export interface DeviceLinkResult {
  sessionId: string;
  transport: "native" | "web" | "sealed";
  deepLink: string;
  endpoint: { address: string; port: number; family: number };
  /** Unix seconds. */
  expiresAt: number;
  /** Native links only. */
  pin?: string;
  /** Sealed links only: the bare bootstrap payload, for an app that takes it without the deep link. */
  payload?: string;
  /** Sealed links only: the daemon's sealed public key. */
  sealedKey?: string;
  delivered?: boolean;
  target?: string;
  device?: string;
}

/** `appduct sessions link --open web --json` `data`. */
export interface WebPageLinkResult {
  sessionId: string;
  url: string;
  script: string;
  /** Unix seconds. */
  expiresAt: number;
}

export type LinkResult = DeviceLinkResult | WebPageLinkResult;

export interface WaitForSessionOptions {
  /** Default 120000. */
  timeoutMs?: number;
  stateDir?: string;
  autoSpawn?: boolean;
  bin?: string;
  signal?: AbortSignal;
}

export type ToolPolicy = "allow" | "deny" | "prompt";

/** One `tools.list` entry (§C9.2): the descriptor as registered, `group` and `policy`. */
export interface ListedTool {
  name: string;
  description: string;
  input_schema?: Record<string, unknown>;
  output_schema?: Record<string, unknown>;
  annotations?: ToolAnnotations;
  timeout_ms?: number;
  group: string | null;
  policy: ToolPolicy;
}

export interface CallProgress {
  progress?: number;
  message?: string;
}

export interface CallOptions {
  /** Shortens the tool's deadline (§C10.3); finite. */
  timeoutMs?: number;
  /** Aborting sends `tools.cancel`; the call settles with the daemon's answer. */
  signal?: AbortSignal;
  /** The call's handle, `^[A-Za-z0-9_-]{1,128}$`; default `client_` + 16 random bytes. */
  callId?: string;
  onProgress?: (progress: CallProgress) => void;
}

/** An app event with its payload. `ts` is the app's unix ms. */
export interface AppEventFull {
  name: string;
  payload: unknown;
  ts: number;
  seq: number;
  sessionId: string;
  alias: string;
}

/** An app event whose payload was longer than `payloadMaxBytes` (§C13.6). */
export interface AppEventTruncated {
  name: string;
  payloadPreview: string;
  truncated: true;
  payloadBytes: number;
  ts: number;
  seq: number;
  sessionId: string;
  alias: string;
}

export type AppEvent = AppEventFull | AppEventTruncated;

export interface EventsOptions {
  /** Exclusive lower bound on `seq`; default 0. */
  since?: number;
  limit?: number;
  /** Name glob (§C13.5). */
  name?: string;
  payloadMaxBytes?: number;
}

export interface EventsPage<E extends AppEvent = AppEvent> {
  events: E[];
  cursor: number;
  dropped: number;
  remaining: number;
}

export interface WaitForEventOptions {
  /** Default 30000. */
  timeoutMs?: number;
  /** Default 0: a retained match resolves at once. */
  since?: number;
  payloadMaxBytes?: number;
  signal?: AbortSignal;
}

/** A session driven through the daemon. Every request names `sessionId`, never the alias. */
/**
 * Whether the app's tool registry has arrived (issue #23): `received` once its first tool
 * snapshot since the claim did; `pending` before (then `tools()` may still be empty).
 */
export type RegistryState = "received" | "pending";

export interface AppClient {
  readonly sessionId: string;
  readonly alias: string;
  /**
   * The registry's state when this client was made: `waitForSession` waits for `received` and
   * reports `pending` only when the app sent no tools by its deadline.
   */
  readonly registry: RegistryState;
  tools(): Promise<ListedTool[]>;
  call<T = unknown>(name: string, args?: Record<string, unknown>, options?: CallOptions): Promise<T>;
  events(options?: Omit<EventsOptions, "payloadMaxBytes"> & { payloadMaxBytes?: undefined }): Promise<EventsPage<AppEventFull>>;
  events(options: EventsOptions): Promise<EventsPage>;
  waitForEvent(nameGlob: string, options?: Omit<WaitForEventOptions, "payloadMaxBytes"> & { payloadMaxBytes?: undefined }): Promise<AppEventFull>;
  waitForEvent(nameGlob: string, options: WaitForEventOptions): Promise<AppEvent>;
  /**
   * Takes (or renews) the session's lease on this client's connection (§T18, control.md
   * §C10.9): other clients' tool calls fail `session_leased` until it is released, expires or
   * this client closes.
   */
  lease(options?: LeaseOptions): Promise<Lease>;
  close(): Promise<void>;
}

/** Options of `AppClient.lease()` (§T18). */
export interface LeaseOptions {
  /** The lease's TTL, 1,000 to 3,600,000 ms; the daemon's default is 60,000. */
  ttlMs?: number;
  /** Take the lease even though another client holds it. */
  steal?: boolean;
}

/** A client's name and pid as the daemon reports a lease holder (§C8.41). */
export interface LeaseHolder {
  client?: string;
  pid?: number;
}

/** A lease held by this client (§T18). */
export interface Lease {
  readonly holder: LeaseHolder;
  /** Unix seconds. */
  readonly expiresAt: number;
  readonly ttlMs: number;
  /** This client already held it: only the expiry moved. */
  readonly renewed: boolean;
  /** With `steal`: who held it before. */
  readonly stolenFrom?: LeaseHolder;
  /** Ends the lease; `false` when this client no longer held it. */
  release(): Promise<boolean>;
}
