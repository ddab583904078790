// Link parsing (§D5.3, §D5.2): deep links `<scheme>:///?appduct=<payload>[&pin=<pin>]`, page
// URLs carrying `#appduct=<payload>`, and bare payloads.

import { decodeAnyBootstrapPayload, decodeBootstrapPayload, type BootstrapPayload } from "./bootstrap.js";

const PIN_PATTERN = /^sha256\/[A-Za-z0-9+/]{43}=$/;
const SCHEME_PATTERN = /^[A-Za-z][A-Za-z0-9+.-]*:/;
const BARE_PAYLOAD_PATTERN = /^[A-Za-z0-9_-]+$/;
/** ASCII whitespace (tab, line feed, form feed, carriage return, space) around a link. */
const SURROUNDING_ASCII_WHITESPACE = /^[\t\n\f\r ]+|[\t\n\f\r ]+$/g;
/**
 * A White_Space or Cc character anywhere: no link contains one. Spelled out instead of
 * `\p{...}` so every JavaScript engine the SDK runs on reads it the same.
 */
const WHITESPACE_OR_CONTROL = /[\u0000-\u0020\u007F-\u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]/;

/**
 * The link without the ASCII whitespace around it (project decision, shared with the Rust
 * parser): links pasted from terminals and chat often carry a trailing newline. Other
 * whitespace, and whitespace inside a link, still make it `invalid_url`.
 */
export function trimLink(input: string): string {
  return input.replace(SURROUNDING_ASCII_WHITESPACE, "");
}

/** A scheme followed by `:`, and no whitespace or control character anywhere. */
function isUrlShaped(text: string): boolean {
  return SCHEME_PATTERN.test(text) && !WHITESPACE_OR_CONTROL.test(text);
}

/** Whether `pin` has the SPKI pin text form `^sha256/[A-Za-z0-9+/]{43}=$` (§D3.3). */
export function isValidPin(pin: unknown): pin is string {
  return typeof pin === "string" && PIN_PATTERN.test(pin);
}

export type LinkErrorCode = "invalid_url" | "missing_payload" | "invalid_payload";

export interface ParsedLink {
  /** The `appduct` value exactly as carried (base64url text). */
  payloadText: string;
  payload: BootstrapPayload;
  /** The decoded `pin`, or `null` when absent or malformed (never forwarded then). */
  pin: string | null;
  /** Where the payload came from. */
  form: "query" | "fragment" | "bare";
  /**
   * Sealed links only (payload version `0x03`, read when `parseLink` is asked to): the daemon's
   * X25519 static public key. A `pin` parameter on a sealed link is ignored (`pin` is `null`).
   */
  staticKey?: Uint8Array;
}

export interface ParseLinkOptions {
  /**
   * Also accept sealed payloads (version `0x03`, PROTOCOL.md "Sealed link"). Default `false`:
   * the v2 rules, under which a sealed payload is `invalid_payload`.
   */
  sealed?: boolean;
}

/** The payload of a link: v2 only, or either version when sealed links are accepted. */
function decodePayload(text: string, options: ParseLinkOptions | undefined): { payload: BootstrapPayload; staticKey?: Uint8Array } | null {
  if (!options?.sealed) {
    const payload = decodeBootstrapPayload(text);
    return payload ? { payload } : null;
  }
  const any = decodeAnyBootstrapPayload(text);
  if (!any) return null;
  if (!any.sealed) return { payload: any.payload };
  const { staticKey, ...payload } = any.payload;
  return { payload, staticKey };
}

export type LinkParseResult = { ok: true; link: ParsedLink } | { ok: false; code: LinkErrorCode };

interface Param {
  name: string;
  value: string;
}

/** Splits `a=b&c=d` into percent-decoded pairs; `+` stays `+` (§D5.3). `null` on bad escapes. */
function parseParams(component: string): Param[] | null {
  if (component === "") {
    return [];
  }
  const out: Param[] = [];
  for (const pair of component.split("&")) {
    const eq = pair.indexOf("=");
    const rawName = eq < 0 ? pair : pair.slice(0, eq);
    const rawValue = eq < 0 ? "" : pair.slice(eq + 1);
    try {
      out.push({ name: decodeURIComponent(rawName), value: decodeURIComponent(rawValue) });
    } catch {
      return null;
    }
  }
  return out;
}

interface UrlParts {
  query: string | null;
  fragment: string | null;
}

