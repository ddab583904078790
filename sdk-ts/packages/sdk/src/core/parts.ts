// `tool_result_part` frames (§D17.2): a result body too big for
// one frame goes as ordered parts naming the whole body's length and SHA-256 (§T5.5). Mirrors
// the Rust `appduct_protocol::parts::split_body`.

import { sha256 } from "@noble/hashes/sha256";
import { encodeBase64 } from "./base64.js";
import { encodeUtf8 } from "./utf8.js";

/** Largest decoded `data` of one `tool_result_part` frame. */
export const MAX_PART_DATA_BYTES = 131_072;

/** One `tool_result_part` frame's fields after `session_id` and `id`. */
export interface ResultPart {
  offset: number;
  total: number;
  sha256: string;
  data: string;
}

function hex(bytes: Uint8Array): string {
  let out = "";
  for (const b of bytes) out += b.toString(16).padStart(2, "0");
  return out;
}

/**
 * Cuts a body (the UTF-8 JSON text of `{result?, content?}`) into parts of at most
 * `MAX_PART_DATA_BYTES` decoded bytes, in order, each naming the whole body's length and
 * SHA-256.
 */
export function splitBody(body: string, partBytes: number = MAX_PART_DATA_BYTES): ResultPart[] {
  const bytes = typeof TextEncoder === "function" ? new TextEncoder().encode(body) : encodeUtf8(body);
  const digest = hex(sha256(bytes));
  const parts: ResultPart[] = [];
  for (let offset = 0; offset < bytes.length; offset += partBytes) {
    const chunk = bytes.subarray(offset, Math.min(offset + partBytes, bytes.length));
    parts.push({ offset, total: bytes.length, sha256: digest, data: encodeBase64(chunk) });
  }
  return parts;
}
