// The resume lease (§T7.2): what a client needs to resume a session (for native sessions also
// the pins it was established with, which a restore in link trust mode checks), kept in memory
// (native, Node, React Native) or the tab's sessionStorage (web), never on disk (§D13.2) unless
// the app provides a storage adapter (issue #23: a session then survives a full JavaScript
// reload).

import { isJsonObject, isStringWithin, isWireInteger, MAX_IDENTIFIER_LENGTH } from "./text.js";
import { decodeBase64urlStrict } from "./base64.js";
import { isValidPin } from "./link.js";
import type { AppductStorage, LeaseStore, ResumeLease } from "./types.js";

/** The default lease store: process memory only (§D13.2). */
export function createMemoryLeaseStore(): LeaseStore {
  let value: string | null = null;
  return {
    read: () => value,
    write: (v) => {
      value = v;
    },
    clear: () => {
      value = null;
    },
  };
}

/**
 * At most this many pins are read from a stored native lease: a session trusts the pins it was
 * established with (the configured ones, `connect`'s `pins` or the link's one), and a longer list
 * is not one this SDK wrote.
 */
export const MAX_LEASE_PINS = 32;

/** Reads a stored lease; `null` for anything that is not a well-formed version-1 lease. */
export function parseLease(raw: string): ResumeLease | null {
  let value: unknown;
  try {
    value = JSON.parse(raw);
  } catch {
    return null;
  }
  if (!isJsonObject(value) || value.v !== 1) return null;
  const endpoint = value.endpoint;
  if (
    !isStringWithin(value.sessionId, 1, MAX_IDENTIFIER_LENGTH) ||
    !isStringWithin(value.resumeToken, 1, MAX_IDENTIFIER_LENGTH) ||
    typeof value.alias !== "string" ||
    !isWireInteger(value.graceS) ||
    value.graceS < 0 ||
    !(value.lostAt === null || (typeof value.lostAt === "number" && Number.isFinite(value.lostAt))) ||
    !isJsonObject(endpoint) ||
    typeof endpoint.address !== "string" ||
    !isWireInteger(endpoint.port) ||
    endpoint.port < 1 ||
    endpoint.port > 65535 ||
    (value.transport !== "native" && value.transport !== "web" && value.transport !== "sealed")
  ) {
    return null;
  }
  let staticKey: string | undefined;
  if (value.transport === "sealed") {
    const key = typeof value.staticKey === "string" ? decodeBase64urlStrict(value.staticKey) : null;
    if (!key || key.length !== 32) return null;
    staticKey = value.staticKey as string;
  }
  // Native leases carry the pins the session was established with (§T7.2), which a restore
  // in link trust mode checks the daemon against; leases written before they were stored have
  // none. Any other transport has no pins, so a lease naming some is not one this SDK wrote.
  let pins: string[] | undefined;
  if (value.pins !== undefined) {
    const stored = value.pins;
    if (
      value.transport !== "native" ||
      !Array.isArray(stored) ||
      stored.length < 1 ||
      stored.length > MAX_LEASE_PINS ||
      !stored.every((pin) => isValidPin(pin))
    ) {
      return null;
    }
    pins = [...(stored as string[])];
  }
  const lease: ResumeLease = {
    v: 1,
    sessionId: value.sessionId,
    resumeToken: value.resumeToken,
    alias: value.alias,
    graceS: value.graceS,
    lostAt: value.lostAt,
    endpoint: { address: endpoint.address, port: endpoint.port },
    transport: value.transport,
  };
  if (staticKey !== undefined) lease.staticKey = staticKey;
  if (pins !== undefined) lease.pins = pins;
  return lease;
}

/** A lease store whose reads are asynchronous (an app-provided storage adapter). */
export interface AsyncLeaseStore {
  read(): Promise<string | null>;
  write(value: string): void;
  clear(): void;
}

/** The key an app-provided storage keeps the lease under. */
export const STORAGE_LEASE_KEY = "appduct:lease";

/**
 * A lease store over an app-provided storage adapter (sync or async): operations run one after
 * another, so a read sees every earlier write and a clear is never overtaken by an older write.
 * Failures are reported to `warn` and otherwise ignored (the session then does not survive a
 * reload).
 */
export function createAdapterLeaseStore(storage: AppductStorage, warn: (message: string, error: unknown) => void): AsyncLeaseStore {
  let queue: Promise<unknown> = Promise.resolve();
  const enqueue = <T>(op: () => T | Promise<T>, fallback: T, what: string): Promise<T> => {
    const next = queue.then(op).catch((error: unknown) => {
      warn(`appduct: ${what} the stored resume lease failed:`, error);
      return fallback;
    });
    queue = next;
    return next;
  };
  return {
    read: () =>
      enqueue(
        async () => {
          const value = await storage.getItem(STORAGE_LEASE_KEY);
          return typeof value === "string" ? value : null;
        },
        null as string | null,
        "reading",
      ),
    write: (value) => {
      void enqueue(() => storage.setItem(STORAGE_LEASE_KEY, value), undefined, "writing");
    },
    clear: () => {
      void enqueue(() => storage.removeItem(STORAGE_LEASE_KEY), undefined, "removing");
    },
  };
}
