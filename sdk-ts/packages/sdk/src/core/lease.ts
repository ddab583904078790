// The resume lease (07 §7.7.2): what a client needs to resume a session, kept in memory (native,
// Node, React Native) or the tab's sessionStorage (web), never on disk (02 §16.3).

import { isJsonObject, isStringWithin, isWireInteger, MAX_IDENTIFIER_LENGTH } from "./text.js";
import type { LeaseStore, ResumeLease } from "./types.js";

/** The default lease store: process memory only (02 §16.3). */
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
    (value.transport !== "native" && value.transport !== "web")
  ) {
    return null;
  }
  return {
    v: 1,
    sessionId: value.sessionId,
    resumeToken: value.resumeToken,
    alias: value.alias,
    graceS: value.graceS,
    lostAt: value.lostAt,
    endpoint: { address: endpoint.address, port: endpoint.port },
    transport: value.transport,
  };
}
