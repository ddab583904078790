// Protocol codecs beyond the shared vectors: base64url strictness, the bootstrap worked example
// and encoder refusals, IPv6 text, links, pins, text measures and frame encoding.

import { generateKeyPairSync } from "node:crypto";

import { describe, expect, it } from "vitest";

import { decodeBase64urlStrict, encodeBase64, encodeBase64url } from "../src/core/base64.js";
import { BootstrapEncodeError, decodeBootstrapPayload, encodeBootstrapPayload, isBootstrapExpired } from "../src/core/bootstrap.js";
import { isTerminalCloseCode } from "../src/core/close.js";
import { validateEventDescriptor, validateToolDescriptor } from "../src/core/descriptors.js";
import { encodeFrame, fitsFrameLimit } from "../src/core/frame.js";
import { formatIpv6, isPrivateLanAddress, parseIpv6 } from "../src/core/ip.js";
import { hasAppductParameter, isValidPin, parseLink, removeAppductFromFragment, trimLink } from "../src/core/link.js";
import { isWireInteger, truncateUtf16, utf8ByteLength } from "../src/core/text.js";
import { decodeUtf8Strict, encodeUtf8 } from "../src/core/utf8.js";
import { pinFromCertificateDer, pinFromPublicKey, pinMatches } from "../src/node/pin.js";

const WORKED_EXAMPLE = "AgTAqDIMIPsQUW05dmRITjBjbUZ3U1dReAABAgMEBQYHCAkKCwwNDg8QERITFBUWFxgZGhscHR4fAAAAAGksDEA";
const WORKED_TOKEN = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8";
const WEB_PAYLOAD = "AgR_AAAByCIQUW05dmRITjBjbUZ3U1dReAABAgMEBQYHCAkKCwwNDg8QERITFBUWFxgZGhscHR4fAAAAAGksDEA";
const PIN = "sha256/+RAVLIC+EO4igKBMsBHOkTG5k0CK2xnPR/FJXDMbzbw=";
const token32 = Uint8Array.from({ length: 32 }, (_, i) => i);

describe("base64url", () => {
  it("round-trips bytes of every length remainder", () => {
    for (const length of [0, 1, 2, 3, 4, 5, 31, 32, 33]) {
      const bytes = Uint8Array.from({ length }, (_, i) => (i * 37 + 11) & 255);
      const text = encodeBase64url(bytes);
      expect(text).toBe(Buffer.from(bytes).toString("base64url"));
      expect(decodeBase64urlStrict(text)).toEqual(bytes);
    }
  });

  it("rejects padding, foreign characters, a length of 1 mod 4 and non-canonical trailing bits", () => {
    expect(decodeBase64urlStrict("Ag==")).toBeNull();
    expect(decodeBase64urlStrict("A+g")).toBeNull();
    expect(decodeBase64urlStrict("A/g")).toBeNull();
    expect(decodeBase64urlStrict("A g")).toBeNull();
    expect(decodeBase64urlStrict("AgTAq")).toBeNull();
    expect(decodeBase64urlStrict("Ah")).toBeNull(); // "Ag" is the canonical form of 0x02
    expect(decodeBase64urlStrict("AgR")).toBeNull(); // "AgQ" is canonical
    expect(decodeBase64urlStrict("Ag")).toEqual(Uint8Array.of(2));
  });

  it("encodes standard base64 with padding", () => {
    expect(encodeBase64(Uint8Array.of(0xfb, 0xff))).toBe("+/8=");
  });
});

