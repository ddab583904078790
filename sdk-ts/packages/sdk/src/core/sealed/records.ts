// Sealed records (PROTOCOL.md, "Sealed transport"): each binary WebSocket message after the
// handshake is one Noise transport message whose plaintext starts with a kind byte:
// 0x00 a fragment of a frame (more follows), 0x01 the last fragment, 0x02 a close record
// (2-byte big-endian code, then a UTF-8 reason of at most 123 bytes).

import { MAX_FRAME_BYTES } from "../text.js";
import { decodeUtf8Strict, encodeUtf8 } from "../utf8.js";
import { MAX_NOISE_MESSAGE } from "./noise.js";

export const KIND_FRAGMENT = 0x00;
export const KIND_LAST = 0x01;
export const KIND_CLOSE = 0x02;
/** Plaintext of one record: a Noise message less the 16-byte tag. */
export const MAX_RECORD_PLAINTEXT = MAX_NOISE_MESSAGE - 16;
/** Frame bytes one record carries after its kind byte. */
export const MAX_FRAGMENT_DATA = MAX_RECORD_PLAINTEXT - 1;
const MAX_CLOSE_REASON_BYTES = 123;

/** A record stream that breaks the rules: close with `code reason` (PROTOCOL.md). */
export class RecordError extends Error {
  override name = "RecordError";
  constructor(
    readonly code: 1002 | 1007 | 1009,
    readonly reason: "protocol_error" | "invalid_payload" | "message_too_big",
  ) {
    super(`${code} ${reason}`);
  }
}

/** The plaintexts of the records carrying one frame (UTF-8 text). */
export function frameRecords(text: string): Uint8Array[] {
  const bytes = encodeUtf8(text);
  if (bytes.length > MAX_FRAME_BYTES) throw new RecordError(1009, "message_too_big");
  const out: Uint8Array[] = [];
  let at = 0;
  do {
    const end = Math.min(bytes.length, at + MAX_FRAGMENT_DATA);
    const record = new Uint8Array(1 + end - at);
    record[0] = end === bytes.length ? KIND_LAST : KIND_FRAGMENT;
    record.set(bytes.subarray(at, end), 1);
    out.push(record);
    at = end;
  } while (at < bytes.length);
  return out;
}

/** Close codes a WebSocket close frame may carry, so a close record may too. */
export function isSendableCloseCode(code: number): boolean {
  return (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1014) || (code >= 3000 && code <= 4999);
}

/**
 * The plaintext of a close record; the reason is cut to 123 bytes on a character boundary.
 * Throws `RecordError` for a code no close frame may carry (1005, 1006, …).
 */
export function closeRecord(code: number, reason: string): Uint8Array {
  if (!Number.isInteger(code) || !isSendableCloseCode(code)) throw new RecordError(1002, "protocol_error");
  let bytes = encodeUtf8(reason);
  let cut = reason;
  while (bytes.length > MAX_CLOSE_REASON_BYTES) {
    cut = cut.slice(0, -1);
    bytes = encodeUtf8(cut);
  }
  const record = new Uint8Array(3 + bytes.length);
  record[0] = KIND_CLOSE;
  record[1] = (code >> 8) & 255;
  record[2] = code & 255;
  record.set(bytes, 3);
  return record;
}

export type RecordEvent = { type: "frame"; text: string } | { type: "close"; code: number; reason: string } | { type: "partial" };

/**
 * Reassembles frames from decrypted record plaintexts; throws `RecordError` on bad input. After
 * a close record, any record is `1002 protocol_error`.
 */
export class RecordAssembler {
  private parts: Uint8Array[] = [];
  private size = 0;
  private closed = false;

  push(plaintext: Uint8Array): RecordEvent {
    if (this.closed) throw new RecordError(1002, "protocol_error");
    if (plaintext.length === 0) throw new RecordError(1002, "protocol_error");
    const kind = plaintext[0];
    if (kind === KIND_CLOSE) {
      if (plaintext.length < 3 || plaintext.length > 3 + MAX_CLOSE_REASON_BYTES) throw new RecordError(1002, "protocol_error");
      const code = ((plaintext[1] as number) << 8) | (plaintext[2] as number);
      if (!isSendableCloseCode(code)) throw new RecordError(1002, "protocol_error");
      const reason = decodeUtf8Strict(plaintext.subarray(3));
      if (reason === null) throw new RecordError(1007, "invalid_payload");
      this.closed = true;
      this.parts = [];
      this.size = 0;
      return { type: "close", code, reason };
    }
    if (kind !== KIND_FRAGMENT && kind !== KIND_LAST) throw new RecordError(1002, "protocol_error");
    const data = plaintext.subarray(1);
    this.size += data.length;
    if (this.size > MAX_FRAME_BYTES) throw new RecordError(1009, "message_too_big");
    this.parts.push(data.slice());
    if (kind === KIND_FRAGMENT) return { type: "partial" };
    const frame = new Uint8Array(this.size);
    let at = 0;
    for (const part of this.parts) {
      frame.set(part, at);
      at += part.length;
    }
    this.parts = [];
    this.size = 0;
    const text = decodeUtf8Strict(frame);
    if (text === null) throw new RecordError(1007, "invalid_payload");
    return { type: "frame", text };
  }
}