/** Query (after the first `?`, up to the first `#`) and fragment (after the first `#`). */
function splitUrl(url: string): UrlParts {
  const hash = url.indexOf("#");
  const beforeHash = hash < 0 ? url : url.slice(0, hash);
  const question = beforeHash.indexOf("?");
  return {
    query: question < 0 ? null : beforeHash.slice(question + 1),
    fragment: hash < 0 ? null : url.slice(hash + 1),
  };
}

/**
 * Parses a deep link, a page URL with an `appduct` fragment, or a bare base64url payload.
 *
 * Same answer as the Rust `link::parse_connect_input` for every input (project decisions):
 * surrounding ASCII whitespace is trimmed; text without a scheme is a bare payload when it is
 * base64url-shaped, else `invalid_url`; a URL with whitespace or a control character inside is
 * `invalid_url`; the query and the fragment are read under the same rules (a bad percent escape,
 * a repeated `appduct` or a repeated `pin` in either is `invalid_url`); and a payload in both
 * the query and the fragment is ambiguous, so `invalid_url`.
 */
export function parseLink(input: unknown, options?: ParseLinkOptions): LinkParseResult {
  if (typeof input !== "string") {
    return { ok: false, code: "invalid_url" };
  }
  const text = trimLink(input);
  if (BARE_PAYLOAD_PATTERN.test(text)) {
    const decoded = decodePayload(text, options);
    return decoded ? { ok: true, link: { payloadText: text, pin: null, form: "bare", ...decoded } } : { ok: false, code: "invalid_payload" };
  }
  if (!isUrlShaped(text)) {
    return { ok: false, code: "invalid_url" };
  }
  const { query, fragment } = splitUrl(text);
  const queryParams = query === null ? [] : parseParams(query);
  const fragmentParams = fragment === null ? [] : parseParams(fragment);
  if (!queryParams || !fragmentParams) {
    return { ok: false, code: "invalid_url" };
  }
  const count = (params: Param[], name: string) => params.filter((p) => p.name === name).length;
  if ([queryParams, fragmentParams].some((params) => count(params, "appduct") > 1 || count(params, "pin") > 1)) {
    return { ok: false, code: "invalid_url" };
  }
  const inQuery = queryParams.filter((p) => p.name === "appduct");
  const inFragment = fragmentParams.filter((p) => p.name === "appduct");
  if (inQuery.length + inFragment.length === 0) {
    return { ok: false, code: "missing_payload" };
  }
  if (inQuery.length + inFragment.length > 1) {
    return { ok: false, code: "invalid_url" };
  }
  const form = inQuery.length === 1 ? "query" : "fragment";
  const params = form === "query" ? queryParams : fragmentParams;
  const pins = params.filter((p) => p.name === "pin");
  const payloadText = ((form === "query" ? inQuery[0] : inFragment[0]) as Param).value;
  const decoded = decodePayload(payloadText, options);
  if (!decoded) {
    return { ok: false, code: "invalid_payload" };
  }
  const rawPin = pins[0]?.value;
  const pin = decoded.staticKey === undefined && isValidPin(rawPin) ? rawPin : null;
  return { ok: true, link: { payloadText, pin, form, ...decoded } };
}

/** The percent-decoded parameter names of a query or fragment component. */
function parameterNames(component: string | null): string[] {
  if (component === null || component === "") return [];
  return component.split("&").map((pair) => {
    const eq = pair.indexOf("=");
    const raw = eq < 0 ? pair : pair.slice(0, eq);
    try {
      return decodeURIComponent(raw);
    } catch {
      return raw;
    }
  });
}

/** Whether a URL carries an `appduct` parameter in its query or fragment (§D5.3). */
export function hasAppductParameter(url: unknown): boolean {
  if (typeof url !== "string") {
    return false;
  }
  const text = trimLink(url);
  if (!isUrlShaped(text)) {
    return false;
  }
  const { query, fragment } = splitUrl(text);
  return [...parameterNames(query), ...parameterNames(fragment)].includes("appduct");
}

/** Whether a fragment (with or without its `#`) carries an `appduct` parameter. */
export function fragmentHasAppduct(fragment: string): boolean {
  return parameterNames(fragment.replace(/^#/, "")).includes("appduct");
}

/**
 * The fragment without its `appduct` parameter, other parameters kept in order (§T9), as
 * the text after `#` (empty when nothing remains).
 */
export function removeAppductFromFragment(fragment: string): string {
  const text = fragment.replace(/^#/, "");
  if (text === "") {
    return "";
  }
  const names = parameterNames(text);
  return text
    .split("&")
    .filter((_pair, i) => names[i] !== "appduct")
    .join("&");
}