describe("bootstrap payload", () => {
  it("decodes and re-encodes the worked example of §D4.4", () => {
    const decoded = decodeBootstrapPayload(WORKED_EXAMPLE);
    expect(decoded).toEqual({
      family: 4,
      address: "192.168.50.12",
      port: 8443,
      sessionId: "Qm9vdHN0cmFwSWQx",
      tokenBase64url: WORKED_TOKEN,
      expiresAt: 1764494400,
    });
    expect(encodeBootstrapPayload({ address: "192.168.50.12", port: 8443, sessionId: "Qm9vdHN0cmFwSWQx", token: token32, expiresAt: 1764494400 })).toBe(
      WORKED_EXAMPLE,
    );
  });

  it("decodes the web link example to 127.0.0.1 and the web port", () => {
    expect(decodeBootstrapPayload(WEB_PAYLOAD)).toMatchObject({ family: 4, address: "127.0.0.1", port: 51234 });
  });

  it("encodes an IPv4-mapped IPv6 address as family 4", () => {
    const text = encodeBootstrapPayload({ family: 6, address: "::ffff:192.168.50.12", port: 8443, sessionId: "Qm9vdHN0cmFwSWQx", tokenBase64url: WORKED_TOKEN, expiresAt: 1764494400 });
    expect(text).toBe(WORKED_EXAMPLE);
  });

  it("decodes a family-6 payload carrying a mapped address, which re-encodes as family 4", () => {
    const bytes = Buffer.from(WORKED_EXAMPLE, "base64url");
    const v6 = Buffer.concat([Buffer.of(2, 6), Buffer.alloc(10), Buffer.of(0xff, 0xff), bytes.subarray(2)]);
    const decoded = decodeBootstrapPayload(v6.toString("base64url"));
    expect(decoded).toMatchObject({ family: 6, address: "::ffff:c0a8:320c" });
    expect(decodeBootstrapPayload(encodeBootstrapPayload(decoded!))?.family).toBe(4);
  });

  it("refuses an expires_at above 2^53 − 1 and accepts exactly 2^53 − 1", () => {
    const bytes = Buffer.from(WORKED_EXAMPLE, "base64url");
    const max = Buffer.from(bytes);
    max.writeBigUInt64BE(2n ** 53n - 1n, max.length - 8);
    expect(decodeBootstrapPayload(max.toString("base64url"))?.expiresAt).toBe(Number.MAX_SAFE_INTEGER);
    const over = Buffer.from(bytes);
    over.writeBigUInt64BE(2n ** 53n, over.length - 8);
    expect(decodeBootstrapPayload(over.toString("base64url"))).toBeNull();
  });

  it("refuses a padded or non-canonical text form of a valid payload", () => {
    expect(decodeBootstrapPayload(`${WORKED_EXAMPLE}=`)).toBeNull();
    expect(decodeBootstrapPayload(WORKED_EXAMPLE.replace(/A$/, "B"))).toBeNull();
    expect(decodeBootstrapPayload("")).toBeNull();
  });

  it("refuses to encode port 0, an empty or 256-byte session id, a short token or a non-IP address", () => {
    const base = { address: "10.0.0.1", port: 1, sessionId: "a", token: token32, expiresAt: 1 };
    expect(encodeBootstrapPayload(base)).toBe("AgQKAAABAAEBYQABAgMEBQYHCAkKCwwNDg8QERITFBUWFxgZGhscHR4fAAAAAAAAAAE");
    expect(() => encodeBootstrapPayload({ ...base, port: 0 })).toThrow(BootstrapEncodeError);
    expect(() => encodeBootstrapPayload({ ...base, sessionId: "" })).toThrow(/session id/);
    expect(() => encodeBootstrapPayload({ ...base, sessionId: "é".repeat(128) })).toThrow(/session id/);
    expect(encodeBootstrapPayload({ ...base, sessionId: "s".repeat(255) })).toBeTypeOf("string");
    expect(() => encodeBootstrapPayload({ ...base, token: token32.subarray(0, 31) })).toThrow(/32 bytes/);
    expect(() => encodeBootstrapPayload({ ...base, address: "example.com" })).toThrow(/IP literal/);
  });

  it("is expired when now_seconds >= expires_at", () => {
    expect(isBootstrapExpired({ expiresAt: 100 }, 99_999)).toBe(false);
    expect(isBootstrapExpired({ expiresAt: 100 }, 100_000)).toBe(true);
  });
});

