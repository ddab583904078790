// Noise_NK_25519_ChaChaPoly_SHA256 (the Noise Protocol Framework, revision 34): CipherState,
// SymmetricState and the NK HandshakeState for both roles, on the audited @noble primitives
// (X25519, ChaCha20-Poly1305, SHA-256, HMAC). JavaScript only: no `crypto`, no TextEncoder, so
// it runs in Hermes. Randomness comes from the caller (see ./random.ts).

import { chacha20poly1305 } from "@noble/ciphers/chacha";
import { x25519 } from "@noble/curves/ed25519";
import { hmac } from "@noble/hashes/hmac";
import { sha256 } from "@noble/hashes/sha256";

import { encodeUtf8 } from "../utf8.js";

export const PROTOCOL_NAME = "Noise_NK_25519_ChaChaPoly_SHA256";
const DHLEN = 32;
const HASHLEN = 32;
const TAGLEN = 16;
/** Noise's bound on any message (§3). */
export const MAX_NOISE_MESSAGE = 65_535;
/** Nonces are kept below 2^53 (a JavaScript integer); a channel never gets near it. */
const MAX_NONCE = Number.MAX_SAFE_INTEGER;

/** A message that fails authentication, or a handshake used out of order. */
export class NoiseError extends Error {
  override name = "NoiseError";
}

export interface KeyPair {
  publicKey: Uint8Array;
  privateKey: Uint8Array;
}

/** Fills `n` bytes; must be a cryptographically secure source. */
export type RandomBytes = (n: number) => Uint8Array;

/** An X25519 key pair from 32 random bytes (clamping is part of X25519). */
export function keyPairFromPrivate(privateKey: Uint8Array): KeyPair {
  if (privateKey.length !== DHLEN) throw new NoiseError("an X25519 private key is 32 bytes");
  return { privateKey: privateKey.slice(), publicKey: x25519.getPublicKey(privateKey) };
}

export function generateKeyPair(random: RandomBytes): KeyPair {
  return keyPairFromPrivate(random(DHLEN));
}

function dh(keyPair: KeyPair, publicKey: Uint8Array): Uint8Array {
  try {
    return x25519.getSharedSecret(keyPair.privateKey, publicKey);
  } catch {
    // A low-order public key gives an all-zero secret, which @noble refuses.
    throw new NoiseError("invalid X25519 public key");
  }
}

