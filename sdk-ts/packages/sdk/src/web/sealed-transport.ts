// The sealed transport (PROTOCOL.md "Sealed transport"): a Noise NK channel carried in binary
// messages of a plain WebSocket (`binaryType = "arraybuffer"`) to the daemon's plain route on
// the wss port. Used by the React Native entry for sealed links. JavaScript only.
//
// The socket reports `onopen` only once the handshake is done, so the core's first frame (the
// claim or resume, carrying its token) travels inside the channel. Only a close record is
// authenticated: a WebSocket close or TCP loss without one is reported without a code (the core
// treats it as 1006 and retries within grace), whatever code it carried.

import { NoiseError } from "../core/sealed/noise.js";
import { SealedInitiator, type SealedRecords } from "../core/sealed/channel.js";
import { RecordError } from "../core/sealed/records.js";
import { createSealedRandom, type SealedRandom } from "../core/sealed/random.js";
import type { TransportCloseEvent, TransportFactory, TransportSocket } from "../core/types.js";
import type { WebSocketConstructor, WebSocketLike } from "./transport.js";

/** The daemon's close of a handshake it could not read (a wrong static key), as a plain close. */
const HANDSHAKE_FAILED_REASON = "sealed_handshake_failed";

function toBytes(data: unknown): Uint8Array | null {
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  return null;
}

/** An exact ArrayBuffer of `bytes`: what every WebSocket implementation sends as binary. */
function toArrayBuffer(bytes: Uint8Array): ArrayBuffer {
  return bytes.slice().buffer as ArrayBuffer;
}

export interface SealedTransportOptions {
  /** The randomness for ephemeral keys; default: `crypto.getRandomValues`, else a DRBG. */
  random?: SealedRandom;
  /** Every sealed socket's rng source, once its handshake is sent (diagnostics, tests). */
  onHandshake?: (info: { rng: "csprng" | "drbg" }) => void;
}

/** Builds a factory of sealed sockets over `WebSocket` (read from `globalThis` when each opens). */
export function createSealedWebSocketTransport(ctor?: () => WebSocketConstructor | undefined, options: SealedTransportOptions = {}): TransportFactory {
  const random = options.random ?? createSealedRandom();
  return (target) => {
    const WebSocketImpl = ctor?.() ?? (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
    if (!WebSocketImpl) throw new Error("appduct: no WebSocket implementation is available");
    if (!target.staticKey || target.staticKey.length !== 32) throw new Error("appduct: a sealed connection needs the daemon's static key");
    const staticKey = target.staticKey;
    const ws: WebSocketLike = new WebSocketImpl(target.url);
    ws.binaryType = "arraybuffer";
    let phase: "opening" | "handshake" | "open" | "closed" = "opening";
    let initiator: SealedInitiator | null = null;
    let records: SealedRecords | null = null;

    const report = (event: TransportCloseEvent): void => {
      if (phase === "closed") return;
      phase = "closed";
      socket.onclose?.(event);
    };
    /**
     * Ends the connection: a close record first when the channel still works, then a bare `1000`
     * WebSocket close (the code and reason travel only sealed); without a record the WebSocket
     * close carries them.
     */
    const shut = (code: number, reason: string, sealClose: boolean): void => {
      let sealed = false;
      if (sealClose && records) {
        try {
          ws.send(toArrayBuffer(records.sealClose(code, reason)));
          sealed = true;
        } catch {
          // The socket is already going away.
        }
      }
      try {
        if (sealed) ws.close(1000, "");
        else ws.close(code, reason);
      } catch {
        // Already closed.
      }
    };

    const socket: TransportSocket = {
      onopen: null,
      onmessage: null,
      onclose: null,
      send: (text) => {
        if (phase !== "open" || !records) throw new Error("appduct: the sealed channel is not open");
        for (const message of records.sealFrame(text)) ws.send(toArrayBuffer(message));
      },
      close: (code, reason) => {
        const wasOpen = phase === "open";
        phase = "closed";
        shut(code, reason, wasOpen);
      },
    };

    ws.onopen = () => {
      if (phase !== "opening") return;
      try {
        if (target.secret) random.reseed(target.secret);
        const rng = random.source();
        initiator = new SealedInitiator({ remoteStatic: staticKey, random: (n) => random.bytes(n), rng });
        const message1 = initiator.start();
        phase = "handshake";
        options.onHandshake?.({ rng });
        ws.send(toArrayBuffer(message1));
      } catch {
        // No randomness at all (no CSPRNG and no secret): nothing can be sent safely.
        shut(1000, "sealed_unavailable", false);
        report({ error: "sealed_unavailable" });
      }
    };

    ws.onmessage = (event) => {
      if (phase === "closed" || phase === "opening") return;
      const bytes = toBytes(event.data);
      if (!bytes) {
        // A text message on a sealed connection breaks the protocol.
        shut(1002, "protocol_error", phase === "open");
        report({});
        return;
      }
      if (phase === "handshake") {
        try {
          records = (initiator as SealedInitiator).finish(bytes).records;
        } catch {
          // Message 2 does not authenticate: the responder is not the daemon the link names.
          shut(1008, HANDSHAKE_FAILED_REASON, false);
          report({ error: "handshake_failed" });
          return;
        }
        initiator = null;
        phase = "open";
        socket.onopen?.();
        return;
      }
      let result;
      try {
        result = (records as SealedRecords).open(bytes);
      } catch (error) {
        if (error instanceof RecordError) {
          shut(error.code, error.reason, true);
        } else {
          // Authentication failed (tampered, replayed, reordered, truncated): the channel is broken.
          shut(1008, error instanceof NoiseError ? "sealed_record_invalid" : "protocol_error", false);
        }
        report({});
        return;
      }
      if (result.type === "frame") {
        socket.onmessage?.(result.text);
      } else if (result.type === "close") {
        // The daemon's authenticated close: act on its code (a terminal 1008 stops the core).
        const close: TransportCloseEvent = { code: result.code };
        if (result.reason !== "") close.reason = result.reason;
        // The answering WebSocket close is bare: the reason stays sealed.
        shut(1000, "", false);
        report(close);
      }
    };

    ws.onerror = () => {
      // A close event follows every error; it reports the loss.
    };

    ws.onclose = (event) => {
      if (phase === "handshake" && event.code === 1008 && event.reason === HANDSHAKE_FAILED_REASON) {
        // Unauthenticated, but the only way the daemon can say it: it cannot read message 1.
        report({ error: "handshake_failed" });
        return;
      }
      // No close record: unauthenticated, so no code (treated as 1006).
      report({});
    };
    return socket;
  };
}
