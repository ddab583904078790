// The sealed transport's crypto (PROTOCOL.md "Sealed transport"), checked against published
// Noise vectors (test/fixtures/noise-nk-vectors.json: the NK_25519_ChaChaPoly_SHA256 entries of
// cacophony's and snow's vector files, as shipped in github.com/mcginty/snow), NIST's
// HMAC_DRBG vectors, and its own rules: tampered, replayed, reordered, truncated and wrong-key
// inputs are refused.

import { readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

import { hmac } from "@noble/hashes/hmac";
import { sha256 } from "@noble/hashes/sha256";
import { describe, expect, it } from "vitest";

import { decodeBase64urlStrict } from "../src/core/base64.js";
import { encodeUtf8 } from "../src/core/utf8.js";
import {
  closeRecord,
  createSealedRandom,
  frameRecords,
  HmacDrbg,
  keyPairFromPrivate,
  linkRefusalProof,
  linkRefusedFrame,
  MAX_FRAGMENT_DATA,
  NkHandshake,
  NoiseError,
  RecordAssembler,
  RecordError,
  SealedInitiator,
  SealedResponder,
  type KeyPair,
} from "../src/core/sealed/index.js";

const here = path.dirname(fileURLToPath(import.meta.url));
const hex = (s: string): Uint8Array => Uint8Array.from(Buffer.from(s, "hex"));
const toHex = (b: Uint8Array): string => Buffer.from(b).toString("hex");

interface NoiseVector {
  protocol_name: string;
  init_prologue: string;
  init_ephemeral: string;
  init_remote_static: string;
  resp_prologue: string;
  resp_static: string;
  resp_ephemeral: string;
  handshake_hash?: string;
  messages: { payload: string; ciphertext: string }[];
  _file: string;
}

const noiseVectors = (JSON.parse(readFileSync(path.join(here, "fixtures", "noise-nk-vectors.json"), "utf8")) as { vectors: NoiseVector[] }).vectors;
const noRandom = (): Uint8Array => {
  throw new Error("the vectors fix every key");
};

describe("Noise NK against published vectors", () => {
  it("has the cacophony and the snow vector", () => {
    expect(noiseVectors.map((v) => v._file)).toEqual(["tests/vectors/cacophony.txt", "tests/vectors/snow.txt"]);
  });

  for (const vector of noiseVectors) {
    it(`reproduces every message of ${vector._file}, both roles`, () => {
      const initiator = new NkHandshake("initiator", {
        prologue: hex(vector.init_prologue),
        remoteStatic: hex(vector.init_remote_static),
        ephemeral: keyPairFromPrivate(hex(vector.init_ephemeral)),
        random: noRandom,
      });
      const responder = new NkHandshake("responder", {
        prologue: hex(vector.resp_prologue),
        staticKeyPair: keyPairFromPrivate(hex(vector.resp_static)),
        ephemeral: keyPairFromPrivate(hex(vector.resp_ephemeral)),
        random: noRandom,
      });
      const [m1, m2, ...transport] = vector.messages as [NoiseVector["messages"][0], NoiseVector["messages"][0], ...NoiseVector["messages"]];
      const c1 = initiator.writeMessage(hex(m1.payload));
      expect(toHex(c1)).toBe(m1.ciphertext);
      expect(toHex(responder.readMessage(c1))).toBe(m1.payload);
      const c2 = responder.writeMessage(hex(m2.payload));
      expect(toHex(c2)).toBe(m2.ciphertext);
      expect(toHex(initiator.readMessage(c2))).toBe(m2.payload);
      if (vector.handshake_hash) {
        expect(toHex(initiator.handshakeHash)).toBe(vector.handshake_hash);
        expect(toHex(responder.handshakeHash)).toBe(vector.handshake_hash);
      }
      const i = initiator.split();
      const r = responder.split();
      transport.forEach((message, index) => {
        const [sender, receiver] = index % 2 === 0 ? [i, r] : [r, i];
        const ciphertext = sender.send.encryptWithAd(new Uint8Array(0), hex(message.payload));
        expect(toHex(ciphertext)).toBe(message.ciphertext);
        expect(toHex(receiver.receive.decryptWithAd(new Uint8Array(0), ciphertext))).toBe(message.payload);
      });
      expect(transport.length).toBeGreaterThanOrEqual(2);
    });
  }

  it("a wrong static key in the link fails at the responder (message 1 does not decrypt)", () => {
    const v = noiseVectors[0] as NoiseVector;
    const wrong = keyPairFromPrivate(new Uint8Array(32).fill(7)).publicKey;
    const initiator = new NkHandshake("initiator", { prologue: hex(v.init_prologue), remoteStatic: wrong, random: randomBytes });
    const responder = new NkHandshake("responder", { prologue: hex(v.resp_prologue), staticKeyPair: keyPairFromPrivate(hex(v.resp_static)), random: randomBytes });
    expect(() => responder.readMessage(initiator.writeMessage(new Uint8Array(0)))).toThrow(NoiseError);
  });

  it("a different prologue fails the handshake", () => {
    const v = noiseVectors[0] as NoiseVector;
    const initiator = new NkHandshake("initiator", { prologue: encodeUtf8("a"), remoteStatic: hex(v.init_remote_static), random: randomBytes });
    const responder = new NkHandshake("responder", { prologue: encodeUtf8("b"), staticKeyPair: keyPairFromPrivate(hex(v.resp_static)), random: randomBytes });
    expect(() => responder.readMessage(initiator.writeMessage(new Uint8Array(0)))).toThrow(NoiseError);
  });

  it("refuses out-of-turn use and a low-order ephemeral key", () => {
    const v = noiseVectors[0] as NoiseVector;
    const initiator = new NkHandshake("initiator", { prologue: new Uint8Array(0), remoteStatic: hex(v.init_remote_static), random: randomBytes });
    expect(() => initiator.readMessage(new Uint8Array(64))).toThrow(NoiseError);
    expect(() => initiator.split()).toThrow(NoiseError);
    const responder = new NkHandshake("responder", { prologue: new Uint8Array(0), staticKeyPair: keyPairFromPrivate(hex(v.resp_static)), random: randomBytes });
    // The all-zero point is of low order: its shared secret is all zeros and refused.
    expect(() => responder.readMessage(new Uint8Array(64))).toThrow(NoiseError);
  });
});

function randomBytes(n: number): Uint8Array {
  return Uint8Array.from(globalThis.crypto.getRandomValues(new Uint8Array(n)));
}

function channelPair(rng: "csprng" | "drbg" = "csprng"): {
  app: ReturnType<SealedInitiator["finish"]>["records"];
  daemon: ReturnType<SealedResponder["accept"]>["records"];
  payload: Record<string, unknown>;
  message1: Uint8Array;
  message2: Uint8Array;
} {
  const daemonKey: KeyPair = keyPairFromPrivate(randomBytes(32));
  const initiator = new SealedInitiator({ remoteStatic: daemonKey.publicKey, random: randomBytes, rng });
  const responder = new SealedResponder({ staticKeyPair: daemonKey, random: randomBytes });
  const message1 = initiator.start();
  const accepted = responder.accept(message1);
  const { records } = initiator.finish(accepted.message2);
  return { app: records, daemon: accepted.records, payload: accepted.payload, message1, message2: accepted.message2 };
}

describe("sealed channel", () => {
  it("message 1 carries the rng source; sizes are within 48–304 bytes; frames round-trip both ways", () => {
    const { app, daemon, payload, message1, message2 } = channelPair("drbg");
    expect(payload).toEqual({ rng: "drbg" });
    expect(message1.length).toBe(32 + '{"rng":"drbg"}'.length + 16);
    expect(message2.length).toBe(32 + 2 + 16);
    const claim = JSON.stringify({ type: "session_claim", session_id: "s", token: "t" });
    const [record] = app.sealFrame(claim) as [Uint8Array];
    expect(daemon.open(record)).toEqual({ type: "frame", text: claim });
    const [back] = daemon.sealFrame('{"type":"session_ack"}') as [Uint8Array];
    expect(app.open(back)).toEqual({ type: "frame", text: '{"type":"session_ack"}' });
    expect(app.handshakeHash).toEqual(daemon.handshakeHash);
  });

  it("fragments a frame of 262,144 bytes and reassembles it; one byte more is 1009", () => {
    const { app, daemon } = channelPair();
    const text = "x".repeat(262_144);
    const records = app.sealFrame(text);
    expect(records.length).toBe(Math.ceil(262_144 / MAX_FRAGMENT_DATA));
    expect(Math.max(...records.map((r) => r.length))).toBeLessThanOrEqual(65_535);
    const events = records.map((r) => daemon.open(r));
    expect(events.slice(0, -1).every((e) => e.type === "partial")).toBe(true);
    expect(events.at(-1)).toEqual({ type: "frame", text });
    expect(() => app.sealFrame(`${text}x`)).toThrow(RecordError);
  });

  it("rejects a tampered, a replayed, a reordered and a truncated record; the channel stays broken", () => {
    for (const attack of ["tamper", "replay", "reorder", "truncate"] as const) {
      const { app, daemon } = channelPair();
      const [a] = app.sealFrame('{"n":1}') as [Uint8Array];
      const [b] = app.sealFrame('{"n":2}') as [Uint8Array];
      if (attack === "tamper") {
        const bad = a.slice();
        bad[3] = (bad[3] as number) ^ 1;
        expect(() => daemon.open(bad), attack).toThrow(NoiseError);
      } else if (attack === "replay") {
        daemon.open(a);
        expect(() => daemon.open(a), attack).toThrow(NoiseError);
      } else if (attack === "reorder") {
        expect(() => daemon.open(b), attack).toThrow(NoiseError);
      } else {
        expect(() => daemon.open(a.subarray(0, a.length - 1)), attack).toThrow(NoiseError);
      }
      // Once broken, even the genuine next record is refused.
      expect(() => daemon.open(attack === "replay" ? b : a), attack).toThrow(NoiseError);
    }
  });

  it("a wrong static key: the daemon cannot read message 1; a forged message 2 fails at the app", () => {
    const daemonKey = keyPairFromPrivate(randomBytes(32));
    const other = keyPairFromPrivate(randomBytes(32));
    const initiator = new SealedInitiator({ remoteStatic: other.publicKey, random: randomBytes, rng: "csprng" });
    const message1 = initiator.start();
    expect(() => new SealedResponder({ staticKeyPair: daemonKey, random: randomBytes }).accept(message1)).toThrow(NoiseError);
    // An attacker holding `other` can answer, but not as the daemon the link names.
    const victim = new SealedInitiator({ remoteStatic: daemonKey.publicKey, random: randomBytes, rng: "csprng" });
    const forged = new SealedResponder({ staticKeyPair: other, random: randomBytes });
    const m1 = victim.start();
    expect(() => forged.accept(m1)).toThrow(NoiseError);
    const mitm = new SealedResponder({ staticKeyPair: daemonKey, random: randomBytes }).accept(m1).message2.slice();
    mitm[40] = (mitm[40] as number) ^ 0x80;
    expect(() => victim.finish(mitm)).toThrow(NoiseError);
  });

  it("message 1 outside 48–304 bytes is refused by the responder", () => {
    const daemonKey = keyPairFromPrivate(randomBytes(32));
    const responder = new SealedResponder({ staticKeyPair: daemonKey, random: randomBytes });
    expect(() => responder.accept(new Uint8Array(47))).toThrow(NoiseError);
    expect(() => new SealedResponder({ staticKeyPair: daemonKey, random: randomBytes }).accept(new Uint8Array(305))).toThrow(NoiseError);
  });

  it("message 2 outside 48–304 bytes is refused by the app before decrypting (as the Rust initiator)", () => {
    const daemonKey = keyPairFromPrivate(randomBytes(32));
    for (const size of [47, 305]) {
      const initiator = new SealedInitiator({ remoteStatic: daemonKey.publicKey, random: randomBytes, rng: "csprng" });
      initiator.start();
      expect(() => initiator.finish(new Uint8Array(size)), `${size} bytes`).toThrow(/message 2 of a wrong length/);
    }
  });
});

describe("records", () => {
  it("close records carry a code and a reason cut to 123 bytes on a character boundary", () => {
    const assembler = new RecordAssembler();
    expect(assembler.push(closeRecord(1008, "session_revoked"))).toEqual({ type: "close", code: 1008, reason: "session_revoked" });
    // Nothing may follow a close record.
    expect(() => assembler.push(frameRecords("{}")[0] as Uint8Array)).toThrow(RecordError);
    const long = closeRecord(1000, "é".repeat(100));
    expect(long.length).toBe(3 + 122);
    expect(new RecordAssembler().push(long)).toEqual({ type: "close", code: 1000, reason: "é".repeat(61) });
  });

  it("close codes a WebSocket close cannot carry (1005, 1006, 2000) are refused both ways", () => {
    for (const code of [1005, 1006, 1015, 2000, 999]) {
      expect(() => closeRecord(code, "")).toThrow(RecordError);
      expect(() => new RecordAssembler().push(Uint8Array.of(2, code >> 8, code & 255))).toThrow(RecordError);
    }
  });

  it("refuses an empty plaintext, unknown kinds, short close records, invalid UTF-8 and oversized frames", () => {
    const err = (plain: Uint8Array): unknown => {
      try {
        new RecordAssembler().push(plain);
      } catch (error) {
        return error instanceof RecordError ? `${error.code} ${error.reason}` : error;
      }
      return "accepted";
    };
    expect(err(new Uint8Array(0))).toBe("1002 protocol_error");
    expect(err(Uint8Array.of(3, 0x7b))).toBe("1002 protocol_error");
    expect(err(Uint8Array.of(2, 3))).toBe("1002 protocol_error");
    expect(err(Uint8Array.of(1, 0xff))).toBe("1007 invalid_payload");
    expect(err(Uint8Array.of(1, 0xed, 0xa0, 0x80))).toBe("1007 invalid_payload");
    const assembler = new RecordAssembler();
    const big = new Uint8Array(1 + MAX_FRAGMENT_DATA);
    for (let i = 0; i < 4; i++) assembler.push(big);
    expect(() => assembler.push(new Uint8Array(1 + MAX_FRAGMENT_DATA))).toThrow(RecordError);
  });

  it("an empty last fragment ends a frame", () => {
    const [only] = frameRecords("") as [Uint8Array];
    expect(Array.from(only)).toEqual([1]);
    expect(new RecordAssembler().push(only)).toEqual({ type: "frame", text: "" });
  });
});

describe("HMAC_DRBG (SP 800-90A, SHA-256)", () => {
  // NIST CAVS 14.3 HMAC_DRBG.rsp, [SHA-256], no prediction resistance: instantiate, (reseed),
  // generate twice; the second output is the vector's ReturnedBits.
  it("matches the NIST vector without reseed (count 0)", () => {
    const drbg = new HmacDrbg(hex("ca851911349384bffe89de1cbdc46e6831e44d34a4fb935ee285dd14b71a7488"), hex("659ba96c601dc69fc902940805ec0ca8"));
    drbg.generate(128);
    expect(toHex(drbg.generate(128))).toBe(
      "e528e9abf2dece54d47c7e75e5fe302149f817ea9fb4bee6f4199697d04d5b89d54fbb978a15b5c443c9ec21036d2460b6f73ebad0dc2aba6e624abf07745bc107694bb7547bb0995f70de25d6b29e2d3011bb19d27676c07162c8b5ccde0668961df86803482cb37ed6d5c0bb8d50cf1f50d476aa0458bdaba806f48be9dcb8",
    );
  });

  it("matches the NIST vector with a reseed (count 0)", () => {
    const drbg = new HmacDrbg(hex("06032cd5eed33f39265f49ecb142c511da9aff2af71203bffaf34a9ca5bd9c0d"), hex("0e66f71edc43e42a45ad3c6fc6cdc4df"));
    drbg.reseed(hex("01920a4e669ed3a85ae8a33b35a74ad7fb2a6bb4cf395ce00334a9c9a5a5d552"));
    drbg.generate(128);
    expect(toHex(drbg.generate(128))).toBe(
      "76fc79fe9b50beccc991a11b5635783a83536add03c157fb30645e611c2898bb2b1bc215000209208cd506cb28da2a51bdb03826aaf2bd2335d576d519160842e7158ad0949d1a9ec3e66ea1b1a064b005de914eac2e9d4f2d72a8616a80225422918250ff66a41bd2f864a6a38cc5b6499dc43f7f2bd09e1e0f8f5885935124",
    );
  });
});

describe("randomness source", () => {
  it("uses crypto.getRandomValues when present (csprng)", () => {
    const rng = createSealedRandom();
    expect(rng.source()).toBe("csprng");
    expect(rng.bytes(32)).toHaveLength(32);
  });

  it("without a CSPRNG: refuses before any secret, then a DRBG seeded from the token and timing; never Math.random alone", () => {
    const constant = () => 0.5;
    const rng = createSealedRandom({ forceDrbg: true, weak: constant });
    expect(rng.source()).toBe("drbg");
    expect(() => rng.bytes(32)).toThrow(/never seeded/);
    const token = hex("00".repeat(32));
    rng.reseed(token);
    const a = rng.bytes(32);
    const b = rng.bytes(32);
    expect(toHex(a)).not.toBe(toHex(b));
    // Same token, same (constant) weak source: the timing samples and the secret still separate them.
    const other = createSealedRandom({ forceDrbg: true, weak: constant });
    other.reseed(hex("01".repeat(32)));
    expect(toHex(other.bytes(32))).not.toBe(toHex(a));
  });

  it("a DRBG key depends on the secret: two generators with frozen clocks differ only by the token", () => {
    const frozen = { now: () => 1_700_000_000_000, weak: () => 0 };
    const mk = (secret: string): string => {
      let t = 0;
      const rng = createSealedRandom({ ...frozen, hrNow: () => (t += 0.5), forceDrbg: true });
      rng.reseed(hex(secret));
      return toHex(rng.bytes(32));
    };
    expect(mk("aa".repeat(32))).toBe(mk("aa".repeat(32)));
    expect(mk("aa".repeat(32))).not.toBe(mk("ab".repeat(32)));
  });
});

describe("link_refused proof", () => {
  it("is HMAC-SHA256 keyed with the 32 token bytes over the documented message, unpadded base64url", () => {
    const token = Uint8Array.from({ length: 32 }, (_, i) => i);
    const proof = linkRefusalProof(token, "sess-1", "unsupported_link");
    const expected = Buffer.from(hmac(sha256, token, encodeUtf8("appduct link_refused v1\nsess-1\nunsupported_link"))).toString("base64url");
    expect(proof).toBe(expected);
    expect(proof).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(decodeBase64urlStrict(proof)).toHaveLength(32);
    expect(JSON.parse(linkRefusedFrame(token, "sess-1", "link_expired"))).toEqual({
      type: "link_refused",
      session_id: "sess-1",
      reason: "link_expired",
      proof: linkRefusalProof(token, "sess-1", "link_expired"),
    });
    expect(linkRefusalProof(token, "sess-1", "link_expired")).not.toBe(proof);
  });
});