describe("IPv6 text and the LAN allow-list", () => {
  it("formats RFC 5952 canonical text", () => {
    const text = (s: string): string => formatIpv6(parseIpv6(s)!);
    expect(text("fd00:0:0:0:0:0:0:1")).toBe("fd00::1");
    expect(text("0:0:0:0:0:0:0:1")).toBe("::1");
    expect(text("1:0:0:0:0:0:0:0")).toBe("1::");
    expect(text("2001:DB8:0:0:1:0:0:1")).toBe("2001:db8::1:0:0:1");
    expect(text("1:0:2:3:4:5:6:7")).toBe("1:0:2:3:4:5:6:7");
    expect(text("::")).toBe("::");
  });

  it("rejects malformed IPv6 text", () => {
    for (const bad of ["1::2::3", "1:2:3:4:5:6:7:8:9", "g::1", "12345::", ""]) {
      expect(parseIpv6(bad)).toBeNull();
    }
  });

  it("allows RFC 1918 IPv4 and exactly 127.0.0.1", () => {
    for (const ok of ["10.1.2.3", "172.16.0.1", "172.31.255.255", "192.168.50.12", "127.0.0.1"]) {
      expect(isPrivateLanAddress(ok)).toBe(true);
    }
    for (const bad of ["8.8.8.8", "172.32.0.1", "172.15.0.1", "127.0.0.2", "fd00::1", "::1", "192.169.0.1"]) {
      expect(isPrivateLanAddress(bad)).toBe(false);
    }
  });
});

