// Bootstrap payload codec (§D4): the bytes a link carries, as unpadded strict base64url.

import { decodeBase64urlStrict, encodeBase64url } from "./base64.js";
import { formatIpv4, formatIpv6, ipv4FromMapped, parseIpv4, parseIpv6 } from "./ip.js";
import { decodeUtf8Strict, encodeUtf8 } from "./utf8.js";

const VERSION = 0x02;
/** Version of a sealed payload (PROTOCOL.md "Sealed link"); appduct v2 SDKs refuse it. */
const SEALED_VERSION = 0x03;
/** The daemon's X25519 static public key at the end of a sealed payload. */
const STATIC_KEY_BYTES = 32;
const FAMILY_V4 = 0x04;
const FAMILY_V6 = 0x06;
const TOKEN_BYTES = 32;
const MAX_EXPIRES_AT = Number.MAX_SAFE_INTEGER;

/** Decoded form of a bootstrap payload (§D4.3), as the vectors and SDKs use it. */
export interface BootstrapPayload {
  family: 4 | 6;
  /** Dotted decimal (IPv4) or RFC 5952 text (IPv6). */
  address: string;
  port: number;
  sessionId: string;
  /** The 32 token bytes as 43-character base64url: the `session_claim.token`. */
  tokenBase64url: string;
  /** Unix seconds. */
  expiresAt: number;
}

/**
 * Decodes a payload, all or nothing (§D4.3): the full structure, or `null` for any violation.
 * Expiry is not checked here.
 */
export function decodeBootstrapPayload(text: string): BootstrapPayload | null {
  if (typeof text !== "string" || text.length === 0) {
    return null;
  }
  const bytes = decodeBase64urlStrict(text);
  return bytes ? decodeLayout(bytes, VERSION) : null;
}

/** A sealed payload (version `0x03`): the v2 fields, then the daemon's static key. */
export interface SealedBootstrapPayload extends BootstrapPayload {
  /** The daemon's 32-byte X25519 static public key. */
  staticKey: Uint8Array;
}

/** Decodes a sealed payload (version `0x03`) as strictly as v2, or `null`. */
export function decodeSealedBootstrapPayload(text: string): SealedBootstrapPayload | null {
  if (typeof text !== "string" || text.length === 0) {
    return null;
  }
  const bytes = decodeBase64urlStrict(text);
  if (!bytes || bytes.length < STATIC_KEY_BYTES) return null;
  const payload = decodeLayout(bytes.subarray(0, bytes.length - STATIC_KEY_BYTES), SEALED_VERSION);
  return payload ? { ...payload, staticKey: bytes.slice(bytes.length - STATIC_KEY_BYTES) } : null;
}

/** Either version, as the version byte says: what SDKs that speak the sealed transport accept. */
export function decodeAnyBootstrapPayload(text: string): { sealed: false; payload: BootstrapPayload } | { sealed: true; payload: SealedBootstrapPayload } | null {
  if (typeof text !== "string" || text.length === 0) return null;
  const v2 = decodeBootstrapPayload(text);
  if (v2) return { sealed: false, payload: v2 };
  const sealed = decodeSealedBootstrapPayload(text);
  return sealed ? { sealed: true, payload: sealed } : null;
}

/** The v2 layout with version byte `version`. */
function decodeLayout(bytes: Uint8Array, version: number): BootstrapPayload | null {
  if (bytes.length < 2 || bytes[0] !== version) {
    return null;
  }
  const familyByte = bytes[1];
  const addressLength = familyByte === FAMILY_V4 ? 4 : familyByte === FAMILY_V6 ? 16 : 0;
  if (addressLength === 0) {
    return null;
  }
  let offset = 2;
  if (bytes.length < offset + addressLength + 3) {
    return null;
  }
  const addressBytes = bytes.subarray(offset, offset + addressLength);
  offset += addressLength;
  const port = ((bytes[offset] as number) << 8) | (bytes[offset + 1] as number);
  offset += 2;
  const idLength = bytes[offset] as number;
  offset += 1;
  if (port === 0 || idLength === 0 || bytes.length !== offset + idLength + TOKEN_BYTES + 8) {
    return null;
  }
  const sessionId = decodeUtf8Strict(bytes.subarray(offset, offset + idLength));
  if (sessionId === null) {
    return null;
  }
  offset += idLength;
  const token = bytes.subarray(offset, offset + TOKEN_BYTES);
  offset += TOKEN_BYTES;
  const high = readU32(bytes, offset);
  const low = readU32(bytes, offset + 4);
  // 2^53 − 1 has a high word of at most 0x1fffff; anything larger is refused.
  if (high > 0x1fffff) {
    return null;
  }
  const expiresAt = high * 0x1_0000_0000 + low;
  if (expiresAt > MAX_EXPIRES_AT) {
    return null;
  }
  return {
    family: familyByte === FAMILY_V4 ? 4 : 6,
    address: familyByte === FAMILY_V4 ? formatIpv4(addressBytes) : formatIpv6(addressBytes),
    port,
    sessionId,
    tokenBase64url: encodeBase64url(token),
    expiresAt,
  };
}

