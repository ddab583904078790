// The sealed transport's JavaScript-only crypto (PROTOCOL.md "Sealed transport"): the Noise NK
// handshake, records, randomness and link refusals.

export { NkHandshake, CipherState, SymmetricState, NoiseError, noiseHkdf, keyPairFromPrivate, generateKeyPair, PROTOCOL_NAME, MAX_NOISE_MESSAGE } from "./noise.js";
export type { KeyPair, RandomBytes, TransportCiphers, NkOptions } from "./noise.js";
export { frameRecords, closeRecord, isSendableCloseCode, RecordAssembler, RecordError, MAX_RECORD_PLAINTEXT, MAX_FRAGMENT_DATA, KIND_FRAGMENT, KIND_LAST, KIND_CLOSE } from "./records.js";
export type { RecordEvent } from "./records.js";
export { SealedInitiator, SealedResponder, SEALED_PROLOGUE, MAX_HANDSHAKE_PAYLOAD, MIN_MESSAGE1, MAX_MESSAGE1 } from "./channel.js";
export type { SealedRecords, SealedInitiatorOptions, SealedResponderOptions } from "./channel.js";
export { HmacDrbg, createSealedRandom, collectTimingEntropy } from "./random.js";
export type { RngSource, SealedRandom, SealedRandomOptions, TimingSources } from "./random.js";
export { linkRefusalProof, linkRefusedFrame } from "./refusal.js";
export type { LinkRefusalReason } from "./refusal.js";
