// The session core (§D13, §T2–§T7): claim, resume, backoff, grace, registries, calls and
// events, written against injected ports (transport, clock, random source, lease store, logger).

import { decodeBase64urlStrict, encodeBase64url } from "./base64.js";
import { isBootstrapExpired, type BootstrapPayload } from "./bootstrap.js";
import { isTerminalCloseCode } from "./close.js";
import { isValidEventName, isValidGroup, type WireToolDescriptor } from "./descriptors.js";
import { AppductConnectError, AppductRegistrationError } from "./errors.js";
import { CallTable } from "./calls.js";
import { createAdapterLeaseStore, createMemoryLeaseStore, MAX_LEASE_PINS, parseLease, type AsyncLeaseStore } from "./lease.js";
import { linkRefusedFrame, type LinkRefusalReason } from "./sealed/refusal.js";
import { encodeUtf8 } from "./utf8.js";
import { isPrivateLanAddress, parseIpv6 } from "./ip.js";
import { hasAppductParameter, isValidPin, parseLink } from "./link.js";
import { encodeFrame } from "./frame.js";
import { buildEventEntry, buildToolEntry, type EventEntry, type ToolEntry } from "./registry.js";
import { isIntentionalReplace } from "./replace.js";
import {
  isJsonObject,
  isStringWithin,
  isWireInteger,
  MAX_DEVICE_FIELD_LENGTH,
  MAX_FRAME_BYTES,
  MAX_IDENTIFIER_LENGTH,
  truncateUtf16,
} from "./text.js";
import type {
  AppductClient,
  AppductClientOptions,
  AppductErrorEvent,
  AppductListeners,
  BootstrapTarget,
  ClientState,
  Clock,
  ConfigureOptions,
  ConnectOptions,
  DeviceFields,
  LinkRefusal,
  EventDefinition,
  LeaseStore,
  Logger,
  Registration,
  RegistrySnapshot,
  ResumeLease,
  SessionChangeEvent,
  ToolDefinition,
  ToolGroup,
  TransportCloseEvent,
  TransportFactory,
  TransportKind,
  TransportSocket,
  TransportTarget,
} from "./types.js";

const PROTOCOL_VERSION = 2;
const BACKOFF_BASE_MS = 500;
const BACKOFF_CAP_MS = 30_000;
const DEFAULT_GRACE_S = 600;
const DEFAULT_KEEPALIVE_S = 15;

interface Endpoint {
  address: string;
  port: number;
}

/** A claim in progress: what the link carried. */
interface PendingClaim {
  sessionId: string;
  token: string;
  expiresAt: number;
  endpoint: Endpoint;
  transport: TransportKind;
  pins: readonly string[];
  /** Sealed links: the daemon's static public key. */
  staticKey: Uint8Array | null;
}

/** A session held since its first ack, until `closed`. */
interface HeldSession {
  sessionId: string;
  alias: string;
  resumeToken: string;
  graceS: number;
  keepaliveS: number;
  endpoint: Endpoint;
  transport: TransportKind;
  pins: readonly string[];
  staticKey: Uint8Array | null;
  /** Unix ms of the first loss since the last ack, or `null` while connected. */
  lostAt: number | null;
}

/** One socket and how far its handshake got. */
interface Connection {
  readonly socket: TransportSocket;
  readonly mode: "claim" | "resume";
  phase: "opening" | "handshake" | "established";
  /** Snapshots went out on this connection: later registry changes are deltas. */
  snapshotSent: boolean;
  eventRegistry: boolean;
  /** `result_content` of the latest ack (§D17.1). */
  resultContent: boolean;
  /** `result_parts_max_bytes` of the latest ack, or `null`. */
  resultPartsMaxBytes: number | null;
}

interface PendingConnect {
  resolve: () => void;
  reject: (error: AppductConnectError) => void;
}

type ListenerMap = { [K in keyof AppductListeners]: { cb: AppductListeners[K] }[] };

const systemClock: Clock = {
  now: () => Date.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
};

function endpointUrl(endpoint: Endpoint, transport: TransportKind): string {
  if (transport === "web") {
    return `ws://127.0.0.1:${endpoint.port}/`;
  }
  const host = parseIpv6(endpoint.address) ? `[${endpoint.address}]` : endpoint.address;
  // Sealed: a plain WebSocket to the wss port's plain route; the channel is the Noise handshake.
  return `${transport === "sealed" ? "ws" : "wss"}://${host}:${endpoint.port}/`;
}

/** The plain `ws://` URL of the listener a link names, where a `link_refused` frame goes. */
function refusalUrl(address: string, port: number): string {
  const host = parseIpv6(address) ? `[${address}]` : address;
  return `ws://${host}:${port}/`;
}

/** The backoff delay before retry number `attempt` (§D13.2): full jitter, 500 ms base, 30 s cap. */
export function backoffDelayMs(attempt: number, random: number): number {
  return Math.floor(random * Math.min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2 ** attempt));
}

/**
 * A stable marker of the live session core (issue #23). `appduct doctor` looks for these bytes in
 * the JavaScript bundle of a release build (plain JS, or the string table of Hermes bytecode), so
 * `--assert-absent` fails when the live SDK shipped. It is a string literal the client stores, so
 * minifiers keep it; the inert entries never import this module. Never change it: doctors of
 * every version look for it.
 */
export const SDK_LIVE_CORE_MARKER = "appduct-sdk-live-core/v1";

