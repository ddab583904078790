// Runs inside the Hermes CLI (bundled by test/hermes.test.ts): the sealed transport's crypto
// against Noise vectors produced by snow (and cacophony), then sealed round trips with each
// randomness source. Hermes has no `crypto` and no TextEncoder, as on phones. Any failure throws,
// which makes `hermes` exit non-zero.

import {
  createSealedRandom,
  keyPairFromPrivate,
  NkHandshake,
  NoiseError,
  SealedInitiator,
  SealedResponder,
  type KeyPair,
} from "../../src/core/sealed/index.js";

declare const print: (...args: unknown[]) => void;
declare const APPDUCT_VECTORS: { name: string; vectors: VectorLike[] }[];
declare const APPDUCT_SEALED: SealedVectors;

interface SealedVectors {
  staticKey: { privateClampedHex: string; publicHex: string };
  handshake: { appEphemeralPrivateHex: string; daemonEphemeralPrivateHex: string; message1Hex: string; message2Hex: string; handshakeHashHex: string };
  records: { direction: string; recordHex: string; opened: { frame?: string; close?: { code: number; reason: string } } }[];
}

interface VectorLike {
  init_prologue: string;
  init_ephemeral: string;
  init_remote_static: string;
  resp_prologue: string;
  resp_static: string;
  resp_ephemeral: string;
  handshake_hash?: string;
  messages: { payload: string; ciphertext: string }[];
}

