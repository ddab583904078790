// Public types of the app-side API (07 §7.2, §7.3, §7.5, §7.7).

import type { ToolAnnotations, WireToolDescriptor } from "./descriptors.js";
import type { ToolSchema } from "./standard-schema.js";

export type ClientState = "idle" | "connecting" | "active" | "reconnecting" | "closed";
export type TransportKind = "native" | "web";

export interface Registration {
  readonly name?: string;
  remove(): void;
}

/** What a handler receives besides its arguments (07 §7.5.1). */
export interface ToolContext {
  /** The session the call arrived on. */
  sessionId: string;
  /** The `tool_call` frame's id: the daemon's wire id. */
  invocationId: string;
  /** ISO 8601 UTC with milliseconds, when the frame was received. */
  receivedAt: string;
  /** Best effort; never rejects. */
  reportProgress(progress?: number, message?: string): Promise<void>;
  signal: AbortSignal;
}

export interface ToolDefinition<I = unknown, O = unknown> {
  name: string;
  description: string;
  inputSchema?: ToolSchema<I>;
  outputSchema?: ToolSchema<O>;
  annotations?: ToolAnnotations;
  timeoutMs?: number;
  group?: string;
  handler: (args: I, ctx: ToolContext) => O | Promise<O>;
}

export interface ToolGroup {
  readonly group: string;
  registerTool<I = unknown, O = unknown>(def: Omit<ToolDefinition<I, O>, "group">): Registration;
}

export interface EventDefinition<P = unknown> {
  name: string;
  description: string;
  payloadSchema?: ToolSchema<P>;
}

export interface StateChangeEvent {
  state: ClientState;
  /** Only on `closed`. */
  reason?: string;
}

export interface SessionChangeEvent {
  type: "claimed" | "resumed" | "lost";
  /** `null` for `lost`. */
  sessionId: string | null;
  /** `null` for `lost`. */
  alias: string | null;
  /** Only for `lost`. */
  reason?: string;
}

export interface AppductErrorEvent {
  phase: "bootstrap" | "connect" | "socket" | "tool";
  message: string;
  code?: string;
  closeReason?: string;
  isRetryable?: boolean;
  hint?: string;
  toolName?: string;
  invocationId?: string;
}

export interface AppductListeners {
  stateChange: (event: StateChangeEvent) => void;
  sessionChange: (event: SessionChangeEvent) => void;
  error: (event: AppductErrorEvent) => void;
}

export interface ConnectOptions {
  transport?: TransportKind;
  pins?: readonly string[];
}

export interface DeviceFields {
  manufacturer?: string;
  model?: string;
  os?: string;
}

export interface ConfigureOptions {
  /** Device fields of the next claim (07 §7.7.3). */
  device?: DeviceFields;
  /** `pin`: only configured pins are trusted; `link`: the link's pin, per session (02 §3.4). */
  trust?: "pin" | "link";
  pins?: readonly string[];
  /** Default `true`: payload addresses must be RFC 1918 IPv4 or exactly 127.0.0.1. */
  allowPrivateLanOnly?: boolean;
  /** Development warnings and checks. */
  dev?: boolean;
}

/** A decoded bootstrap as `connectBootstrap` takes it (07 §7.2.1). */
export interface BootstrapTarget {
  sessionId: string;
  /** Opaque; sent verbatim as `session_claim.token`. */
  token: string;
  /** Unix seconds. */
  expiresAt: number;
  address: string;
  port: number;
  transport: TransportKind;
  pins?: readonly string[];
}

export interface Clock {
  now(): number;
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

export interface LeaseStore {
  read(): string | null;
  write(value: string): void;
  clear(): void;
}

export interface Logger {
  warn(...args: unknown[]): void;
  error(...args: unknown[]): void;
}

export interface TransportTarget {
  /** `wss://host:port/` or `ws://127.0.0.1:port/`. */
  url: string;
  transport: TransportKind;
  /** Native only: the pins trusted for this attempt. */
  pins: readonly string[];
}

export interface TransportCloseEvent {
  code?: number;
  reason?: string;
  /** `pin_mismatch` is terminal; any other value is an ordinary socket failure. */
  error?: string;
}

export interface TransportSocket {
  send(text: string): void;
  close(code: number, reason: string): void;
  onopen: (() => void) | null;
  onmessage: ((text: string) => void) | null;
  onclose: ((event: TransportCloseEvent) => void) | null;
  /**
   * Optional: transports that can ping start keepalive after the ack with the daemon's
   * `keepalive_interval_s`; a ping unanswered by the next tick is socket loss (02 §16.7).
   */
  startKeepalive?(intervalMs: number): void;
}

export type TransportFactory = (target: TransportTarget) => TransportSocket;

export interface AppductClientOptions {
  transport: TransportFactory;
  clock?: Clock;
  /** Uniform in [0, 1): backoff jitter. */
  random?: () => number;
  leaseStore?: LeaseStore;
  logger?: Logger;
  device?: DeviceFields;
  dev?: boolean;
  /** The transport `connect(link)` uses when its options name none. Default `native`. */
  defaultTransport?: TransportKind;
  /** Transports this platform can open; others are refused with `unsupported_link`. Default both. */
  allowedTransports?: readonly TransportKind[];
  /** Appended to `unsupported_link` messages: why this platform cannot follow such a link. */
  unsupportedLinkHint?: string;
  /**
   * Refuse links carrying a `pin` with `unsupported_link`: every native deep link carries one
   * (02 §5.1), so a web-only platform cannot follow it. Default `false`.
   */
  refusePinnedLinks?: boolean;
}

/** The resume lease (07 §7.7.2, §7.9), as stored. */
export interface ResumeLease {
  v: 1;
  sessionId: string;
  resumeToken: string;
  alias: string;
  graceS: number;
  /** Unix ms of the first loss, or `null` while connected. */
  lostAt: number | null;
  endpoint: { address: string; port: number };
  transport: TransportKind;
}

export interface AppductClient {
  registerTool<I = unknown, O = unknown>(def: ToolDefinition<I, O>): Registration;
  createToolGroup(group: string): ToolGroup;
  registerEvent<P = unknown>(def: EventDefinition<P>): Registration;
  postEvent(name: string, payload?: unknown): void;
  connect(link: string, options?: ConnectOptions): Promise<void>;
  disconnect(): Promise<void>;
  handleUrl(url: string): boolean;
  restoreSession(): Promise<boolean>;
  getAppductState(): ClientState;
  getSessionId(): string | null;
  getSessionAlias(): string | null;
  getRegisteredTools(): WireToolDescriptor[];
  addAppductListener<K extends keyof AppductListeners>(kind: K, cb: AppductListeners[K]): Registration;
  configureAppduct(options: ConfigureOptions): void;
  /** Starts a claim from a decoded bootstrap; no link checks run (07 §7.2.1). */
  connectBootstrap(target: BootstrapTarget): Promise<void>;
  /** Applies 02 §16.5 (background and foreground). */
  setForeground(foreground: boolean): void;
}
