// A stand-in for the daemon's control socket: a Unix socket server in a temp state directory
// that records every JSON-RPC request and lets each test answer (or not) as it likes. The test
// runner client's unit tests use it; the end-to-end suite runs the real daemon.

import { mkdtempSync, rmSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";

export type Cleanup = () => Promise<void> | void;

export interface FakeConnection {
  socket: net.Socket;
  /** Raw lines received, in order. */
  lines: string[];
  /** Writes one message (an object is JSON-encoded and given a newline; a string is raw). */
  send(message: Record<string, unknown> | string): void;
  /** Resolves when the client has closed this connection. */
  ended: Promise<void>;
}

export interface ReceivedRequest {
  connection: FakeConnection;
  id: unknown;
  method: string;
  params: Record<string, unknown> | undefined;
  reply(result: unknown): void;
  fail(type: string, message: string, details?: unknown, extra?: { code?: number; callId?: string }): void;
}

export interface FakeControl {
  stateDir: string;
  socketPath: string;
  connections: FakeConnection[];
  requests: ReceivedRequest[];
  /** The first request (seen or future) with this method that `match` accepts. */
  nextRequest(method: string, match?: (r: ReceivedRequest) => boolean): Promise<ReceivedRequest>;
  /** Answers every future request of `method` (set before the client sends it). */
  answer(method: string, handler: (r: ReceivedRequest) => void): void;
  /** Resolves with the next accepted connection (seen or future, by index). */
  connection(index: number): Promise<FakeConnection>;
  listen(): Promise<void>;
}

export const SUMMARY = { sessionId: "q3VfZ0xkR2ptTnB4", alias: "pixel-8", state: "active", transport: "native", device: {}, toolCount: 0, eventCount: 0 };

/** A fresh state directory under the system temp dir (short enough for a socket path). */
export function tempStateDir(cleanups: Cleanup[]): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), "adc-"));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/**
 * Starts the fake in a fresh state dir (listening unless `listen: false`). `sessions.describe`
 * answers with `SUMMARY` unless a test sets another answer.
 */
export async function startFakeControl(cleanups: Cleanup[], options: { listen?: boolean } = {}): Promise<FakeControl> {
  const stateDir = tempStateDir(cleanups);
  const socketPath = path.join(stateDir, "daemon.sock");
  const handlers = new Map<string, (r: ReceivedRequest) => void>([["sessions.describe", (r) => r.reply(SUMMARY)]]);
  const requestWaiters: { method: string; match: (r: ReceivedRequest) => boolean; resolve: (r: ReceivedRequest) => void }[] = [];
  const connectionWaiters: { index: number; resolve: (c: FakeConnection) => void }[] = [];
  const fake: FakeControl = {
    stateDir,
    socketPath,
    connections: [],
    requests: [],
    nextRequest: (method, match = () => true) =>
      new Promise((resolve) => {
        const seen = fake.requests.find((r) => r.method === method && match(r));
        if (seen) resolve(seen);
        else requestWaiters.push({ method, match, resolve });
      }),
    answer: (method, handler) => void handlers.set(method, handler),
    connection: (index) =>
      new Promise((resolve) => {
        const seen = fake.connections[index];
        if (seen) resolve(seen);
        else connectionWaiters.push({ index, resolve });
      }),
    listen: async () => {
      server.listen(socketPath);
      await new Promise((resolve) => server.once("listening", resolve));
    },
  };

  const server = net.createServer((socket) => {
    let buffer = "";
    const connection: FakeConnection = {
      socket,
      lines: [],
      send: (message) => socket.write(typeof message === "string" ? message : `${JSON.stringify(message)}\n`),
      ended: new Promise((resolve) => socket.once("close", () => resolve())),
    };
    fake.connections.push(connection);
    for (const waiter of connectionWaiters.filter((w) => w.index === fake.connections.length - 1)) {
      connectionWaiters.splice(connectionWaiters.indexOf(waiter), 1);
      waiter.resolve(connection);
    }
    socket.on("error", () => undefined);
    socket.on("data", (chunk) => {
      buffer += chunk.toString("utf8");
      let newline: number;
      while ((newline = buffer.indexOf("\n")) !== -1) {
        const line = buffer.slice(0, newline);
        buffer = buffer.slice(newline + 1);
        connection.lines.push(line);
        const message = JSON.parse(line) as { id: unknown; method: string; params?: Record<string, unknown> };
        const request: ReceivedRequest = {
          connection,
          id: message.id,
          method: message.method,
          params: message.params,
          reply: (result) => connection.send({ jsonrpc: "2.0", id: message.id, result }),
          fail: (type, text, details, extra = {}) =>
            connection.send({
              jsonrpc: "2.0",
              id: message.id,
              error: {
                code: extra.code ?? -32000,
                message: text,
                data: { type, ...(extra.callId === undefined ? {} : { callId: extra.callId }), ...(details === undefined ? {} : { details }) },
              },
            }),
        };
        fake.requests.push(request);
        handlers.get(request.method)?.(request);
        for (const waiter of requestWaiters.filter((w) => w.method === request.method && w.match(request))) {
          requestWaiters.splice(requestWaiters.indexOf(waiter), 1);
          waiter.resolve(request);
        }
      }
    });
  });
  cleanups.push(
    () =>
      new Promise<void>((resolve) => {
        for (const c of fake.connections) c.socket.destroy();
        if (server.listening) server.close(() => resolve());
        else resolve();
      }),
  );
  if (options.listen ?? true) await fake.listen();
  return fake;
}
