// `link_refused` (PROTOCOL.md "Refusals"): an app that will not use a link tells the daemon why,
// proving it holds the link by an HMAC keyed with the claim token, which itself is never sent.

import { hmac } from "@noble/hashes/hmac";
import { sha256 } from "@noble/hashes/sha256";

import { encodeBase64url } from "../base64.js";
import { encodeUtf8 } from "../utf8.js";

export type LinkRefusalReason = "unsupported_link" | "link_expired" | "handshake_failed" | "pin_mismatch";

/** Unpadded base64url of HMAC-SHA256(token, "appduct link_refused v1\n<session_id>\n<reason>"). */
export function linkRefusalProof(token: Uint8Array, sessionId: string, reason: LinkRefusalReason): string {
  return encodeBase64url(hmac(sha256, token, encodeUtf8(`appduct link_refused v1\n${sessionId}\n${reason}`)));
}

/** The one text frame of a refusal connection. */
export function linkRefusedFrame(token: Uint8Array, sessionId: string, reason: LinkRefusalReason): string {
  return JSON.stringify({ type: "link_refused", session_id: sessionId, reason, proof: linkRefusalProof(token, sessionId, reason) });
}
