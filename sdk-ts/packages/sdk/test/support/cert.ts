// A throwaway self-signed EC P-256 certificate built at run time (vectors and the repository
// never hold key material). Minimal DER: a v1 certificate with CN=appduct-test.

import { generateKeyPairSync, sign, type KeyObject } from "node:crypto";

function length(n: number): Buffer {
  if (n < 0x80) return Buffer.of(n);
  const bytes: number[] = [];
  for (let v = n; v > 0; v >>= 8) bytes.unshift(v & 255);
  return Buffer.of(0x80 | bytes.length, ...bytes);
}

function tlv(tag: number, value: Buffer): Buffer {
  return Buffer.concat([Buffer.of(tag), length(value.length), value]);
}

const seq = (...parts: Buffer[]): Buffer => tlv(0x30, Buffer.concat(parts));
const set = (...parts: Buffer[]): Buffer => tlv(0x31, Buffer.concat(parts));

function oid(text: string): Buffer {
  const [a, b, ...rest] = text.split(".").map(Number) as [number, number, ...number[]];
  const out = [40 * a + b];
  for (const n of rest) {
    const chunk: number[] = [n & 0x7f];
    for (let v = n >> 7; v > 0; v >>= 7) chunk.unshift(0x80 | (v & 0x7f));
    out.push(...chunk);
  }
  return tlv(0x06, Buffer.from(out));
}

function utcTime(date: Date): Buffer {
  const text = date.toISOString().replace(/[-:T]/g, "").slice(2, 14) + "Z";
  return tlv(0x17, Buffer.from(text, "ascii"));
}

export interface TestCertificate {
  der: Buffer;
  certPem: string;
  keyPem: string;
  publicKey: KeyObject;
}

export function makeSelfSignedCertificate(commonName = "appduct-test"): TestCertificate {
  const { privateKey, publicKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
  const ecdsaSha256 = seq(oid("1.2.840.10045.4.3.2"));
  const name = seq(set(seq(oid("2.5.4.3"), tlv(0x0c, Buffer.from(commonName, "utf8")))));
  const now = Date.now();
  const tbs = seq(
    tlv(0x02, Buffer.of(0x01)),
    ecdsaSha256,
    name,
    seq(utcTime(new Date(now - 300_000)), utcTime(new Date(now + 86_400_000))),
    name,
    publicKey.export({ type: "spki", format: "der" }),
  );
  const signature = sign("sha256", tbs, privateKey);
  const der = seq(tbs, ecdsaSha256, tlv(0x03, Buffer.concat([Buffer.of(0), signature])));
  const body = der.toString("base64").replace(/(.{64})/g, "$1\n");
  return {
    der,
    certPem: `-----BEGIN CERTIFICATE-----\n${body}\n-----END CERTIFICATE-----\n`.replace("\n\n", "\n"),
    keyPem: privateKey.export({ type: "pkcs8", format: "pem" }) as string,
    publicKey,
  };
}