function hex(s: string): Uint8Array {
  const out = new Uint8Array(s.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(s.slice(2 * i, 2 * i + 2), 16);
  return out;
}

function toHex(b: Uint8Array): string {
  let s = "";
  for (let i = 0; i < b.length; i++) s += ((b[i] as number) < 16 ? "0" : "") + (b[i] as number).toString(16);
  return s;
}

function check(cond: boolean, what: string): void {
  if (!cond) throw new Error(`hermes check failed: ${what}`);
}

const g = globalThis as { crypto?: unknown; TextEncoder?: unknown; TextDecoder?: unknown };
check(typeof g.crypto === "undefined", "no crypto global in Hermes");
check(typeof g.TextEncoder === "undefined" && typeof g.TextDecoder === "undefined", "no TextEncoder/TextDecoder in Hermes");
check(typeof BigInt === "function", "BigInt");

const noRandom = (): Uint8Array => {
  throw new Error("vectors fix every key");
};

let vectorCount = 0;
for (const set of APPDUCT_VECTORS) {
  for (const v of set.vectors) {
    const initiator = new NkHandshake("initiator", { prologue: hex(v.init_prologue), remoteStatic: hex(v.init_remote_static), ephemeral: keyPairFromPrivate(hex(v.init_ephemeral)), random: noRandom });
    const responder = new NkHandshake("responder", { prologue: hex(v.resp_prologue), staticKeyPair: keyPairFromPrivate(hex(v.resp_static)), ephemeral: keyPairFromPrivate(hex(v.resp_ephemeral)), random: noRandom });
    const m = v.messages;
    const c1 = initiator.writeMessage(hex((m[0] as VectorLike["messages"][0]).payload));
    check(toHex(c1) === (m[0] as VectorLike["messages"][0]).ciphertext, `${set.name}: message 1`);
    check(toHex(responder.readMessage(c1)) === (m[0] as VectorLike["messages"][0]).payload, `${set.name}: message 1 read`);
    const c2 = responder.writeMessage(hex((m[1] as VectorLike["messages"][0]).payload));
    check(toHex(c2) === (m[1] as VectorLike["messages"][0]).ciphertext, `${set.name}: message 2`);
    check(toHex(initiator.readMessage(c2)) === (m[1] as VectorLike["messages"][0]).payload, `${set.name}: message 2 read`);
    if (v.handshake_hash) check(toHex(initiator.handshakeHash) === v.handshake_hash, `${set.name}: handshake hash`);
    const i = initiator.split();
    const r = responder.split();
    for (let n = 2; n < m.length; n++) {
      const msg = m[n] as VectorLike["messages"][0];
      const [tx, rx] = n % 2 === 0 ? [i, r] : [r, i];
      const ct = tx.send.encryptWithAd(new Uint8Array(0), hex(msg.payload));
      check(toHex(ct) === msg.ciphertext, `${set.name}: transport message ${n}`);
      check(toHex(rx.receive.decryptWithAd(new Uint8Array(0), ct)) === msg.payload, `${set.name}: transport read ${n}`);
    }
    vectorCount += 1;
  }
}

function sealedVectors(v: SealedVectors): void {
  const daemonKey = keyPairFromPrivate(hex(v.staticKey.privateClampedHex));
  check(toHex(daemonKey.publicKey) === v.staticKey.publicHex, "sealed-vectors: static key");
  const app = new SealedInitiator({ remoteStatic: daemonKey.publicKey, random: noRandom, rng: "csprng", ephemeral: keyPairFromPrivate(hex(v.handshake.appEphemeralPrivateHex)) });
  const daemon = new SealedResponder({ staticKeyPair: daemonKey, random: noRandom, ephemeral: keyPairFromPrivate(hex(v.handshake.daemonEphemeralPrivateHex)) });
  const m1 = app.start();
  check(toHex(m1) === v.handshake.message1Hex, "sealed-vectors: message 1");
  const accepted = daemon.accept(m1);
  check(toHex(accepted.message2) === v.handshake.message2Hex, "sealed-vectors: message 2");
  const { records } = app.finish(accepted.message2);
  check(toHex(records.handshakeHash) === v.handshake.handshakeHashHex, "sealed-vectors: handshake hash");
  for (const r of v.records) {
    const [tx, rx] = r.direction === "app_to_daemon" ? [records, accepted.records] : [accepted.records, records];
    const sealed = r.opened.close ? [tx.sealClose(r.opened.close.code, r.opened.close.reason)] : tx.sealFrame(r.opened.frame as string);
    check(sealed.length === 1 && toHex(sealed[0] as Uint8Array) === r.recordHex, `sealed-vectors: record ${r.direction}`);
    const opened = rx.open(hex(r.recordHex));
    check(opened.type === (r.opened.close ? "close" : "frame"), `sealed-vectors: opened ${r.direction}`);
  }
  print("sealed-vectors.json ok");
}

if (APPDUCT_SEALED) sealedVectors(APPDUCT_SEALED);

function roundTrip(source: "csprng" | "drbg"): void {
  const random = createSealedRandom();
  check(random.source() === source, `rng source ${source}`);
  random.reseed(hex("5a".repeat(32)));
  const daemonKey: KeyPair = keyPairFromPrivate(random.bytes(32));
  const app = new SealedInitiator({ remoteStatic: daemonKey.publicKey, random: (n) => random.bytes(n), rng: random.source() });
  const daemon = new SealedResponder({ staticKeyPair: daemonKey, random: (n) => random.bytes(n) });
  const accepted = daemon.accept(app.start());
  check(accepted.payload.rng === source, "rng in message 1");
  const { records } = app.finish(accepted.message2);
  const text = JSON.stringify({ type: "tool_result", session_id: "s", result: { big: "\u00e9\u4e2d\ud83d\ude00".repeat(20000) } });
  const sealed = records.sealFrame(text);
  check(sealed.length > 1, "a big frame is fragmented");
  let got: unknown = null;
  for (const record of sealed) {
    const event = accepted.records.open(record);
    if (event.type === "frame") got = event.text;
  }
  check(got === text, "frame round trip app -> daemon");
  const back = accepted.records.sealFrame('{"type":"tool_call"}');
  const event = records.open(back[0] as Uint8Array);
  check(event.type === "frame" && event.text === '{"type":"tool_call"}', "frame round trip daemon -> app");
  const close = records.open(accepted.records.sealClose(1008, "session_revoked"));
  check(close.type === "close" && close.code === 1008 && close.reason === "session_revoked", "close record");
  let refused = false;
  try {
    accepted.records.open(sealed[0] as Uint8Array);
  } catch (error) {
    refused = error instanceof NoiseError;
  }
  check(refused, "a replayed record is refused");
  print(`round trip ${source} ok`);
}

roundTrip("drbg");
// The csprng path as React Native gets it from react-native-get-random-values or expo-crypto:
// a `crypto.getRandomValues` global (here a stand-in, installed after the module loaded).
const stand = createSealedRandom({ forceDrbg: true });
stand.reseed(hex("c3".repeat(32)));
(globalThis as { crypto?: unknown }).crypto = {
  getRandomValues: <T extends ArrayBufferView | null>(array: T): T => {
    const view = array as unknown as Uint8Array;
    view.set(stand.bytes(view.length));
    return array;
  },
};
roundTrip("csprng");
check(vectorCount >= 2, "vectors ran");
print(`APPDUCT_HERMES_OK vectors=${vectorCount}`);
