// A sealed channel (PROTOCOL.md "Sealed transport"): the NK handshake with the appduct prologue
// and payloads, then records in both directions. The app is the initiator; the responder side
// exists for tests (and mirrors the daemon).

import { decodeUtf8Strict, encodeUtf8 } from "../utf8.js";
import { isJsonObject } from "../text.js";
import { NkHandshake, NoiseError, MAX_NOISE_MESSAGE, type KeyPair, type RandomBytes, type TransportCiphers } from "./noise.js";
import { closeRecord, frameRecords, RecordAssembler, RecordError, type RecordEvent } from "./records.js";
import type { RngSource } from "./random.js";

/** The Noise prologue of every sealed handshake. */
export const SEALED_PROLOGUE = encodeUtf8("appduct-sealed/1");
/** Handshake payloads are at most 256 bytes before encryption. */
export const MAX_HANDSHAKE_PAYLOAD = 256;
export const MIN_MESSAGE1 = 48;
export const MAX_MESSAGE1 = 304;

function jsonPayload(value: Record<string, unknown>): Uint8Array {
  const bytes = encodeUtf8(JSON.stringify(value));
  if (bytes.length > MAX_HANDSHAKE_PAYLOAD) throw new NoiseError("handshake payload over 256 bytes");
  return bytes;
}

function readJsonPayload(bytes: Uint8Array): Record<string, unknown> {
  if (bytes.length > MAX_HANDSHAKE_PAYLOAD) throw new NoiseError("handshake payload over 256 bytes");
  const text = decodeUtf8Strict(bytes);
  let value: unknown;
  try {
    value = text === null ? null : JSON.parse(text);
  } catch {
    value = null;
  }
  if (!isJsonObject(value)) throw new NoiseError("handshake payload is not a JSON object");
  return value;
}

/** Records after the handshake, one direction each. */
class Records {
  private readonly assembler = new RecordAssembler();
  private broken: NoiseError | RecordError | null = null;

  constructor(private readonly ciphers: TransportCiphers) {}

  get handshakeHash(): Uint8Array {
    return this.ciphers.handshakeHash;
  }

  /** The Noise messages carrying one frame. */
  sealFrame(text: string): Uint8Array[] {
    return frameRecords(text).map((plain) => this.ciphers.send.encryptWithAd(new Uint8Array(0), plain));
  }

  sealClose(code: number, reason: string): Uint8Array {
    return this.ciphers.send.encryptWithAd(new Uint8Array(0), closeRecord(code, reason));
  }

  /**
   * One received message: a whole frame, a close record, or a fragment held for later. Throws
   * `NoiseError` (authentication failed: the channel is then broken for good) or `RecordError`.
   */
  open(message: Uint8Array): RecordEvent {
    if (this.broken) throw this.broken;
    try {
      if (message.length > MAX_NOISE_MESSAGE) throw new RecordError(1009, "message_too_big");
      return this.assembler.push(this.ciphers.receive.decryptWithAd(new Uint8Array(0), message));
    } catch (error) {
      // Every failure is final: later records get the same error.
      this.broken = error instanceof RecordError || error instanceof NoiseError ? error : new NoiseError("the channel is broken");
      throw error;
    }
  }
}

export type SealedRecords = Records;

export interface SealedInitiatorOptions {
  /** The daemon's static X25519 public key, from the link. */
  remoteStatic: Uint8Array;
  random: RandomBytes;
  rng: RngSource;
  /** Tests only. */
  ephemeral?: KeyPair;
}

/** The app's side: `start()` gives message 1, `finish(message2)` gives the record layer. */
export class SealedInitiator {
  private readonly hs: NkHandshake;
  private readonly rng: RngSource;

  constructor(options: SealedInitiatorOptions) {
    this.rng = options.rng;
    this.hs = new NkHandshake("initiator", {
      prologue: SEALED_PROLOGUE,
      random: options.random,
      remoteStatic: options.remoteStatic,
      ...(options.ephemeral ? { ephemeral: options.ephemeral } : {}),
    });
  }

  start(): Uint8Array {
    return this.hs.writeMessage(jsonPayload({ rng: this.rng }));
  }

  /** Reads message 2; throws `NoiseError` when it does not authenticate (a wrong static key). */
  finish(message2: Uint8Array): { records: SealedRecords; payload: Record<string, unknown> } {
    if (message2.length < MIN_MESSAGE1 || message2.length > MAX_MESSAGE1) throw new NoiseError("message 2 of a wrong length");
    const payload = readJsonPayload(this.hs.readMessage(message2));
    return { records: new Records(this.hs.split()), payload };
  }
}

export interface SealedResponderOptions {
  staticKeyPair: KeyPair;
  random: RandomBytes;
  ephemeral?: KeyPair;
}

/** The daemon's side, for tests: reads message 1 and answers message 2. */
export class SealedResponder {
  private readonly hs: NkHandshake;

  constructor(options: SealedResponderOptions) {
    this.hs = new NkHandshake("responder", {
      prologue: SEALED_PROLOGUE,
      random: options.random,
      staticKeyPair: options.staticKeyPair,
      ...(options.ephemeral ? { ephemeral: options.ephemeral } : {}),
    });
  }

  /** Reads message 1 and writes message 2; the initiator's payload (its `rng`) comes back. */
  accept(message1: Uint8Array, reply: Record<string, unknown> = {}): { message2: Uint8Array; records: SealedRecords; payload: Record<string, unknown> } {
    if (message1.length < MIN_MESSAGE1 || message1.length > MAX_MESSAGE1) throw new NoiseError("message 1 of a wrong length");
    const payload = readJsonPayload(this.hs.readMessage(message1));
    // As the daemon: the app must say where its randomness came from.
    if (payload.rng !== "csprng" && payload.rng !== "drbg") throw new NoiseError("message 1 names no known rng source");
    const message2 = this.hs.writeMessage(jsonPayload(reply));
    return { message2, records: new Records(this.hs.split()), payload };
  }
}
