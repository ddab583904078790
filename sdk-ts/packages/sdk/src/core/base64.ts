// Base64 codecs without platform APIs (no Buffer, no atob), so the core runs unchanged in
// browsers, Node and Hermes.

const URL_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
const STD_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

const URL_VALUES: Int8Array = (() => {
  const table = new Int8Array(128).fill(-1);
  for (let i = 0; i < URL_ALPHABET.length; i++) {
    table[URL_ALPHABET.charCodeAt(i)] = i;
  }
  return table;
})();

function encodeWith(alphabet: string, bytes: Uint8Array, pad: boolean): string {
  let out = "";
  let i = 0;
  for (; i + 2 < bytes.length; i += 3) {
    const n = ((bytes[i] as number) << 16) | ((bytes[i + 1] as number) << 8) | (bytes[i + 2] as number);
    out += alphabet[(n >> 18) & 63]! + alphabet[(n >> 12) & 63]! + alphabet[(n >> 6) & 63]! + alphabet[n & 63]!;
  }
  const rest = bytes.length - i;
  if (rest === 1) {
    const n = (bytes[i] as number) << 16;
    out += alphabet[(n >> 18) & 63]! + alphabet[(n >> 12) & 63]!;
    if (pad) out += "==";
  } else if (rest === 2) {
    const n = ((bytes[i] as number) << 16) | ((bytes[i + 1] as number) << 8);
    out += alphabet[(n >> 18) & 63]! + alphabet[(n >> 12) & 63]! + alphabet[(n >> 6) & 63]!;
    if (pad) out += "=";
  }
  return out;
}

/** Unpadded base64url (RFC 4648 §5). */
export function encodeBase64url(bytes: Uint8Array): string {
  return encodeWith(URL_ALPHABET, bytes, false);
}

/** Standard base64 (RFC 4648 §4) with `=` padding. */
export function encodeBase64(bytes: Uint8Array): string {
  return encodeWith(STD_ALPHABET, bytes, true);
}

/**
 * Strict unpadded base64url decoding (§D4.2): only `[A-Za-z0-9_-]`, no `=`, a length that is
 * not 1 modulo 4, and zero unused trailing bits (one canonical text form). `null` otherwise.
 */
export function decodeBase64urlStrict(text: string): Uint8Array | null {
  if (text.length % 4 === 1) {
    return null;
  }
  const values = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    const v = code < 128 ? (URL_VALUES[code] as number) : -1;
    if (v < 0) {
      return null;
    }
    values[i] = v;
  }
  const out = new Uint8Array(Math.floor((text.length * 3) / 4));
  let o = 0;
  let i = 0;
  for (; i + 3 < values.length; i += 4) {
    const n = ((values[i] as number) << 18) | ((values[i + 1] as number) << 12) | ((values[i + 2] as number) << 6) | (values[i + 3] as number);
    out[o++] = (n >> 16) & 255;
    out[o++] = (n >> 8) & 255;
    out[o++] = n & 255;
  }
  const rest = values.length - i;
  if (rest === 2) {
    const a = values[i] as number;
    const b = values[i + 1] as number;
    if ((b & 0x0f) !== 0) return null;
    out[o++] = ((a << 2) | (b >> 4)) & 255;
  } else if (rest === 3) {
    const a = values[i] as number;
    const b = values[i + 1] as number;
    const c = values[i + 2] as number;
    if ((c & 0x03) !== 0) return null;
    out[o++] = ((a << 2) | (b >> 4)) & 255;
    out[o++] = ((b << 4) | (c >> 2)) & 255;
  }
  return out;
}
