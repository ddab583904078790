// Outbound frame encoding with the size check every sender applies (§D6, §D13.6).

import { MAX_FRAME_BYTES, utf8ByteLength } from "./text.js";

export type EncodedFrame = { ok: true; text: string; bytes: number } | { ok: false; reason: "too_large"; bytes: number } | { ok: false; reason: "not_serializable" };

/**
 * Encodes a frame as JSON text and measures its UTF-8 bytes. Frames over 262144 bytes are
 * refused (`too_large`, with the size); values `JSON.stringify` cannot encode are
 * `not_serializable`.
 */
export function encodeFrame(frame: Record<string, unknown>): EncodedFrame {
  let text: string | undefined;
  try {
    text = JSON.stringify(frame);
  } catch {
    return { ok: false, reason: "not_serializable" };
  }
  if (typeof text !== "string") {
    return { ok: false, reason: "not_serializable" };
  }
  const bytes = utf8ByteLength(text);
  if (bytes > MAX_FRAME_BYTES) {
    return { ok: false, reason: "too_large", bytes };
  }
  return { ok: true, text, bytes };
}

/** Whether a text message fits the 262144-byte frame limit. */
export function fitsFrameLimit(text: string): boolean {
  return utf8ByteLength(text) <= MAX_FRAME_BYTES;
}
