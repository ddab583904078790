// A stand-in for the daemon's device listeners: a TLS (or plain) WebSocket server that acks every
// claim or resume and records what reaches it. Unit tests use it in place of the real daemon.

import { once } from "node:events";
import http from "node:http";
import https from "node:https";
import type { AddressInfo } from "node:net";

import { WebSocketServer, type WebSocket as ServerSocket } from "ws";

import { pinFromCertificateDer } from "../../src/node/pin.js";
import { makeSelfSignedCertificate } from "./cert.js";

export type Cleanup = () => Promise<void> | void;

export interface FakeDaemon {
  port: number;
  pin?: string;
  upgrades: number;
  tcpConnections: number;
  messages: Record<string, unknown>[];
  origins: (string | undefined)[];
  sockets: ServerSocket[];
}

/** Starts a listener on 127.0.0.1; `cleanups` receives its shutdown. */
export async function startDaemon(cleanups: Cleanup[], kind: "tls" | "plain", options: { autoPong?: boolean } = {}): Promise<FakeDaemon> {
  const cert = makeSelfSignedCertificate();
  const server = kind === "tls" ? https.createServer({ key: cert.keyPem, cert: cert.certPem }) : http.createServer();
  const daemon: FakeDaemon = { port: 0, upgrades: 0, tcpConnections: 0, messages: [], origins: [], sockets: [] };
  if (kind === "tls") daemon.pin = pinFromCertificateDer(cert.der);
  server.on("connection", () => daemon.tcpConnections++);
  server.on("upgrade", (req: http.IncomingMessage) => {
    daemon.upgrades++;
    daemon.origins.push(req.headers.origin);
  });
  const wss = new WebSocketServer({ server, autoPong: options.autoPong ?? true });
  wss.on("connection", (ws) => {
    daemon.sockets.push(ws);
    ws.on("message", (data) => {
      const frame = JSON.parse(data.toString()) as Record<string, unknown>;
      daemon.messages.push(frame);
      if (frame.type === "session_claim" || frame.type === "session_resume") {
        ws.send(
          JSON.stringify({ type: "session_ack", session_id: frame.session_id, status: "ok", alias: "node-js", resume_token: "resume-1", keepalive_interval_s: 15, grace_s: 600, event_registry: true }),
        );
      }
    });
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  daemon.port = (server.address() as AddressInfo).port;
  cleanups.push(async () => {
    for (const ws of daemon.sockets) ws.terminate();
    wss.close();
    server.close();
    server.closeAllConnections?.();
    await once(server, "close");
  });
  return daemon;
}