class Client implements AppductClient {
  /** The live-core marker; see {@link SDK_LIVE_CORE_MARKER}. */
  readonly liveCore: string = SDK_LIVE_CORE_MARKER;
  private readonly transportFactory: TransportFactory;
  private readonly clock: Clock;
  private readonly random: () => number;
  private readonly defaultLeaseStore: LeaseStore;
  private leaseStore: LeaseStore | AsyncLeaseStore;
  /** `restoreSession` ran and found nothing: configuring storage later retries it there. */
  private restoreMissed = false;
  private readonly sendLinkRefusal: ((refusal: LinkRefusal) => void) | null;
  private readonly logger: Logger;
  private readonly defaultTransport: TransportKind;
  private readonly allowedTransports: readonly TransportKind[];
  private readonly unsupportedLinkHint: string;
  private readonly refusePinnedLinks: boolean;
  private device: DeviceFields;
  private dev: boolean;
  private trust: "pin" | "link" = "link";
  private pins: readonly string[] = [];
  private allowPrivateLanOnly = true;

  private state: ClientState = "idle";
  private claim: PendingClaim | null = null;
  private session: HeldSession | null = null;
  private conn: Connection | null = null;
  private attempt = 0;
  private retryTimer: unknown = null;
  private graceTimer: unknown = null;
  private foreground = true;
  private pendingConnect: PendingConnect | null = null;
  /** Bumped by every transition that invalidates work a listener may have interrupted. */
  private epoch = 0;

  private readonly tools = new Map<string, ToolEntry>();
  private readonly events = new Map<string, EventEntry>();
  private readonly calls: CallTable<Connection>;
  private readonly listeners: ListenerMap = { stateChange: [], sessionChange: [], error: [] };
  private readonly warnedUndeclared = new Set<string>();

  constructor(options: AppductClientOptions) {
    this.transportFactory = options.transport;
    this.clock = options.clock ?? systemClock;
    this.random = options.random ?? Math.random;
    this.defaultLeaseStore = options.leaseStore ?? createMemoryLeaseStore();
    this.leaseStore = this.defaultLeaseStore;
    this.sendLinkRefusal = options.sendLinkRefusal ?? null;
    this.logger = options.logger ?? console;
    this.device = { ...options.device };
    this.dev = options.dev ?? false;
    this.defaultTransport = options.defaultTransport ?? "native";
    this.calls = new CallTable<Connection>({
      clock: this.clock,
      isLive: (conn) => this.conn === conn && conn.phase === "established" && this.state === "active",
      sendFrame: (conn, frame) => this.sendFrame(conn, frame),
      write: (conn, text) => this.write(conn, text),
      log: (level, ...args) => this.safeLog(level, ...args),
      features: (conn) => ({ resultContent: conn.resultContent, partsMaxBytes: conn.resultPartsMaxBytes }),
    });
    this.allowedTransports = options.allowedTransports ?? ["native", "web"];
    this.unsupportedLinkHint = options.unsupportedLinkHint ? ` ${options.unsupportedLinkHint}` : "";
    this.refusePinnedLinks = options.refusePinnedLinks ?? false;
  }

  // ---- registration (§T3, §T6) ----

  registerTool<I = unknown, O = unknown>(def: ToolDefinition<I, O>): Registration {
    const entry = buildToolEntry(def as ToolDefinition<unknown, unknown>, { dev: this.dev, warn: (m) => this.logger.warn(m) });
    if (this.tools.has(entry.name) && this.dev && !isIntentionalReplace(def)) {
      this.logger.warn(`appduct: tool "${entry.name}" was already registered; the new registration replaces it.`);
    }
    this.tools.set(entry.name, entry);
    this.sendRegistryDelta("tool", { operation: "upsert", tool: entry.wire });
    return {
      name: entry.name,
      remove: () => {
        // Identity-safe: a disposer never removes a newer registration of the same name.
        if (this.tools.get(entry.name) !== entry) return;
        this.tools.delete(entry.name);
        this.sendRegistryDelta("tool", { operation: "remove", name: entry.name });
      },
    };
  }

  createToolGroup(group: string): ToolGroup {
    if (!isValidGroup(group)) {
      throw new AppductRegistrationError("group", "must match ^[A-Za-z0-9_-]{1,64}(/[A-Za-z0-9_-]{1,64})?$", "createToolGroup");
    }
    return {
      group,
      registerTool: <I, O>(def: Omit<ToolDefinition<I, O>, "group">): Registration => {
        if (isJsonObject(def) && Object.prototype.hasOwnProperty.call(def, "group") && (def as { group?: unknown }).group !== undefined) {
          throw new AppductRegistrationError("group", `must not be set inside tool group "${group}"`, "registerTool");
        }
        return this.registerTool({ ...(def as ToolDefinition<I, O>), group });
      },
    };
  }

  registerEvent<P = unknown>(def: EventDefinition<P>): Registration {
    const entry = buildEventEntry(def as EventDefinition<unknown>, { dev: this.dev, warn: (m) => this.logger.warn(m) });
    this.events.set(entry.name, entry);
    this.sendRegistryDelta("event", { operation: "upsert", event: entry.wire });
    return {
      name: entry.name,
      remove: () => {
        if (this.events.get(entry.name) !== entry) return;
        this.events.delete(entry.name);
        this.sendRegistryDelta("event", { operation: "remove", name: entry.name });
      },
    };
  }

  getRegisteredTools(): WireToolDescriptor[] {
    return this.registrySnapshot().tools;
  }

  registrySnapshot(): RegistrySnapshot {
    return cloneJson(this.registryFrames());
  }

  /** The descriptors the registry snapshot frames carry (§D7.7), shared with `registrySnapshot`. */
  private registryFrames(): RegistrySnapshot {
    return {
      tools: Array.from(this.tools.values(), (entry) => entry.wire),
      events: Array.from(this.events.values(), (entry) => entry.wire),
    };
  }

  /** Deltas go out only on an acked socket whose snapshots were sent (§D13.3). */
  private sendRegistryDelta(kind: "tool" | "event", body: Record<string, unknown>): void {
    const conn = this.conn;
    if (this.state !== "active" || !conn || conn.phase !== "established" || !conn.snapshotSent) return;
    if (kind === "event" && !conn.eventRegistry) return;
    const session = this.session as HeldSession;
    const type = kind === "tool" ? "tool_registry_delta" : "event_registry_delta";
    this.sendFrame(conn, { type, session_id: session.sessionId, ...body });
  }

