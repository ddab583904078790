// A stand-in for the daemon's plain route (PROTOCOL.md "Sealed transport"), on 127.0.0.1 with
// the `ws` package: a Noise NK responder (this SDK's own, checked against snow's vectors) that
// records every frame an app sends and lets a test answer; a first text message is read as a
// `link_refused` frame and its proof checked. And a TCP relay that captures every byte between
// an app and a listener.

import { once } from "node:events";
import net from "node:net";

import { WebSocketServer, type WebSocket } from "ws";

import { decodeBase64urlStrict } from "../../src/core/base64.js";
import { generateKeyPair, type KeyPair } from "../../src/core/sealed/noise.js";
import { SealedResponder, type SealedRecords } from "../../src/core/sealed/channel.js";
import { linkRefusalProof, type LinkRefusalReason } from "../../src/core/sealed/refusal.js";
import type { Cleanup } from "./fake-daemon.js";
import { within } from "./processes.js";

const randomBytes = (n: number): Uint8Array => globalThis.crypto.getRandomValues(new Uint8Array(n));

export interface SealedConnection {
  ws: WebSocket;
  /** The app's `rng` from message 1. */
  rng: unknown;
  frames: Record<string, unknown>[];
  records: SealedRecords;
  /** Resolves with the first frame (seen or future) matching `match`. */
  frame(match: (f: Record<string, unknown>) => boolean, what: string): Promise<Record<string, unknown>>;
  send(frame: Record<string, unknown>): void;
  /** A close record, then a bare 1000 WebSocket close (as the daemon closes). */
  sealedClose(code: number, reason: string): void;
  closedByApp: Promise<{ code: number; reason: string }>;
  /** Close records the app sent. */
  closeRecords: { code: number; reason: string }[];
}

export interface Refusal {
  frame: Record<string, unknown>;
  proofValid: boolean;
}

export interface FakeSealedDaemon {
  port: number;
  staticKey: KeyPair;
  connections: SealedConnection[];
  refusals: Refusal[];
  nextConnection(): Promise<SealedConnection>;
  nextRefusal(): Promise<Refusal>;
  /** Claim tokens (base64url) of links this daemon minted: refusal proofs are checked against them. */
  tokens: Map<string, string>;
  /**
   * Forgeries an attacker on the path makes, one per coming message 1, in order: `close` answers
   * with the plain close `1008 sealed_handshake_failed`, `message2` with random bytes.
   */
  forge: ("close" | "message2")[];
}

