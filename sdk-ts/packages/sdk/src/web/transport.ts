// A transport over the platform's global WebSocket (browsers, React Native): loopback `ws://`
// to the daemon's web listener (§D2.2).

import type { TransportCloseEvent, TransportFactory, TransportSocket } from "../core/types.js";

/** The part of the WHATWG WebSocket this transport uses. */
export interface WebSocketLike {
  send(data: string | ArrayBuffer): void;
  close(code?: number, reason?: string): void;
  onopen: ((event: unknown) => void) | null;
  onmessage: ((event: { data: unknown }) => void) | null;
  onclose: ((event: { code?: number; reason?: string }) => void) | null;
  onerror: ((event: unknown) => void) | null;
  /** Binary messages arrive as ArrayBuffer when this is `"arraybuffer"` (sealed transport). */
  binaryType?: string;
}

export type WebSocketConstructor = new (url: string) => WebSocketLike;

/** Browsers only accept close codes 1000 and 3000–4999 from scripts; anything else becomes 1000. */
function scriptCloseCode(code: number): number {
  return code === 1000 || (code >= 3000 && code <= 4999) ? code : 1000;
}

export interface WebSocketTransportOptions {
  /**
   * Pass every close code through (React Native's WebSocket sends `1001 app_backgrounded`);
   * otherwise codes a browser script may not use become 1000.
   */
  anyCloseCode?: boolean;
}

/** Builds a factory over `WebSocket` (read from `globalThis` when each socket opens). */
export function createWebSocketTransport(ctor?: () => WebSocketConstructor | undefined, options: WebSocketTransportOptions = {}): TransportFactory {
  return (target) => {
    const WebSocketImpl = ctor?.() ?? (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
    if (!WebSocketImpl) {
      throw new Error("appduct: no WebSocket implementation is available");
    }
    if (target.transport === "sealed") {
      // Never open a sealed target as plain WebSocket: its first frame carries a token.
      throw new Error("appduct: a sealed target needs the sealed transport");
    }
    const ws = new WebSocketImpl(target.url);
    let closed = false;
    const socket: TransportSocket = {
      onopen: null,
      onmessage: null,
      onclose: null,
      send: (text) => ws.send(text),
      close: (code, reason) => {
        closed = true;
        ws.close(options.anyCloseCode ? code : scriptCloseCode(code), reason);
      },
    };
    ws.onopen = () => {
      if (!closed) socket.onopen?.();
    };
    ws.onmessage = (event) => {
      // The daemon only sends text; anything else is ignored.
      if (!closed && typeof event.data === "string") socket.onmessage?.(event.data);
    };
    ws.onerror = () => {
      // A close event follows every error; it reports the loss.
    };
    ws.onclose = (event) => {
      if (closed) return;
      closed = true;
      const out: TransportCloseEvent = {};
      if (typeof event.code === "number" && event.code !== 1005 && event.code !== 1006) out.code = event.code;
      if (typeof event.reason === "string" && event.reason !== "") out.reason = event.reason;
      socket.onclose?.(out);
    };
    return socket;
  };
}