  // ---- events (§T6) ----

  postEvent(name: string, payload?: unknown): void {
    try {
      this.postEventUnsafe(name, payload);
    } catch (error) {
      // postEvent never throws, whatever a listener or the transport does.
      this.safeLog("error", "appduct: postEvent failed:", error);
    }
  }

  private postEventUnsafe(name: string, payload: unknown): void {
    const conn = this.conn;
    const session = this.session;
    if (this.state !== "active" || !conn || conn.phase !== "established" || !session) {
      if (this.dev) this.logger.warn(`appduct: event "${String(name)}" dropped: no active session.`);
      return;
    }
    if (!isValidEventName(name)) {
      this.eventNotSent("Event name must be a string of 1 to 4096 UTF-16 code units.");
      return;
    }
    let payloadText: string | undefined;
    if (payload !== undefined) {
      try {
        payloadText = JSON.stringify(payload);
      } catch {
        payloadText = undefined;
      }
      if (payloadText === undefined) {
        this.eventNotSent(`Event "${name}" has a payload that is not JSON-serializable.`);
        return;
      }
    }
    const frame: Record<string, unknown> = { type: "event", session_id: session.sessionId, name };
    if (payload !== undefined) frame.payload = payload;
    frame.ts = this.clock.now();
    const encoded = encodeFrame(frame);
    if (!encoded.ok) {
      const message =
        encoded.reason === "too_large"
          ? `Event "${name}" is ${encoded.bytes} bytes; the frame limit is ${MAX_FRAME_BYTES}.`
          : `Event "${name}" has a payload that is not JSON-serializable.`;
      this.eventNotSent(message);
      return;
    }
    if (this.dev) this.checkDeclaredEvent(name, payload);
    this.write(conn, encoded.text);
  }

  private eventNotSent(message: string): void {
    this.safeLog("warn", `appduct: ${message}`);
    this.emitError({ phase: "socket", code: "event_not_sent", message });
  }

  /** Development checks: undeclared names warn once; payloads failing a declared schema warn. */
  private checkDeclaredEvent(name: string, payload: unknown): void {
    const declared = this.events.get(name);
    if (!declared) {
      if (!this.warnedUndeclared.has(name)) {
        this.warnedUndeclared.add(name);
        this.logger.warn(`appduct: event "${name}" was posted without a registerEvent declaration.`);
      }
      return;
    }
    const validate = declared.payload?.validate;
    if (!validate) return;
    Promise.resolve()
      .then(() => validate(payload))
      .then((result) => {
        if (!result.ok) this.logger.warn(`appduct: event "${name}" payload does not match its declared schema: ${result.issues[0]?.message ?? ""}`);
      })
      .catch(() => undefined);
  }

  // ---- listeners (§T7.1) ----

  addAppductListener<K extends keyof AppductListeners>(kind: K, cb: AppductListeners[K]): Registration {
    const list = this.listeners[kind] as { cb: AppductListeners[K] }[];
    const entry = { cb };
    list.push(entry);
    return {
      remove: () => {
        const at = list.indexOf(entry);
        if (at >= 0) list.splice(at, 1);
      },
    };
  }

  private emit<K extends keyof AppductListeners>(kind: K, event: Parameters<AppductListeners[K]>[0]): void {
    for (const { cb } of [...this.listeners[kind]] as { cb: (e: unknown) => void }[]) {
      try {
        cb(event);
      } catch (error) {
        this.safeLog("error", `appduct: a ${kind} listener threw:`, error);
      }
    }
  }

  private emitError(event: AppductErrorEvent): void {
    this.emit("error", event);
  }

  private safeLog(level: "warn" | "error", ...args: unknown[]): void {
    try {
      this.logger[level](...args);
    } catch {
      // A logger must not break the core.
    }
  }

  /** Reports a state only when it changes; only `closed` carries a reason (§D13.1). */
  private setState(state: ClientState, reason?: string): void {
    if (this.state === state) return;
    this.state = state;
    this.emit("stateChange", reason === undefined ? { state } : { state, reason });
  }

  // ---- queries and configuration ----

  getAppductState(): ClientState {
    return this.state;
  }

  getSessionId(): string | null {
    return this.session?.sessionId ?? null;
  }

  getSessionAlias(): string | null {
    return this.session?.alias ?? null;
  }

  configureAppduct(options: ConfigureOptions): void {
    if (options.trust !== undefined && options.trust !== "pin" && options.trust !== "link") {
      throw new TypeError(`appduct: trust must be "pin" or "link"; got ${String(options.trust)}`);
    }
    if (options.pins !== undefined) {
      const bad = options.pins.find((pin) => !isValidPin(pin));
      if (bad !== undefined) {
        throw new TypeError(`appduct: pin ${JSON.stringify(bad)} does not match ^sha256/[A-Za-z0-9+/]{43}=$`);
      }
    }
    const pins = options.pins ?? this.pins;
    const trust = options.trust ?? (options.pins !== undefined ? (pins.length > 0 ? "pin" : "link") : this.trust);
    if (trust === "pin" && pins.length === 0) {
      throw new TypeError('appduct: trust "pin" needs at least one pin');
    }
    this.pins = [...pins];
    this.trust = trust;
    if (options.allowPrivateLanOnly !== undefined) this.allowPrivateLanOnly = options.allowPrivateLanOnly;
    if (options.device !== undefined) this.device = { ...this.device, ...options.device };
    if (options.dev !== undefined) this.dev = options.dev;
    if (options.storage !== undefined) this.useStorage(options.storage);
  }