describe("links", () => {
  it("parses a native deep link with a percent-encoded pin containing '+'", () => {
    const parsed = parseLink(`shopdemo:///?appduct=${WORKED_EXAMPLE}&pin=${encodeURIComponent(PIN)}`);
    expect(parsed).toMatchObject({ ok: true, link: { payloadText: WORKED_EXAMPLE, pin: PIN, form: "query" } });
  });

  it("keeps a raw '+' in a pin (never a space)", () => {
    const parsed = parseLink(`shopdemo:///?appduct=${WORKED_EXAMPLE}&pin=${PIN}`);
    expect(parsed.ok && parsed.link.pin).toBe(PIN);
  });

  it("parses a page URL carrying #appduct= and a bare payload", () => {
    expect(parseLink(`http://localhost:5173/cart#appduct=${WEB_PAYLOAD}`)).toMatchObject({ ok: true, link: { form: "fragment", pin: null } });
    expect(parseLink(`http://localhost:5173/cart?x=1#tab=2&appduct=${WEB_PAYLOAD}`)).toMatchObject({ ok: true, link: { payloadText: WEB_PAYLOAD } });
    expect(parseLink(WEB_PAYLOAD)).toMatchObject({ ok: true, link: { form: "bare", pin: null } });
  });

  it("reports missing_payload, invalid_url and invalid_payload", () => {
    expect(parseLink("myapp:///?pin=x")).toEqual({ ok: false, code: "missing_payload" });
    expect(parseLink(`myapp:///?appduct=${WORKED_EXAMPLE}&appduct=${WORKED_EXAMPLE}`)).toEqual({ ok: false, code: "invalid_url" });
    expect(parseLink(`myapp:///?appduct=${WORKED_EXAMPLE}&pin=${PIN}&pin=${PIN}`)).toEqual({ ok: false, code: "invalid_url" });
    expect(parseLink(`myapp:///?appduct=${WORKED_EXAMPLE}#appduct=${WEB_PAYLOAD}`)).toEqual({ ok: false, code: "invalid_url" });
    expect(parseLink("not a url")).toEqual({ ok: false, code: "invalid_url" });
    expect(parseLink("myapp:///?appduct=%E0%A4%A")).toEqual({ ok: false, code: "invalid_url" });
    expect(parseLink(42)).toEqual({ ok: false, code: "invalid_url" });
    expect(parseLink("myapp:///?appduct=AAAA")).toEqual({ ok: false, code: "invalid_payload" });
    expect(parseLink("myapp:///?appduct=")).toEqual({ ok: false, code: "invalid_payload" });
    expect(parseLink("AAAA")).toEqual({ ok: false, code: "invalid_payload" });
  });

  // The same decisions as the Rust `link::parse_connect_input` (PROTOCOL.md, links); its tests
  // use the same cases.
  describe("rules shared with the Rust parser", () => {
    const EXAMPLE_LINK = `shopdemo:///?appduct=${WORKED_EXAMPLE}&pin=${encodeURIComponent(PIN)}`;

    it("trims ASCII whitespace around a link, and only that", () => {
      const padded = ` \t${EXAMPLE_LINK}\r\n\f `;
      expect(parseLink(padded)).toMatchObject({ ok: true, link: { payloadText: WORKED_EXAMPLE, pin: PIN } });
      expect(hasAppductParameter(padded)).toBe(true);
      expect(parseLink(`\nhttp://localhost:5173/#appduct=${WEB_PAYLOAD}\n`)).toMatchObject({ ok: true, link: { form: "fragment" } });
      expect(parseLink(`  ${WORKED_EXAMPLE}\n`)).toMatchObject({ ok: true, link: { form: "bare", payloadText: WORKED_EXAMPLE } });
      expect(trimLink("\t a b \n")).toBe("a b");
      for (const padded of [`\u00a0${EXAMPLE_LINK}`, `${EXAMPLE_LINK}\u2028`, `${EXAMPLE_LINK}\u000b`, `\ufeff${WORKED_EXAMPLE}`]) {
        expect(parseLink(padded)).toEqual({ ok: false, code: "invalid_url" });
        expect(hasAppductParameter(padded)).toBe(false);
      }
    });

    it("refuses whitespace or control characters inside a link", () => {
      expect(parseLink(`myapp:///?appduct=${WORKED_EXAMPLE}&x=a b`)).toEqual({ ok: false, code: "invalid_url" });
      expect(parseLink(`myapp:///?appduct=${WORKED_EXAMPLE}&x=a\u0007`)).toEqual({ ok: false, code: "invalid_url" });
      expect(hasAppductParameter("myapp:///?appduct=x y")).toBe(false);
    });

    it("reads text without a scheme as a bare payload only when it is base64url-shaped", () => {
      expect(parseLink("AAAA")).toEqual({ ok: false, code: "invalid_payload" });
      for (const input of ["not a payload", "", "   ", "AgT+AA", "a/b", "%41"]) {
        expect(parseLink(input)).toEqual({ ok: false, code: "invalid_url" });
      }
    });

    it("treats a payload in both the query and the fragment as ambiguous", () => {
      expect(parseLink(`myapp:///?appduct=${WORKED_EXAMPLE}#appduct=${WEB_PAYLOAD}`)).toEqual({ ok: false, code: "invalid_url" });
      expect(parseLink(`http://localhost/?appduct=x#appduct=${WEB_PAYLOAD}`)).toEqual({ ok: false, code: "invalid_url" });
      expect(parseLink(`http://localhost/?tab=2&pin=x#appduct=${WEB_PAYLOAD}`)).toMatchObject({ ok: true, link: { payloadText: WEB_PAYLOAD, pin: null } });
    });

    it("reads the query and the fragment under the same rules wherever the payload is", () => {
      for (const url of [
        `myapp:///?appduct=${WORKED_EXAMPLE}#x=%zz`,
        `myapp:///?appduct=${WORKED_EXAMPLE}#pin=a&pin=b`,
        `http://localhost/?x=%zz#appduct=${WEB_PAYLOAD}`,
        `http://localhost/?pin=a&pin=b#appduct=${WEB_PAYLOAD}`,
      ]) {
        expect(parseLink(url)).toEqual({ ok: false, code: "invalid_url" });
      }
      // The pin comes from the component that carries the payload.
      expect(parseLink(`myapp:///?appduct=${WORKED_EXAMPLE}#pin=${encodeURIComponent(PIN)}`)).toMatchObject({ ok: true, link: { pin: null } });
    });
  });

  it("does not check expiry while parsing", () => {
    const expired = encodeBootstrapPayload({ address: "10.0.0.1", port: 1, sessionId: "a", token: token32, expiresAt: 1 });
    expect(parseLink(`myapp:///?appduct=${expired}`).ok).toBe(true);
  });

  it("detects an appduct parameter in a query or fragment only", () => {
    expect(hasAppductParameter(`myapp:///?appduct=bad`)).toBe(true);
    expect(hasAppductParameter(`http://x/#appduct=${WEB_PAYLOAD}`)).toBe(true);
    expect(hasAppductParameter("myapp:///?appductx=1&pin=2")).toBe(false);
    expect(hasAppductParameter(WEB_PAYLOAD)).toBe(false);
    expect(hasAppductParameter(null)).toBe(false);
  });

  it("removes appduct from a fragment and keeps the other parameters", () => {
    expect(removeAppductFromFragment(`#tab=2&appduct=${WEB_PAYLOAD}&x=1`)).toBe("tab=2&x=1");
    expect(removeAppductFromFragment(`appduct=${WEB_PAYLOAD}`)).toBe("");
    expect(removeAppductFromFragment("")).toBe("");
  });
});

