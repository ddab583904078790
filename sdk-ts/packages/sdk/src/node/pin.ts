// SPKI pins on Node (§D3.3): `sha256/` + base64(SHA-256(SubjectPublicKeyInfo DER)).

import { createHash, timingSafeEqual, X509Certificate, type KeyObject } from "node:crypto";

import { isValidPin } from "../core/link.js";

const PREFIX = "sha256/";

/** The pin of a DER SubjectPublicKeyInfo. */
export function pinFromSpkiDer(spkiDer: Uint8Array): string {
  return PREFIX + createHash("sha256").update(spkiDer).digest("base64");
}

/** The pin of a public key. */
export function pinFromPublicKey(key: KeyObject): string {
  return pinFromSpkiDer(key.export({ type: "spki", format: "der" }));
}

/** The pin of the SubjectPublicKeyInfo inside a DER X.509 certificate; throws on invalid DER. */
export function pinFromCertificateDer(der: Uint8Array): string {
  return pinFromPublicKey(new X509Certificate(der).publicKey);
}

/** Whether `pin` equals one of `trusted`, compared in constant time per candidate. */
export function pinMatches(pin: string, trusted: readonly string[]): boolean {
  if (!isValidPin(pin)) return false;
  const presented = Buffer.from(pin, "utf8");
  let matched = false;
  for (const candidate of trusted) {
    const expected = Buffer.from(candidate, "utf8");
    // Every valid pin has the same length, so only malformed candidates skip the comparison.
    if (expected.length === presented.length && timingSafeEqual(expected, presented)) matched = true;
  }
  return matched;
}