/** Why `encodeBootstrapPayload` refused its input (§D4.3). */
export class BootstrapEncodeError extends Error {
  override name = "BootstrapEncodeError";
}

/** Input of the encoder: the decoded form, with the token as base64url or raw bytes. */
export interface BootstrapPayloadInput {
  /** Ignored: the family follows the address (an IPv4-mapped IPv6 address encodes as IPv4). */
  family?: 4 | 6;
  address: string;
  port: number;
  sessionId: string;
  tokenBase64url?: string;
  token?: Uint8Array;
  expiresAt: number;
}

/** Encodes a payload as unpadded base64url; throws `BootstrapEncodeError` on invalid input. */
export function encodeBootstrapPayload(input: BootstrapPayloadInput): string {
  return encodeBase64url(encodeLayout(input, VERSION));
}

/** Encodes a sealed payload (version `0x03`, then the 32-byte static key). */
export function encodeSealedBootstrapPayload(input: BootstrapPayloadInput & { staticKey: Uint8Array }): string {
  if (!(input.staticKey instanceof Uint8Array) || input.staticKey.length !== STATIC_KEY_BYTES) {
    throw new BootstrapEncodeError("staticKey must be exactly 32 bytes");
  }
  const layout = encodeLayout(input, SEALED_VERSION);
  const out = new Uint8Array(layout.length + STATIC_KEY_BYTES);
  out.set(layout);
  out.set(input.staticKey, layout.length);
  return encodeBase64url(out);
}

function encodeLayout(input: BootstrapPayloadInput, version: number): Uint8Array {
  let family = FAMILY_V4;
  let address = parseIpv4(input.address);
  if (!address) {
    const v6 = parseIpv6(input.address);
    if (!v6) {
      throw new BootstrapEncodeError(`address "${input.address}" is not an IP literal`);
    }
    const mapped = ipv4FromMapped(v6);
    if (mapped) {
      address = mapped;
    } else {
      family = FAMILY_V6;
      address = v6;
    }
  }
  if (!Number.isInteger(input.port) || input.port < 1 || input.port > 65535) {
    throw new BootstrapEncodeError("port must be an integer in 1..=65535");
  }
  const id = encodeUtf8(input.sessionId);
  if (id.length < 1 || id.length > 255) {
    throw new BootstrapEncodeError("session id must be 1 to 255 UTF-8 bytes");
  }
  const token = input.token ?? (input.tokenBase64url !== undefined ? decodeBase64urlStrict(input.tokenBase64url) : null);
  if (!token || token.length !== TOKEN_BYTES) {
    throw new BootstrapEncodeError("token must be exactly 32 bytes");
  }
  if (!Number.isSafeInteger(input.expiresAt) || input.expiresAt < 0) {
    throw new BootstrapEncodeError("expiresAt must be an integer in 0..=2^53-1");
  }
  const out = new Uint8Array(2 + address.length + 3 + id.length + TOKEN_BYTES + 8);
  let o = 0;
  out[o++] = version;
  out[o++] = family;
  out.set(address, o);
  o += address.length;
  out[o++] = input.port >> 8;
  out[o++] = input.port & 255;
  out[o++] = id.length;
  out.set(id, o);
  o += id.length;
  out.set(token, o);
  o += TOKEN_BYTES;
  writeU32(out, o, Math.floor(input.expiresAt / 0x1_0000_0000));
  writeU32(out, o + 4, input.expiresAt % 0x1_0000_0000);
  return out;
}

/** Whether a payload has expired at `nowMs` (§D4.3: expired when now_seconds >= expires_at). */
export function isBootstrapExpired(payload: Pick<BootstrapPayload, "expiresAt">, nowMs: number): boolean {
  return Math.floor(nowMs / 1000) >= payload.expiresAt;
}

function readU32(bytes: Uint8Array, at: number): number {
  return (
    (bytes[at] as number) * 0x100_0000 +
    (((bytes[at + 1] as number) << 16) | ((bytes[at + 2] as number) << 8) | (bytes[at + 3] as number))
  );
}

function writeU32(bytes: Uint8Array, at: number, value: number): void {
  bytes[at] = (value >>> 24) & 255;
  bytes[at + 1] = (value >>> 16) & 255;
  bytes[at + 2] = (value >>> 8) & 255;
  bytes[at + 3] = value & 255;
}
