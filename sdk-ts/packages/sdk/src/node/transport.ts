// The Node transport (§T10): `wss://` through `ws` over a TLS socket whose leaf pin was
// checked before the HTTP upgrade (§D3.4), or loopback `ws://` with no Origin header for web
// links; WebSocket ping keepalive (§D13.6).

import tls from "node:tls";

import WebSocket from "ws";

import type { Clock, TransportCloseEvent, TransportFactory, TransportSocket, TransportTarget } from "../core/types.js";
import { pinFromPublicKey, pinMatches } from "./pin.js";

export interface NodeTransportOptions {
  /** Timers of the keepalive; defaults to the system clock. */
  clock?: Pick<Clock, "setTimeout" | "clearTimeout">;
}

const systemTimers: Pick<Clock, "setTimeout" | "clearTimeout"> = {
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
};

/** Builds the transport factory of the Node entry. */
export function createNodeTransport(options: NodeTransportOptions = {}): TransportFactory {
  const timers = options.clock ?? systemTimers;
  return (target) => new NodeSocket(target, timers);
}

function hostAndPort(url: string): { host: string; port: number } {
  const parsed = new URL(url);
  // URL keeps IPv6 literals bracketed; sockets want them bare.
  const host = parsed.hostname.startsWith("[") ? parsed.hostname.slice(1, -1) : parsed.hostname;
  return { host, port: Number(parsed.port) };
}

class NodeSocket implements TransportSocket {
  onopen: (() => void) | null = null;
  onmessage: ((text: string) => void) | null = null;
  onclose: ((event: TransportCloseEvent) => void) | null = null;

  private ws: WebSocket | null = null;
  private tlsSocket: tls.TLSSocket | null = null;
  private closed = false;
  private keepaliveTimer: unknown = null;
  private awaitingPong = false;

  constructor(
    target: TransportTarget,
    private readonly timers: Pick<Clock, "setTimeout" | "clearTimeout">,
  ) {
    // Callbacks are assigned after construction returns: start on the next tick.
    queueMicrotask(() => {
      if (this.closed) return;
      if (target.transport === "web") {
        this.attach(new WebSocket(target.url, { perMessageDeflate: false }));
      } else {
        this.connectPinned(target);
      }
    });
  }

  /** TLS first; the pin check runs on `secureConnect`, before any HTTP byte is written. */
  private connectPinned(target: TransportTarget): void {
    const { host, port } = hostAndPort(target.url);
    // Chain, hostname and date checks are replaced by the pin check below, in this code path.
    const socket = tls.connect({ host, port, rejectUnauthorized: false, servername: "" });
    this.tlsSocket = socket;
    const onError = (error: Error): void => this.finish({ error: error.message });
    socket.once("error", onError);
    socket.once("secureConnect", () => {
      const peer = socket.getPeerX509Certificate();
      const pin = peer ? pinFromPublicKey(peer.publicKey) : null;
      if (!pin || !pinMatches(pin, target.pins)) {
        socket.destroy();
        this.finish({ error: "pin_mismatch" });
        return;
      }
      socket.off("error", onError);
      if (this.closed) {
        socket.destroy();
        return;
      }
      // The upgrade request and every frame go to this verified socket only.
      this.attach(new WebSocket(target.url, { perMessageDeflate: false, createConnection: () => socket }));
    });
  }

  private attach(ws: WebSocket): void {
    this.ws = ws;
    ws.on("open", () => {
      if (!this.closed) this.onopen?.();
    });
    ws.on("message", (data, isBinary) => {
      if (this.closed || isBinary) return;
      this.onmessage?.(Array.isArray(data) ? Buffer.concat(data).toString("utf8") : Buffer.from(data as ArrayBuffer).toString("utf8"));
    });
    ws.on("pong", () => {
      this.awaitingPong = false;
    });
    ws.on("error", () => {
      // A close event follows every error; it reports the loss.
    });
    ws.on("close", (code, reason) => {
      const event: TransportCloseEvent = {};
      if (code !== 1005 && code !== 1006) event.code = code;
      const text = reason.toString("utf8");
      if (text !== "") event.reason = text;
      this.finish(event);
    });
  }

  private finish(event: TransportCloseEvent): void {
    if (this.closed) return;
    this.closed = true;
    this.stopKeepalive();
    this.onclose?.(event);
  }

  send(text: string): void {
    if (!this.ws || this.ws.readyState !== WebSocket.OPEN) {
      throw new Error("the socket is not open");
    }
    this.ws.send(text);
  }

  close(code: number, reason: string): void {
    this.closed = true;
    this.stopKeepalive();
    if (this.ws) {
      try {
        this.ws.close(code, reason);
      } catch {
        this.ws.terminate();
      }
    } else {
      this.tlsSocket?.destroy();
    }
  }

  startKeepalive(intervalMs: number): void {
    this.stopKeepalive();
    const tick = (): void => {
      const ws = this.ws;
      if (this.closed || !ws) return;
      if (this.awaitingPong) {
        // The previous ping went unanswered for a whole interval: the connection is lost.
        ws.terminate();
        return;
      }
      this.awaitingPong = true;
      ws.ping();
      this.keepaliveTimer = this.timers.setTimeout(tick, intervalMs);
    };
    this.keepaliveTimer = this.timers.setTimeout(tick, intervalMs);
  }

  private stopKeepalive(): void {
    if (this.keepaliveTimer !== null) {
      this.timers.clearTimeout(this.keepaliveTimer);
      this.keepaliveTimer = null;
    }
  }
}