export async function startFakeSealedDaemon(cleanups: Cleanup[], options: { staticKey?: KeyPair } = {}): Promise<FakeSealedDaemon> {
  const staticKey = options.staticKey ?? generateKeyPair(randomBytes);
  const server = new WebSocketServer({ host: "127.0.0.1", port: 0 });
  await once(server, "listening");
  cleanups.push(
    () =>
      new Promise<void>((resolve) => {
        for (const client of server.clients) client.terminate();
        server.close(() => resolve());
      }),
  );
  const connections: SealedConnection[] = [];
  const refusals: Refusal[] = [];
  const connectionWaiters: ((c: SealedConnection) => void)[] = [];
  const refusalWaiters: ((r: Refusal) => void)[] = [];
  const tokens = new Map<string, string>();
  const forge: ("close" | "message2")[] = [];

  server.on("connection", (ws) => {
    let conn: SealedConnection | null = null;
    const waiters: { match: (f: Record<string, unknown>) => boolean; resolve: (f: Record<string, unknown>) => void }[] = [];
    let resolveClosed: (v: { code: number; reason: string }) => void = () => undefined;
    const closedByApp = new Promise<{ code: number; reason: string }>((resolve) => (resolveClosed = resolve));
    ws.on("close", (code, reason) => resolveClosed({ code, reason: reason.toString() }));
    ws.on("message", (data, isBinary) => {
      if (!conn) {
        if (!isBinary) {
          const frame = JSON.parse(data.toString()) as Record<string, unknown>;
          const token = tokens.get(String(frame.session_id));
          const proofValid = token !== undefined && frame.proof === linkRefusalProof(decodeBase64urlStrict(token) as Uint8Array, String(frame.session_id), frame.reason as LinkRefusalReason);
          const refusal = { frame, proofValid };
          refusals.push(refusal);
          refusalWaiters.splice(0).forEach((w) => w(refusal));
          ws.close(proofValid ? 1000 : 1008, proofValid ? "refusal_recorded" : "invalid_refusal");
          return;
        }
        const forged = forge.shift();
        if (forged === "close") {
          ws.close(1008, "sealed_handshake_failed");
          return;
        }
        if (forged === "message2") {
          ws.send(randomBytes(48));
          return;
        }
        const responder = new SealedResponder({ staticKeyPair: staticKey, random: randomBytes });
        let accepted;
        try {
          accepted = responder.accept(new Uint8Array(data as Buffer));
        } catch {
          ws.close(1008, "sealed_handshake_failed");
          return;
        }
        ws.send(accepted.message2);
        const records = accepted.records;
        const frames: Record<string, unknown>[] = [];
        const c: SealedConnection = {
          ws,
          rng: accepted.payload.rng,
          frames,
          records,
          closedByApp,
          frame: (match, what) =>
            within(
              new Promise((resolve) => {
                const seen = frames.find(match);
                if (seen) resolve(seen);
                else waiters.push({ match, resolve });
              }),
              10_000,
              `${what} (frames so far: ${frames.map((f) => String(f.type)).join(", ")})`,
            ),
          send: (frame) => {
            for (const message of records.sealFrame(JSON.stringify(frame))) ws.send(message);
          },
          sealedClose: (code, reason) => {
            ws.send(records.sealClose(code, reason));
            ws.close(1000, "");
          },
          closeRecords: [],
        };
        conn = c;
        connections.push(c);
        connectionWaiters.splice(0).forEach((w) => w(c));
        return;
      }
      let event;
      try {
        event = conn.records.open(new Uint8Array(data as Buffer));
      } catch (error) {
        console.error("fake sealed daemon: a record failed:", error);
        ws.close(1008, "sealed_record_invalid");
        return;
      }
      if (event.type === "close") conn.closeRecords.push({ code: event.code, reason: event.reason });
      if (event.type !== "frame") return;
      const frame = JSON.parse(event.text) as Record<string, unknown>;
      conn.frames.push(frame);
      for (const waiter of waiters.filter((w) => w.match(frame))) {
        waiters.splice(waiters.indexOf(waiter), 1);
        waiter.resolve(frame);
      }
    });
  });

  const address = server.address() as net.AddressInfo;
  let seenConnections = 0;
  let seenRefusals = 0;
  return {
    port: address.port,
    staticKey,
    connections,
    refusals,
    tokens,
    forge,
    nextConnection: () => {
      const index = seenConnections++;
      return within(
        new Promise((resolve) => {
          const check = (): void => {
            const c = connections[index];
            if (c) resolve(c);
            else connectionWaiters.push(() => check());
          };
          check();
        }),
        10_000,
        `sealed connection #${index + 1}`,
      );
    },
    nextRefusal: () => {
      const index = seenRefusals++;
      return within(
        new Promise((resolve) => {
          const check = (): void => {
            const r = refusals[index];
            if (r) resolve(r);
            else refusalWaiters.push(() => check());
          };
          check();
        }),
        10_000,
        `link_refused #${index + 1}`,
      );
    },
  };
}

/** A TCP relay on 127.0.0.1 in front of `targetPort`, keeping every byte each way. */
export async function startCapture(cleanups: Cleanup[], targetPort: number): Promise<{ port: number; bytes(): Buffer }> {
  const chunks: Buffer[] = [];
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(targetPort, "127.0.0.1");
    sockets.add(client);
    sockets.add(upstream);
    client.on("data", (d) => {
      chunks.push(Buffer.from(d));
      upstream.write(d);
    });
    upstream.on("data", (d) => {
      chunks.push(Buffer.from(d));
      client.write(d);
    });
    const end = (): void => {
      client.destroy();
      upstream.destroy();
    };
    client.on("close", end);
    upstream.on("close", end);
    client.on("error", end);
    upstream.on("error", end);
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  cleanups.push(
    () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  );
  return { port: (server.address() as net.AddressInfo).port, bytes: () => Buffer.concat(chunks) };
}
