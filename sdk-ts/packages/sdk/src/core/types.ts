// Public types of the app-side API (§T2, §T3, §T5, §T7).

import type { ToolContent } from "./content.js";
export type { ContentBlock, TextBlock, ImageBlock, ImageMimeType, ResourceLinkBlock, ToolContent } from "./content.js";
import type { ToolAnnotations, WireEventDescriptor, WireToolDescriptor } from "./descriptors.js";
import type { ToolSchema } from "./standard-schema.js";

export type ClientState = "idle" | "connecting" | "active" | "reconnecting" | "closed";
/**
 * `native`: pinned wss; `web`: loopback ws to the web listener; `sealed`: a Noise channel inside
 * a plain ws on the LAN (PROTOCOL.md "Sealed transport"), chosen by a sealed link.
 */
export type TransportKind = "native" | "web" | "sealed";

export interface Registration {
  readonly name?: string;
  remove(): void;
}

/** What a handler receives besides its arguments (§T5.1). */
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
  /** Registry declaration (§T16, device.md §D18.1): the tool's risk. Absent: derived from annotations. */
  riskLevel?: RiskLevel;
  /** Registry declaration (§T16, §D18.2): what the tool needs, at most 32 strings of 1 to 128 units. */
  requiredPermissions?: string[];
  /** Registry declaration (§T16, §D18.3): 1 to 16 cases `appduct tools test` runs. */
  testCases?: ToolTestCase[];
  /** Returns the JSON result, or content built with `image`/`text`/`resourceLink` (§T5.5). */
  handler: (args: I, ctx: ToolContext) => O | ToolContent<O> | Promise<O | ToolContent<O>>;
}

/** A tool's risk (device.md §D18.1). */
export type RiskLevel = "low" | "medium" | "high";

/** One declared test case (§T16, device.md §D18.3). */
export interface ToolTestCase {
  name?: string;
  /** The call's arguments. */
  arguments: Record<string, unknown>;
  /**
   * `{}`: the call succeeds. `schema`: and its JSON result matches this shape (the JSON Schema
   * subset of §D18.4). `error`: the call fails with this error type. Not both.
   */
  expect: { schema?: Record<string, unknown>; error?: string };
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
  /** Device fields of the next claim (§T7.3). */
  device?: DeviceFields;
  /** `pin`: only configured pins are trusted; `link`: the link's pin, per session (§D3.4). */
  trust?: "pin" | "link";
  pins?: readonly string[];
  /** Default `true`: payload addresses must be RFC 1918 IPv4 or exactly 127.0.0.1. */
  allowPrivateLanOnly?: boolean;
  /** Development warnings and checks. */
  dev?: boolean;
  /**
   * Where the resume lease is kept so a session survives a full JavaScript reload: an async
   * key-value store in the shape of AsyncStorage, expo-secure-store or MMKV (React Native and
   * web entries). `null` goes back to the entry's default (memory, or the tab's sessionStorage).
   */
  storage?: AppductStorage | null;
}

/**
 * An app-provided key-value store (`getItem`/`setItem`/`removeItem`, sync or async): the
 * convention of React Native storage libraries. The lease is stored under `appduct:lease`.
 */
export interface AppductStorage {
  getItem(key: string): Promise<string | null> | string | null;
  setItem(key: string, value: string): Promise<unknown> | unknown;
  removeItem(key: string): Promise<unknown> | unknown;
}

/** A decoded bootstrap as `connectBootstrap` takes it (§T2.1). */
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
  /** Sealed transport: the daemon's 32-byte X25519 static public key. */
  staticKey?: Uint8Array;
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
  /** Sealed only: the daemon's static public key, from the link. */
  staticKey?: Uint8Array;
  /**
   * Sealed only: the secret this attempt presents (the claim token's 32 bytes, or the resume
   * token's UTF-8), which seeds the DRBG where there is no CSPRNG. Never sent in clear.
   */
  secret?: Uint8Array;
}

export interface TransportCloseEvent {
  code?: number;
  reason?: string;
  /**
   * `pin_mismatch` is terminal; `handshake_failed` (sealed: the daemon does not hold the link's
   * static key) ends a claim; any other value is an ordinary socket failure.
   */
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
   * `keepalive_interval_s`; a ping unanswered by the next tick is socket loss (§D13.6).
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
   * (§D5.1), so a web-only platform cannot follow it. Default `false`.
   */
  refusePinnedLinks?: boolean;
  /**
   * Tells the daemon that this app will not use a link (PROTOCOL.md "Refusals"): called with the
   * plain `ws://` address of the link's listener and the one `link_refused` text frame to send
   * there. Platforms that cannot reach the daemon leave it unset.
   */
  sendLinkRefusal?: (refusal: LinkRefusal) => void;
}

/** A `link_refused` frame and where to send it. */
export interface LinkRefusal {
  url: string;
  reason: "unsupported_link" | "link_expired" | "handshake_failed" | "pin_mismatch";
  sessionId: string;
  frame: string;
}

/** The resume lease (§T7.2, §T9), as stored. */
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
  /** Sealed leases: the daemon's static public key, base64url. */
  staticKey?: string;
  /**
   * Native leases: the pins the session was established with (1 to 32, each
   * `^sha256/[A-Za-z0-9+/]{43}=$`); a restore in link trust mode checks the daemon against them.
   */
  pins?: string[];
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
  /** Starts a claim from a decoded bootstrap; no link checks run (§T2.1). */
  connectBootstrap(target: BootstrapTarget): Promise<void>;
  /** Applies §D13.4 (background and foreground). */
  setForeground(foreground: boolean): void;
  /**
   * Copies of the wire descriptors the next claim's registry snapshots carry, in registration
   * order: the one source of both the claim frames and `appduct-sdk snapshot` (§T17).
   */
  registrySnapshot(): RegistrySnapshot;
}

/** The tool and event descriptors of a claim's registry snapshots (§D7.7, §T17). */
export interface RegistrySnapshot {
  tools: WireToolDescriptor[];
  events: WireEventDescriptor[];
}