  /**
   * Keeps the lease in an app-provided storage (issue #23) from now on: a held session's lease is
   * written there at once; when `restoreSession` already ran and found nothing (the auto entry
   * runs it at import, before the app configures storage), it runs again from the storage.
   */
  private useStorage(storage: ConfigureOptions["storage"]): void {
    if (storage !== null && (typeof storage !== "object" || typeof storage.getItem !== "function" || typeof storage.setItem !== "function" || typeof storage.removeItem !== "function")) {
      throw new TypeError("appduct: storage must have getItem, setItem and removeItem");
    }
    this.leaseStore = storage === null ? this.defaultLeaseStore : createAdapterLeaseStore(storage, (message, error) => this.safeLog("warn", message, error));
    if (this.session) {
      this.writeLease();
      return;
    }
    if (storage !== null && this.restoreMissed && (this.state === "idle" || this.state === "closed")) {
      this.restoreSession().catch(() => undefined);
    }
  }

  // ---- connecting (§D13.1, §T2) ----

  connect(link: string, options?: ConnectOptions): Promise<void> {
    const checked = this.checkLink(link, options);
    if ("error" in checked) {
      return Promise.reject(checked.error);
    }
    return this.startOrKeep(checked.target);
  }

  handleUrl(url: string): boolean {
    if (!hasAppductParameter(url)) return false;
    const checked = this.checkLink(url, undefined);
    if ("error" in checked) {
      this.emitError({ phase: "bootstrap", code: checked.error.code, message: checked.error.message });
      return true;
    }
    // Claim failures already reach the error listener; the promise must not go unhandled.
    this.startOrKeep(checked.target).catch(() => undefined);
    return true;
  }

  /** A link naming the held session keeps it; any other valid link supersedes (§T11.3). */
  private startOrKeep(target: BootstrapTarget): Promise<void> {
    const session = this.session;
    if (session && session.sessionId === target.sessionId && (this.state === "active" || this.state === "reconnecting")) {
      if (this.state === "active") return Promise.resolve();
      return new Promise<void>((resolve, reject) => {
        const previous = this.pendingConnect;
        this.pendingConnect = {
          resolve: () => {
            previous?.resolve();
            resolve();
          },
          reject: (error) => {
            previous?.reject(error);
            reject(error);
          },
        };
      });
    }
    return this.connectBootstrap(target);
  }

  /** Full link validation (§D13.1) before anything touches a held session. */
  private checkLink(link: string, options: ConnectOptions | undefined): { target: BootstrapTarget } | { error: AppductConnectError } {
    // Sealed payloads are read by every entry, so that one it cannot follow is named as such.
    const parsed = parseLink(link, { sealed: true });
    if (!parsed.ok) {
      const messages = {
        invalid_url: "The link is not a valid appduct link.",
        missing_payload: "The link carries no appduct parameter.",
        invalid_payload: "The link's appduct payload is not a valid bootstrap payload.",
      } as const;
      return { error: new AppductConnectError(parsed.code, messages[parsed.code]) };
    }
    const { payload, pin, staticKey } = parsed.link;
    if (isBootstrapExpired(payload, this.clock.now())) {
      this.refuseLink(payload, "link_expired");
      return { error: new AppductConnectError("expired_payload", "The link has expired; ask for a new one.") };
    }
    // The daemon is told only when the link is of a kind this entry cannot use; a conflict the
    // app's own connect options caused is the app's to fix, and the daemon's hint (mint another
    // kind of link) would be wrong.
    const unsupported = (message: string, refuse = true): { error: AppductConnectError } => {
      if (refuse) this.refuseLink(payload, "unsupported_link");
      return { error: new AppductConnectError("unsupported_link", `${message}${this.unsupportedLinkHint}`) };
    };
    const byOption = options?.transport !== undefined;
    if (staticKey !== undefined) {
      if (!this.allowedTransports.includes("sealed")) {
        return unsupported("This link was minted for the sealed transport (appduct sessions link --for react-native), which this platform does not open.");
      }
      if (byOption && options?.transport !== "sealed") {
        return unsupported(`This link was minted for the sealed transport; connect was asked for the ${options?.transport} transport.`, false);
      }
      if (this.allowPrivateLanOnly && !isPrivateLanAddress(payload.address)) {
        return { error: new AppductConnectError("address_not_allowed", `Address ${payload.address} is not a private LAN address.`) };
      }
      return { target: { ...this.targetOf(payload, "sealed", []), staticKey } };
    }
    const transport = options?.transport ?? this.defaultTransport;
    if (transport === "sealed") {
      return unsupported("A sealed connection needs a sealed link (appduct sessions link --for react-native); this one is not.", !byOption);
    }
    if (!this.allowedTransports.includes(transport)) {
      return unsupported(`This platform cannot open ${transport}-transport connections.`, !byOption);
    }
    let pins: readonly string[] = [];
    if (transport === "web") {
      if (pin !== null && this.refusePinnedLinks) {
        return unsupported("This link carries a pin: it was minted for the native transport (wss://).");
      }
      if (payload.address !== "127.0.0.1") {
        return {
          error: new AppductConnectError(
            "unsupported_link",
            `A web-transport link must carry 127.0.0.1 (the daemon's loopback web listener); this one carries ${payload.address}.${this.unsupportedLinkHint}`,
          ),
        };
      }
    } else {
      const configured = options?.pins ?? (this.trust === "pin" ? this.pins : []);
      if (options?.pins !== undefined && options.pins.some((p) => !isValidPin(p))) {
        return { error: new AppductConnectError("missing_pin", "A configured pin is malformed.") };
      }
      if (configured.length > 0) {
        pins = configured;
      } else if (pin !== null) {
        pins = [pin];
        this.safeLog("warn", "appduct: trusting the pin carried by the link for this session (link trust mode).");
      } else {
        return { error: new AppductConnectError("missing_pin", "The link carries no valid pin and no pins are configured.") };
      }
      if (this.allowPrivateLanOnly && !isPrivateLanAddress(payload.address)) {
        return { error: new AppductConnectError("address_not_allowed", `Address ${payload.address} is not a private LAN address.`) };
      }
    }
    return { target: this.targetOf(payload, transport, pins) };
  }

