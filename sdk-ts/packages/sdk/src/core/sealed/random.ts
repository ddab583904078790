// Where a sealed connection's ephemeral keys come from (PROTOCOL.md "Randomness"):
// `crypto.getRandomValues` when the runtime has it ("csprng"); otherwise an HMAC-DRBG
// (SHA-256, NIST SP 800-90A rev. 1, §10.1.2) seeded with a secret the daemon delivered (the
// link's claim token, then each resume token) and local timing samples, reseeded with each new
// token ("drbg"). Never `Math.random` alone: it is mixed in as additional input only.

import { hmac } from "@noble/hashes/hmac";
import { sha256 } from "@noble/hashes/sha256";

export type RngSource = "csprng" | "drbg";

const OUTLEN = 32;
/** SP 800-90A Table 2: at most 2^48 requests between reseeds; far beyond any session. */
const RESEED_INTERVAL = 2 ** 48;
/** SP 800-90A Table 2: at most 2^19 bits (65,536 bytes) per request. */
const MAX_REQUEST_BYTES = 65_536;

function concat(parts: Uint8Array[]): Uint8Array {
  let length = 0;
  for (const part of parts) length += part.length;
  const out = new Uint8Array(length);
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}

/** HMAC_DRBG with SHA-256, without prediction resistance (SP 800-90A §10.1.2). */
export class HmacDrbg {
  private k: Uint8Array = new Uint8Array(OUTLEN);
  private v: Uint8Array = new Uint8Array(OUTLEN).fill(1);
  private reseedCounter = 1;

  /** Instantiate: entropy input, nonce and personalization string are concatenated. */
  constructor(entropy: Uint8Array, nonce: Uint8Array = new Uint8Array(0), personalization: Uint8Array = new Uint8Array(0)) {
    this.update(concat([entropy, nonce, personalization]));
  }

  private update(provided: Uint8Array): void {
    this.k = hmac(sha256, this.k, concat([this.v, Uint8Array.of(0), provided]));
    this.v = hmac(sha256, this.k, this.v);
    if (provided.length === 0) return;
    this.k = hmac(sha256, this.k, concat([this.v, Uint8Array.of(1), provided]));
    this.v = hmac(sha256, this.k, this.v);
  }

  reseed(entropy: Uint8Array, additional: Uint8Array = new Uint8Array(0)): void {
    this.update(concat([entropy, additional]));
    this.reseedCounter = 1;
  }

  generate(length: number, additional: Uint8Array = new Uint8Array(0)): Uint8Array {
    if (!Number.isInteger(length) || length < 0 || length > MAX_REQUEST_BYTES) throw new RangeError("HMAC_DRBG: request of a wrong size");
    if (this.reseedCounter > RESEED_INTERVAL) throw new Error("HMAC_DRBG: reseed required");
    if (additional.length > 0) this.update(additional);
    const out = new Uint8Array(length);
    let at = 0;
    while (at < length) {
      this.v = hmac(sha256, this.k, this.v);
      const take = Math.min(OUTLEN, length - at);
      out.set(this.v.subarray(0, take), at);
      at += take;
    }
    this.update(additional);
    this.reseedCounter += 1;
    return out;
  }
}

interface CryptoLike {
  getRandomValues<T extends ArrayBufferView | null>(array: T): T;
}

/** The runtime's CSPRNG, read when used (a polyfill may be installed after this module loads). */
function runtimeCrypto(): CryptoLike | null {
  const c = (globalThis as { crypto?: { getRandomValues?: unknown } }).crypto;
  return c && typeof c.getRandomValues === "function" ? (c as CryptoLike) : null;
}

export interface TimingSources {
  /** Millisecond wall clock; default `Date.now`. */
  now?: () => number;
  /** Sub-millisecond clock when the runtime has one; default `performance.now`. */
  hrNow?: () => number;
  /** Mixed in as additional input only; default `Math.random`. */
  weak?: () => number;
}

function pushFloat(out: number[], value: number): void {
  // Eight bytes of the float's integer and fraction parts, without DataView.
  let int = Math.floor(Math.abs(value));
  let frac = Math.abs(value) - int;
  for (let i = 0; i < 4; i++) {
    out.push(int & 255);
    int = Math.floor(int / 256);
    frac *= 256;
    out.push(Math.floor(frac) & 255);
    frac -= Math.floor(frac);
  }
}

/**
 * Local timing samples: for each of `samples` rounds, how many loop iterations pass before the
 * clock moves, and the clock readings themselves. Bounded by `maxMs` of wall time.
 */
export function collectTimingEntropy(sources: TimingSources = {}, samples = 16, maxMs = 12): Uint8Array {
  const now = sources.now ?? (() => Date.now());
  const perf = (globalThis as { performance?: { now?: () => number } }).performance;
  const hrNow = sources.hrNow ?? (perf && typeof perf.now === "function" ? () => (perf.now as () => number)() : null);
  const out: number[] = [];
  const start = now();
  pushFloat(out, start);
  for (let s = 0; s < samples; s++) {
    const t0 = hrNow ? hrNow() : now();
    let spins = 0;
    let t = t0;
    while (t === t0 && spins < 1_000_000) {
      spins += 1;
      t = hrNow ? hrNow() : now();
    }
    pushFloat(out, t);
    pushFloat(out, spins);
    if (now() - start > maxMs) break;
  }
  return Uint8Array.from(out);
}

/** Random bytes for ephemeral keys, and the name of their source for the handshake payload. */
export interface SealedRandom {
  /** `csprng` when the runtime has `crypto.getRandomValues` now, else `drbg`. */
  source(): RngSource;
  /** Mixes a secret from the daemon (a claim or resume token) into the DRBG, with fresh timing samples. */
  reseed(secret: Uint8Array): void;
  /** Throws when there is no CSPRNG and no secret was ever mixed in. */
  bytes(n: number): Uint8Array;
}

export interface SealedRandomOptions extends TimingSources {
  /** Tests: force the DRBG even where the runtime has a CSPRNG. */
  forceDrbg?: boolean;
}

export function createSealedRandom(options: SealedRandomOptions = {}): SealedRandom {
  let drbg: HmacDrbg | null = null;
  const weak = options.weak ?? Math.random;
  const weakInput = (): Uint8Array => {
    const out: number[] = [];
    pushFloat(out, weak());
    pushFloat(out, (options.now ?? Date.now)());
    return Uint8Array.from(out);
  };
  const csprng = (): CryptoLike | null => (options.forceDrbg ? null : runtimeCrypto());
  return {
    source: () => (csprng() ? "csprng" : "drbg"),
    reseed(secret) {
      const entropy = concat([secret, collectTimingEntropy(options)]);
      if (drbg === null) drbg = new HmacDrbg(entropy, weakInput(), Uint8Array.from([0x61, 0x70, 0x70, 0x64, 0x75, 0x63, 0x74])); // "appduct"
      else drbg.reseed(entropy, weakInput());
    },
    bytes(n) {
      const c = csprng();
      if (c) return c.getRandomValues(new Uint8Array(n));
      if (drbg === null) throw new Error("appduct: no CSPRNG and the DRBG was never seeded with a secret");
      return drbg.generate(n, collectTimingEntropy(options, 2, 2));
    },
  };
}