function concat(...parts: Uint8Array[]): Uint8Array {
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

/** HKDF as Noise defines it (§4.3), with HMAC-SHA256: two or three 32-byte outputs. */
export function noiseHkdf(chainingKey: Uint8Array, ikm: Uint8Array, outputs: 2 | 3): Uint8Array[] {
  const tempKey = hmac(sha256, chainingKey, ikm);
  const out1 = hmac(sha256, tempKey, Uint8Array.of(1));
  const out2 = hmac(sha256, tempKey, concat(out1, Uint8Array.of(2)));
  if (outputs === 2) return [out1, out2];
  return [out1, out2, hmac(sha256, tempKey, concat(out2, Uint8Array.of(3)))];
}

/** ChaChaPoly's 96-bit nonce: 32 zero bits, then the counter as 64-bit little-endian (§12.3). */
function chachaNonce(n: number): Uint8Array {
  const nonce = new Uint8Array(12);
  let low = n % 0x1_0000_0000;
  let high = Math.floor(n / 0x1_0000_0000);
  for (let i = 0; i < 4; i++) {
    nonce[4 + i] = low & 255;
    low = Math.floor(low / 256);
    nonce[8 + i] = high & 255;
    high = Math.floor(high / 256);
  }
  return nonce;
}

/** §5.1: a key (or none) and the implicit nonce counter. */
export class CipherState {
  private k: Uint8Array | null = null;
  private n = 0;

  initializeKey(key: Uint8Array | null): void {
    this.k = key === null ? null : key.slice();
    this.n = 0;
  }

  hasKey(): boolean {
    return this.k !== null;
  }

  /** The next nonce to be used (tests and diagnostics). */
  get nonce(): number {
    return this.n;
  }

  encryptWithAd(ad: Uint8Array, plaintext: Uint8Array): Uint8Array {
    if (this.k === null) return plaintext.slice();
    if (this.n >= MAX_NONCE) throw new NoiseError("nonce exhausted");
    const out = chacha20poly1305(this.k, chachaNonce(this.n), ad).encrypt(plaintext);
    this.n += 1;
    return out;
  }

  /** Throws `NoiseError` when authentication fails; the nonce then does not advance (§5.1). */
  decryptWithAd(ad: Uint8Array, ciphertext: Uint8Array): Uint8Array {
    if (this.k === null) return ciphertext.slice();
    if (this.n >= MAX_NONCE) throw new NoiseError("nonce exhausted");
    if (ciphertext.length < TAGLEN) throw new NoiseError("ciphertext shorter than its tag");
    let out: Uint8Array;
    try {
      out = chacha20poly1305(this.k, chachaNonce(this.n), ad).decrypt(ciphertext);
    } catch {
      throw new NoiseError("authentication failed");
    }
    this.n += 1;
    return out;
  }
}

/** §5.2: the chaining key, the handshake hash and the CipherState. */
export class SymmetricState {
  private ck: Uint8Array;
  private h: Uint8Array;
  private readonly cipher = new CipherState();

  constructor(protocolName: string) {
    const name = encodeUtf8(protocolName);
    if (name.length <= HASHLEN) {
      this.h = new Uint8Array(HASHLEN);
      this.h.set(name);
    } else {
      this.h = sha256(name);
    }
    this.ck = this.h.slice();
  }

  mixKey(ikm: Uint8Array): void {
    const [ck, tempK] = noiseHkdf(this.ck, ikm, 2) as [Uint8Array, Uint8Array];
    this.ck = ck;
    this.cipher.initializeKey(tempK);
  }

  mixHash(data: Uint8Array): void {
    this.h = sha256(concat(this.h, data));
  }

  get handshakeHash(): Uint8Array {
    return this.h.slice();
  }

  encryptAndHash(plaintext: Uint8Array): Uint8Array {
    const ciphertext = this.cipher.encryptWithAd(this.h, plaintext);
    this.mixHash(ciphertext);
    return ciphertext;
  }

  decryptAndHash(ciphertext: Uint8Array): Uint8Array {
    const plaintext = this.cipher.decryptWithAd(this.h, ciphertext);
    this.mixHash(ciphertext);
    return plaintext;
  }

  split(): [CipherState, CipherState] {
    const [k1, k2] = noiseHkdf(this.ck, new Uint8Array(0), 2) as [Uint8Array, Uint8Array];
    const c1 = new CipherState();
    const c2 = new CipherState();
    c1.initializeKey(k1);
    c2.initializeKey(k2);
    return [c1, c2];
  }
}

export interface TransportCiphers {
  /** Encrypts what this side sends. */
  send: CipherState;
  /** Decrypts what this side receives. */
  receive: CipherState;
  /** The final handshake hash (channel binding). */
  handshakeHash: Uint8Array;
}

export interface NkOptions {
  prologue: Uint8Array;
  /** Where ephemeral keys come from. */
  random: RandomBytes;
  /** Initiator: the responder's static public key (from the link). */
  remoteStatic?: Uint8Array;
  /** Responder: its static key pair. */
  staticKeyPair?: KeyPair;
  /** Tests only: a fixed ephemeral key pair (test vectors). */
  ephemeral?: KeyPair;
}

/**
 * The NK handshake (§7.5): `<- s`, `...`, `-> e, es`, `<- e, ee`. The initiator knows the
 * responder's static key beforehand; neither side has a static key of its own to send.
 */
export class NkHandshake {
  private readonly ss: SymmetricState;
  private readonly s: KeyPair | null;
  private e: KeyPair | null;
  private rs: Uint8Array | null;
  private re: Uint8Array | null = null;
  private step = 0;
  private readonly random: RandomBytes;

  constructor(
    readonly role: "initiator" | "responder",
    options: NkOptions,
  ) {
    this.random = options.random;
    this.ss = new SymmetricState(PROTOCOL_NAME);
    this.ss.mixHash(options.prologue);
    this.e = options.ephemeral ?? null;
    if (role === "initiator") {
      if (!options.remoteStatic || options.remoteStatic.length !== DHLEN) throw new NoiseError("NK: the initiator needs the responder's 32-byte static key");
      this.s = null;
      this.rs = options.remoteStatic.slice();
      this.ss.mixHash(this.rs);
    } else {
      if (!options.staticKeyPair) throw new NoiseError("NK: the responder needs its static key pair");
      this.s = options.staticKeyPair;
      this.rs = null;
      this.ss.mixHash(this.s.publicKey);
    }
  }

  /** Whether both messages have been processed. */
  get isComplete(): boolean {
    return this.step === 2;
  }

  get handshakeHash(): Uint8Array {
    return this.ss.handshakeHash;
  }

  private ephemeral(): KeyPair {
    if (this.e === null) this.e = generateKeyPair(this.random);
    return this.e;
  }

  /** Writes the next message of this side: message 1 for the initiator, message 2 for the responder. */
  writeMessage(payload: Uint8Array): Uint8Array {
    const expected = this.role === "initiator" ? 0 : 1;
    if (this.step !== expected) throw new NoiseError("NK: not this side's turn to write");
    const e = this.ephemeral();
    this.ss.mixHash(e.publicKey);
    if (this.role === "initiator") {
      this.ss.mixKey(dh(e, this.rs as Uint8Array)); // es
    } else {
      this.ss.mixKey(dh(e, this.re as Uint8Array)); // ee
    }
    const body = this.ss.encryptAndHash(payload);
    const message = concat(e.publicKey, body);
    if (message.length > MAX_NOISE_MESSAGE) throw new NoiseError("NK: message over 65535 bytes");
    this.step += 1;
    return message;
  }

  /** Reads the other side's message; throws `NoiseError` when it does not authenticate. */
  readMessage(message: Uint8Array): Uint8Array {
    const expected = this.role === "responder" ? 0 : 1;
    if (this.step !== expected) throw new NoiseError("NK: not this side's turn to read");
    if (message.length < DHLEN + TAGLEN || message.length > MAX_NOISE_MESSAGE) throw new NoiseError("NK: handshake message of a wrong length");
    const re = message.slice(0, DHLEN);
    this.ss.mixHash(re);
    if (this.role === "responder") {
      this.re = re;
      this.ss.mixKey(dh(this.s as KeyPair, re)); // es
    } else {
      this.re = re;
      this.ss.mixKey(dh(this.e as KeyPair, re)); // ee
    }
    const payload = this.ss.decryptAndHash(message.subarray(DHLEN));
    this.step += 1;
    return payload;
  }

  /** After message 2: the initiator sends with the first cipher, the responder with the second. */
  split(): TransportCiphers {
    if (this.step !== 2) throw new NoiseError("NK: the handshake is not complete");
    const [c1, c2] = this.ss.split();
    const handshakeHash = this.ss.handshakeHash;
    this.e = null;
    return this.role === "initiator" ? { send: c1, receive: c2, handshakeHash } : { send: c2, receive: c1, handshakeHash };
  }
}