  private targetOf(payload: BootstrapPayload, transport: TransportKind, pins: readonly string[]): BootstrapTarget {
    return {
      sessionId: payload.sessionId,
      token: payload.tokenBase64url,
      expiresAt: payload.expiresAt,
      address: payload.address,
      port: payload.port,
      transport,
      pins,
    };
  }

  /**
   * Tells the daemon, where the platform can, that this app will not use a link (PROTOCOL.md
   * "Refusals"), so the agent waiting on it learns why at once. Only to addresses this client
   * would connect to; never fails the caller.
   */
  private refuseLink(link: { sessionId: string; tokenBase64url: string; address: string; port: number }, reason: LinkRefusalReason): void {
    const send = this.sendLinkRefusal;
    if (!send) return;
    if (this.allowPrivateLanOnly && !isPrivateLanAddress(link.address)) return;
    const token = decodeBase64urlStrict(link.tokenBase64url);
    if (!token || token.length !== 32) return;
    try {
      send({ url: refusalUrl(link.address, link.port), reason, sessionId: link.sessionId, frame: linkRefusedFrame(token, link.sessionId, reason) });
    } catch (error) {
      this.safeLog("warn", "appduct: telling the daemon about the refused link failed:", error);
    }
  }

  connectBootstrap(target: BootstrapTarget): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.beginClaim(
        {
          sessionId: target.sessionId,
          token: target.token,
          expiresAt: target.expiresAt,
          endpoint: { address: target.address, port: target.port },
          transport: target.transport,
          pins: [...(target.pins ?? [])],
          staticKey: target.staticKey ? Uint8Array.from(target.staticKey) : null,
        },
        { resolve, reject },
      );
    });
  }

  /** Starts a claim, superseding any held or pending session (§T7.2). */
  private beginClaim(claim: PendingClaim, pending: PendingConnect): void {
    const hadSession = this.session !== null;
    const calls = this.calls.takeAll();
    const previous = this.pendingConnect;
    this.closeConnection(1000, "superseded");
    this.clearTimers();
    this.session = null;
    this.safeLeaseClear();
    this.claim = claim;
    this.attempt = 0;
    this.pendingConnect = pending;
    const epoch = ++this.epoch;
    this.setState("connecting");
    if (hadSession) this.emit("sessionChange", { type: "lost", sessionId: null, alias: null, reason: "superseded" });
    this.calls.abortAll(calls, "closed");
    previous?.reject(new AppductConnectError("superseded", "A newer link superseded this connection."));
    if (epoch !== this.epoch) return;
    this.openConnection();
  }

  restoreSession(): Promise<boolean> {
    if (this.isBusy()) return Promise.resolve(false);
    const store = this.leaseStore;
    let raw: string | null | Promise<string | null>;
    try {
      raw = store.read();
    } catch {
      raw = null;
    }
    if (raw !== null && typeof raw === "object" && typeof raw.then === "function") {
      // An app-provided storage: whatever happens meanwhile (a link, a disconnect) wins.
      const epoch = this.epoch;
      return raw.then(
        (value) => (epoch === this.epoch && store === this.leaseStore && !this.isBusy() ? this.restoreFrom(value) : false),
        () => false,
      );
    }
    return Promise.resolve(this.restoreFrom(raw as string | null));
  }

  private isBusy(): boolean {
    return this.state === "connecting" || this.state === "active" || this.state === "reconnecting";
  }

  /** Resumes from a stored lease (text), if it is well formed and within grace. */
  private restoreFrom(raw: string | null): boolean {
    const lease = raw === null ? null : parseLease(raw);
    if (raw !== null && !lease) this.safeLeaseClear();
    this.restoreMissed = !lease;
    if (!lease) return false;
    if (!this.allowedTransports.includes(lease.transport)) {
      // A lease this entry cannot follow (a sealed lease in a web or Node app, a native one in
      // React Native): opening it another way could send its resume token in cleartext.
      this.safeLog("warn", `appduct: ignoring a stored ${lease.transport}-transport lease this platform does not open.`);
      this.safeLeaseClear();
      return false;
    }
    // The address rules a link meets (§T2 step 5) hold for a stored lease too: storage is not
    // trusted to widen where this client connects.
    const address = lease.endpoint.address;
    if (lease.transport === "web" ? address !== "127.0.0.1" : this.allowPrivateLanOnly && !isPrivateLanAddress(address)) {
      this.safeLog("warn", `appduct: ignoring a stored lease for ${address}, an address this client does not connect to.`);
      this.safeLeaseClear();
      return false;
    }
    // Trust (§T7.2): in pin mode the configured pins, never the stored ones; in link mode the
    // pins the session was established with, stored in the lease. A native lease without them
    // (written before they were stored) cannot be checked, so it is not resumed.
    let pins: readonly string[] = [];
    if (lease.transport === "native") {
      if (this.trust === "pin") {
        pins = this.pins;
      } else if (lease.pins !== undefined) {
        pins = lease.pins;
        this.safeLog("warn", "appduct: trusting the pin stored with the resume lease for this session (link trust mode).");
      } else {
        this.safeLog("warn", "appduct: ignoring a stored native lease that carries no pin (link trust mode needs the pin the session was established with).");
        this.safeLeaseClear();
        return false;
      }
    }
    const staticKey = lease.staticKey !== undefined ? decodeBase64urlStrict(lease.staticKey) : null;
    const now = this.clock.now();
    const lostAt = lease.lostAt ?? now;
    if (now >= lostAt + lease.graceS * 1000) {
      this.safeLeaseClear();
      return false;
    }
    this.session = {
      sessionId: lease.sessionId,
      alias: lease.alias,
      resumeToken: lease.resumeToken,
      graceS: lease.graceS,
      keepaliveS: DEFAULT_KEEPALIVE_S,
      endpoint: { ...lease.endpoint },
      transport: lease.transport,
      pins,
      staticKey,
      lostAt,
    };
    this.claim = null;
    this.attempt = 0;
    this.writeLease();
    this.startGraceTimer();
    const epoch = ++this.epoch;
    this.setState("reconnecting");
    if (epoch === this.epoch) this.openConnection();
    return true;
  }

  disconnect(): Promise<void> {
    if (this.state === "idle" || this.state === "closed") return Promise.resolve();
    this.finish("closed_by_app", "closed", { code: "closed_by_app", message: "disconnect() was called." });
    return Promise.resolve();
  }

  // ---- lifecycle (§D13.4) ----

  setForeground(foreground: boolean): void {
    if (foreground === this.foreground) return;
    this.foreground = foreground;
    if (!foreground) {
      // Only a held session is suspended; a claim in progress keeps its backoff (§D13.4).
      if (this.state !== "active" && this.state !== "reconnecting") return;
      const session = this.session as HeldSession;
      const calls = this.calls.takeAll();
      this.closeConnection(1001, "app_backgrounded");
      this.clearRetryTimer();
      if (session.lostAt === null) {
        session.lostAt = this.clock.now();
        this.writeLease();
        this.startGraceTimer();
      }
      this.setState("reconnecting");
      this.calls.abortAll(calls, "session_suspended");
      return;
    }
    if (this.state !== "reconnecting" || this.conn) return;
    this.clearRetryTimer();
    this.resumeIfWithinGrace();
  }

  // ---- connections ----

  private openConnection(): void {
    const mode = this.session ? "resume" : "claim";
    const endpoint = this.session?.endpoint ?? this.claim?.endpoint;
    const transport = this.session?.transport ?? this.claim?.transport ?? this.defaultTransport;
    const pins = this.session?.pins ?? this.claim?.pins ?? [];
    if (!endpoint) return;
    const target: TransportTarget = { url: endpointUrl(endpoint, transport), transport, pins };
    if (transport === "sealed") {
      const staticKey = this.session?.staticKey ?? this.claim?.staticKey ?? null;
      if (staticKey) target.staticKey = staticKey;
      // The secret this attempt presents: it seeds the DRBG where there is no CSPRNG.
      const secret = this.session ? encodeUtf8(this.session.resumeToken) : this.claim ? decodeBase64urlStrict(this.claim.token) : null;
      if (secret) target.secret = secret;
    }
    let socket: TransportSocket;
    try {
      socket = this.transportFactory(target);
    } catch (error) {
      this.safeLog("warn", "appduct: the transport failed to open a socket:", error);
      this.onAttemptFailed(mode);
      return;
    }
    const conn: Connection = { socket, mode, phase: "opening", snapshotSent: false, eventRegistry: false, resultContent: false, resultPartsMaxBytes: null };
    this.conn = conn;
    socket.onopen = () => {
      if (this.conn !== conn || conn.phase !== "opening") return;
      conn.phase = "handshake";
      this.sendFirstFrame(conn);
    };
    socket.onmessage = (text) => {
      if (this.conn !== conn) return;
      this.handleMessage(conn, text);
    };
    socket.onclose = (event) => {
      if (this.conn !== conn) return;
      this.conn = null;
      this.handleClose(conn, event ?? {});
    };
  }

  private sendFirstFrame(conn: Connection): void {
    if (conn.mode === "resume") {
      const session = this.session as HeldSession;
      this.sendFrame(conn, {
        type: "session_resume",
        protocol_version: PROTOCOL_VERSION,
        session_id: session.sessionId,
        resume_token: session.resumeToken,
      });
      return;
    }
    const claim = this.claim as PendingClaim;
    const frame: Record<string, unknown> = {
      type: "session_claim",
      protocol_version: PROTOCOL_VERSION,
      session_id: claim.sessionId,
      token: claim.token,
    };
    const fields: [keyof DeviceFields, string][] = [
      ["manufacturer", "device_manufacturer"],
      ["model", "device_model"],
      ["os", "device_os"],
    ];
    for (const [key, wire] of fields) {
      const value = this.device[key];
      if (typeof value === "string") {
        const cut = truncateUtf16(value, MAX_DEVICE_FIELD_LENGTH);
        if (cut !== "") frame[wire] = cut;
      }
    }
    this.sendFrame(conn, frame);
  }

  private closeConnection(code: number, reason: string): void {
    const conn = this.conn;
    if (!conn) return;
    this.conn = null;
    try {
      conn.socket.close(code, reason);
    } catch (error) {
      this.safeLog("warn", "appduct: closing the socket failed:", error);
    }
  }

  private sendFrame(conn: Connection, frame: Record<string, unknown>): boolean {
    const encoded = encodeFrame(frame);
    if (!encoded.ok) {
      const why = encoded.reason === "too_large" ? `is ${encoded.bytes} bytes; the frame limit is ${MAX_FRAME_BYTES}` : "is not JSON-serializable";
      this.safeLog("error", `appduct: a ${String(frame.type)} frame ${why}; it was not sent.`);
      return false;
    }
    return this.write(conn, encoded.text);
  }

  private write(conn: Connection, text: string): boolean {
    try {
      conn.socket.send(text);
      return true;
    } catch (error) {
      this.safeLog("warn", "appduct: sending on the socket failed:", error);
      return false;
    }
  }

  // ---- inbound frames ----

  private handleMessage(conn: Connection, text: string): void {
    let frame: unknown;
    try {
      frame = JSON.parse(text);
    } catch {
      if (this.dev) this.logger.warn("appduct: ignored a daemon message that is not JSON.");
      return;
    }
    // Unknown types and fields are ignored (§D7.5).
    if (!isJsonObject(frame)) return;
    switch (frame.type) {
      case "session_ack":
        if (conn.phase === "handshake") this.handleAck(conn, frame);
        return;
      case "tool_call":
        if (conn.phase === "established") this.calls.receive(conn, (this.session as HeldSession).sessionId, frame, this.tools);
        return;
      case "tool_cancel":
        if (conn.phase === "established") this.calls.cancel(frame);
        return;
      default:
        return;
    }
  }

  private handleAck(conn: Connection, frame: Record<string, unknown>): void {
    const resumeToken = frame.resume_token;
    if (frame.status !== "ok" || !isStringWithin(resumeToken, 1, MAX_IDENTIFIER_LENGTH)) {
      if (this.dev) this.logger.warn("appduct: ignored a malformed session_ack.");
      return;
    }
    const graceS = isWireInteger(frame.grace_s) && frame.grace_s >= 0 ? frame.grace_s : DEFAULT_GRACE_S;
    const keepaliveS = isWireInteger(frame.keepalive_interval_s) && frame.keepalive_interval_s >= 1 ? frame.keepalive_interval_s : DEFAULT_KEEPALIVE_S;
    const alias = typeof frame.alias === "string" ? frame.alias : "";
    const base = conn.mode === "claim" ? (this.claim as PendingClaim) : (this.session as HeldSession);
    const sessionId = base.sessionId;

    conn.phase = "established";
    conn.eventRegistry = frame.event_registry === true;
    conn.resultContent = frame.result_content === true;
    conn.resultPartsMaxBytes = isWireInteger(frame.result_parts_max_bytes) && frame.result_parts_max_bytes >= 1 ? frame.result_parts_max_bytes : null;
    this.attempt = 0;
    this.clearTimers();
    this.session = {
      sessionId,
      alias,
      resumeToken,
      graceS,
      keepaliveS,
      endpoint: base.endpoint,
      transport: base.transport,
      pins: base.pins,
      staticKey: base.staticKey,
      lostAt: null,
    };
    this.claim = null;
    this.writeLease();

    const epoch = ++this.epoch;
    this.setState("active");
    if (epoch !== this.epoch) return;
    this.emit("sessionChange", { type: conn.mode === "claim" ? "claimed" : "resumed", sessionId, alias });
    if (epoch !== this.epoch || this.conn !== conn) return;
    const pending = this.pendingConnect;
    this.pendingConnect = null;
    pending?.resolve();
    // Synchronously, before onmessage returns: anything registered from here on is a delta.
    const registry = this.registryFrames();
    this.sendFrame(conn, {
      type: "tool_registry_snapshot",
      session_id: sessionId,
      tools: registry.tools,
    });
    if (conn.eventRegistry) {
      this.sendFrame(conn, {
        type: "event_registry_snapshot",
        session_id: sessionId,
        events: registry.events,
      });
    }
    conn.snapshotSent = true;
    try {
      conn.socket.startKeepalive?.(keepaliveS * 1000);
    } catch (error) {
      this.safeLog("warn", "appduct: starting keepalive failed:", error);
    }
  }

  // ---- closes and retries (§D13.1, §D13.2) ----

  private handleClose(conn: Connection, event: TransportCloseEvent): void {
    if (event.error === "handshake_failed" && conn.mode === "resume") {
      // Sealed, a held session: neither the daemon's plain close nor a message 2 that does not
      // authenticate can be told from an attacker on the path, so it is a lost connection
      // (1006), retried within grace. A rotated daemon key simply runs out the grace.
      this.onAttemptFailed("resume");
      return;
    }
    if (event.error === "handshake_failed") {
      // Sealed, a first claim: the daemon at the link's address does not hold the link's static
      // key (rotated with appduct keygen --force, or another daemon). Retrying cannot help; a
      // forged failure only costs a new link.
      const message =
        "The sealed handshake failed: the daemon does not hold the key this link names (its host key was rotated, or the link is for another daemon). Mint a new link.";
      if (conn.mode === "claim" && this.claim) {
        const claim = this.claim;
        this.refuseLink({ sessionId: claim.sessionId, tokenBase64url: claim.token, address: claim.endpoint.address, port: claim.endpoint.port }, "handshake_failed");
        this.finish("handshake_failed", "closed", { code: "handshake_failed", message });
      } else {
        this.finish("handshake_failed", "session_suspended", { code: "handshake_failed", message });
      }
      return;
    }
    if (event.error === "pin_mismatch") {
      this.finish("pin_mismatch", "session_suspended", {
        code: "pin_mismatch",
        message: "The daemon's certificate does not match any trusted pin.",
      });
      return;
    }
    const code = typeof event.code === "number" ? event.code : undefined;
    const reason = typeof event.reason === "string" && event.reason !== "" ? event.reason : undefined;
    if (conn.phase === "established") {
      if (code === 1000) {
        this.finish("revoked", "session_suspended", null);
      } else if (isTerminalCloseCode(code)) {
        this.finish(reason ?? "rejected_by_daemon", "session_suspended", {
          code: reason ?? "rejected_by_daemon",
          message: `The daemon closed the session (1008 ${reason ?? "without a reason"}).`,
          closeReason: reason,
        });
      } else {
        this.suspend();
      }
      return;
    }
    if (conn.mode === "claim" && isTerminalCloseCode(code)) {
      this.finish("connect_error", "closed", {
        code: "connect_error",
        message: `The daemon refused the claim (1008 ${reason ?? "without a reason"}).`,
        closeReason: reason,
      });
      return;
    }
    if (conn.mode === "resume" && isTerminalCloseCode(code)) {
      this.finish(reason ?? "rejected_by_daemon", "closed", {
        code: reason ?? "rejected_by_daemon",
        message: `The daemon refused the resume (1008 ${reason ?? "without a reason"}).`,
        closeReason: reason,
      });
      return;
    }
    this.onAttemptFailed(conn.mode);
  }

  /** A claim or resume attempt failed in a retryable way: wait for the backoff delay. */
  private onAttemptFailed(mode: "claim" | "resume"): void {
    if (mode === "resume" && !this.foreground) return;
    this.scheduleRetry();
  }

  /** An established socket was lost without 1000 or 1008: `reconnecting` (§D13.1). */
  private suspend(): void {
    const session = this.session as HeldSession;
    const calls = this.calls.takeAll();
    session.lostAt = this.clock.now();
    this.writeLease();
    this.startGraceTimer();
    const epoch = ++this.epoch;
    this.setState("reconnecting");
    this.calls.abortAll(calls, "session_suspended");
    if (epoch !== this.epoch) return;
    if (this.foreground) this.scheduleRetry();
  }

  private scheduleRetry(): void {
    this.clearRetryTimer();
    const delay = backoffDelayMs(this.attempt, this.random());
    this.attempt += 1;
    this.retryTimer = this.clock.setTimeout(() => {
      this.retryTimer = null;
      this.retryDue();
    }, delay);
  }

  private retryDue(): void {
    if (this.state === "connecting" && this.claim) {
      if (isBootstrapExpired(this.claim, this.clock.now())) {
        this.finish("connect_error", "closed", { code: "connect_error", message: "The link expired before the daemon acknowledged the claim." });
        return;
      }
      this.openConnection();
      return;
    }
    if (this.state === "reconnecting" && this.foreground) {
      this.resumeIfWithinGrace();
    }
  }

  private resumeIfWithinGrace(): void {
    const session = this.session;
    if (!session) return;
    const lostAt = session.lostAt ?? this.clock.now();
    if (this.clock.now() >= lostAt + session.graceS * 1000) {
      this.finish("grace_expired", "session_suspended", null);
      return;
    }
    this.openConnection();
  }

  private startGraceTimer(): void {
    const session = this.session as HeldSession;
    if (this.graceTimer !== null) this.clock.clearTimeout(this.graceTimer);
    const lostAt = session.lostAt ?? this.clock.now();
    const remaining = Math.max(0, lostAt + session.graceS * 1000 - this.clock.now());
    this.graceTimer = this.clock.setTimeout(() => {
      this.graceTimer = null;
      if (this.state === "reconnecting") this.finish("grace_expired", "session_suspended", null);
    }, remaining);
  }

  private clearRetryTimer(): void {
    if (this.retryTimer !== null) {
      this.clock.clearTimeout(this.retryTimer);
      this.retryTimer = null;
    }
  }

  private clearTimers(): void {
    this.clearRetryTimer();
    if (this.graceTimer !== null) {
      this.clock.clearTimeout(this.graceTimer);
      this.graceTimer = null;
    }
  }

  /**
   * Ends everything: state `closed` with `reason`, then `lost` when a session was held, then the
   * abort of every call in flight, then the pending `connect` rejection (§T7.1).
   */
  private finish(
    reason: string,
    abortReason: string,
    error: { code: string; message: string; closeReason?: string | undefined } | null,
  ): void {
    const hadSession = this.session !== null;
    const calls = this.calls.takeAll();
    const pending = this.pendingConnect;
    this.pendingConnect = null;
    this.closeConnection(1000, reason);
    this.clearTimers();
    this.session = null;
    this.claim = null;
    this.safeLeaseClear();
    ++this.epoch;
    this.setState("closed", reason);
    if (hadSession) this.emit("sessionChange", { type: "lost", sessionId: null, alias: null, reason } satisfies SessionChangeEvent);
    this.calls.abortAll(calls, abortReason);
    if (error && reason !== "closed_by_app") {
      const event: AppductErrorEvent = {
        phase: hadSession && reason !== "pin_mismatch" ? "socket" : "connect",
        code: error.code,
        message: error.message,
        isRetryable: false,
      };
      if (error.closeReason !== undefined) event.closeReason = error.closeReason;
      this.emitError(event);
    }
    if (pending) {
      const code = reason === "pin_mismatch" || reason === "closed_by_app" || reason === "handshake_failed" ? reason : "connect_error";
      pending.reject(new AppductConnectError(code, error?.message ?? `The session ended (${reason}).`, error?.closeReason));
    }
  }

  // ---- lease (§T7.2) ----

  private writeLease(): void {
    const session = this.session;
    if (!session) return;
    const lease: ResumeLease = {
      v: 1,
      sessionId: session.sessionId,
      resumeToken: session.resumeToken,
      alias: session.alias,
      graceS: session.graceS,
      lostAt: session.lostAt,
      endpoint: { address: session.endpoint.address, port: session.endpoint.port },
      transport: session.transport,
    };
    if (session.staticKey) lease.staticKey = encodeBase64url(session.staticKey);
    // The pins the session was established with, for a restore in link trust mode (§T7.2). A
    // list a stored lease may not carry (over 32, or malformed ones given to connectBootstrap) is
    // left out: such a lease restores in pin mode only.
    const pins = session.pins;
    if (session.transport === "native" && pins.length > 0 && pins.length <= MAX_LEASE_PINS && pins.every((pin) => isValidPin(pin))) {
      lease.pins = [...pins];
    }
    try {
      this.leaseStore.write(JSON.stringify(lease));
    } catch (error) {
      this.safeLog("warn", "appduct: writing the resume lease failed:", error);
    }
  }

  private safeLeaseClear(): void {
    try {
      this.leaseStore.clear();
    } catch (error) {
      this.safeLog("warn", "appduct: clearing the resume lease failed:", error);
    }
  }
}

function cloneJson<T>(value: T): T {
  return JSON.parse(JSON.stringify(value)) as T;
}

/** Builds a client over the given ports (§T2.1). */
export function createAppductClient(options: AppductClientOptions): AppductClient {
  return new Client(options);
}