describe("pins", () => {
  it("checks the text form", () => {
    expect(isValidPin(PIN)).toBe(true);
    expect(isValidPin(PIN.slice(0, -1))).toBe(false);
    expect(isValidPin(`${PIN}\n`)).toBe(false);
    expect(isValidPin(PIN.replace("sha256/", "sha1/"))).toBe(false);
    expect(isValidPin(undefined)).toBe(false);
  });

  it("computes the same pin from a key and compares pins", () => {
    const { publicKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
    const pin = pinFromPublicKey(publicKey);
    expect(isValidPin(pin)).toBe(true);
    expect(pinMatches(pin, [PIN, pin])).toBe(true);
    expect(pinMatches(pin, [PIN])).toBe(false);
    expect(pinMatches("garbage", ["garbage"])).toBe(false);
  });

  it("throws on bytes that are not a certificate", () => {
    expect(() => pinFromCertificateDer(Uint8Array.of(1, 2, 3))).toThrow();
  });
});

describe("text measures", () => {
  it("counts UTF-8 bytes as Buffer does", () => {
    for (const s of ["", "a", "é", "€", "😀", "a😀é€", "\u0000\u007f\u0080\u07ff\u0800\uffff"]) {
      expect(utf8ByteLength(s)).toBe(Buffer.byteLength(s, "utf8"));
    }
    expect(utf8ByteLength("\ud800")).toBe(3);
  });

  it("cuts UTF-16 text without splitting a surrogate pair", () => {
    expect(truncateUtf16("abc", 5)).toBe("abc");
    expect(truncateUtf16("abcdef", 3)).toBe("abc");
    expect(truncateUtf16("ab😀", 3)).toBe("ab");
    expect(truncateUtf16("ab😀", 4)).toBe("ab😀");
  });

  it("round-trips UTF-8 and refuses malformed sequences", () => {
    const s = "sesión-héllo-日本語😀";
    expect(encodeUtf8(s)).toEqual(new Uint8Array(Buffer.from(s, "utf8")));
    expect(decodeUtf8Strict(encodeUtf8(s))).toBe(s);
    for (const bad of [[0xff], [0xc0, 0x80], [0xe0, 0x80, 0x80], [0xed, 0xa0, 0x80], [0xf4, 0x90, 0x80, 0x80], [0xe3, 0x81]]) {
      expect(decodeUtf8Strict(Uint8Array.from(bad))).toBeNull();
    }
  });

  it("reads wire integers", () => {
    expect(isWireInteger(5e3)).toBe(true);
    expect(isWireInteger(1.5)).toBe(false);
    expect(isWireInteger(2 ** 53)).toBe(false);
    expect(isWireInteger("1")).toBe(false);
  });
});

describe("frames and close codes", () => {
  it("measures, refuses oversized and unserializable frames", () => {
    expect(encodeFrame({ type: "event", name: "é" })).toEqual({ ok: true, text: '{"type":"event","name":"é"}', bytes: 28 });
    const big = encodeFrame({ payload: "a".repeat(262_144) });
    expect(big).toEqual({ ok: false, reason: "too_large", bytes: 262_144 + 14 });
    expect(encodeFrame({ payload: 1n })).toEqual({ ok: false, reason: "not_serializable" });
    expect(fitsFrameLimit("a".repeat(262_144))).toBe(true);
    expect(fitsFrameLimit("a".repeat(262_145))).toBe(false);
  });

  it("treats only 1008 as terminal", () => {
    expect(isTerminalCloseCode(1008)).toBe(true);
    for (const code of [1000, 1001, 1006, 1009, 1011, 4000, null, undefined]) {
      expect(isTerminalCloseCode(code)).toBe(false);
    }
  });

  it("names the offending field of an invalid descriptor", () => {
    expect(validateToolDescriptor({ name: "t", description: "d", group: "a/b/c" })).toEqual({ valid: false, field: "group", rule: expect.any(String) });
    expect(validateToolDescriptor({ name: "t", description: "d", timeout_ms: 5e3 })).toEqual({ valid: true });
    expect(validateEventDescriptor({ name: "😀".repeat(2048), description: "d" })).toEqual({ valid: true });
    expect(validateEventDescriptor({ name: `${"😀".repeat(2048)}a`, description: "d" })).toMatchObject({ valid: false, field: "name" });
  });
});
