// Shared value rules of the wire (§D1, §D7.1): string lengths are UTF-16 code units, frame
// sizes are UTF-8 bytes, and "integer" means an integral number within ±(2^53 − 1).

/** Largest text message either side may send, in UTF-8 bytes (§D6, §D14). */
export const MAX_FRAME_BYTES = 262_144;
/** Free-text bound in UTF-16 code units (§D7.1). */
export const MAX_FREE_TEXT_LENGTH = 4_096;
/** Device field bound in UTF-16 code units (§D7.1). */
export const MAX_DEVICE_FIELD_LENGTH = 256;
/** Identifier length bounds in UTF-16 code units (§D7.1). */
export const MAX_IDENTIFIER_LENGTH = 128;

/** Length of a wire string, in UTF-16 code units (JavaScript's native string length). */
export function utf16Length(s: string): number {
  return s.length;
}

/** Whether `s` is a string whose UTF-16 length lies in [min, max]. */
export function isStringWithin(s: unknown, min: number, max: number): s is string {
  return typeof s === "string" && s.length >= min && s.length <= max;
}

/**
 * UTF-8 byte length of `s`. A lone surrogate counts 3 bytes, as `TextEncoder` encodes it
 * (U+FFFD); `JSON.stringify` never emits one, since it escapes lone surrogates.
 */
export function utf8ByteLength(s: string): number {
  let bytes = 0;
  for (let i = 0; i < s.length; i++) {
    const unit = s.charCodeAt(i);
    if (unit < 0x80) {
      bytes += 1;
    } else if (unit < 0x800) {
      bytes += 2;
    } else if (unit >= 0xd800 && unit <= 0xdbff && i + 1 < s.length) {
      const next = s.charCodeAt(i + 1);
      if (next >= 0xdc00 && next <= 0xdfff) {
        bytes += 4;
        i++;
      } else {
        bytes += 3;
      }
    } else {
      bytes += 3;
    }
  }
  return bytes;
}

/** Cuts `s` to at most `max` UTF-16 code units, never between the halves of a surrogate pair. */
export function truncateUtf16(s: string, max: number): string {
  if (s.length <= max) {
    return s;
  }
  let end = max;
  const last = s.charCodeAt(end - 1);
  const next = s.charCodeAt(end);
  // Cutting here would separate a high surrogate from its low surrogate: drop the pair.
  if (last >= 0xd800 && last <= 0xdbff && next >= 0xdc00 && next <= 0xdfff) {
    end -= 1;
  }
  return s.slice(0, end);
}

/** A wire "integer": a finite, integral number within ±(2^53 − 1) (§D1). */
export function isWireInteger(v: unknown): v is number {
  return typeof v === "number" && Number.isSafeInteger(v);
}

/** A plain JSON object: not null, not an array. */
export function isJsonObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** A plain object literal: prototype `Object.prototype` or `null` (excludes class instances). */
export function isPlainObject(v: unknown): v is Record<string, unknown> {
  if (typeof v !== "object" || v === null || Array.isArray(v)) {
    return false;
  }
  const proto: unknown = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
}
