// Sends one `link_refused` frame (PROTOCOL.md "Refusals") over a plain WebSocket to the
// listener a refused link names, then lets the daemon close (`1000 refusal_recorded` or
// `1008 invalid_refusal`); gives up after a few seconds. Best effort: nothing is reported back.

import type { LinkRefusal } from "../core/types.js";
import type { WebSocketConstructor, WebSocketLike } from "./transport.js";

const GIVE_UP_MS = 5_000;

export interface RefusalSenderOptions {
  /** Each refusal's outcome: the daemon's close code and reason, or `error` (tests, logs). */
  onDone?: (refusal: LinkRefusal, outcome: { code?: number; reason?: string; error?: string }) => void;
}

export function createWebSocketRefusalSender(ctor?: () => WebSocketConstructor | undefined, options: RefusalSenderOptions = {}): (refusal: LinkRefusal) => void {
  return (refusal) => {
    const WebSocketImpl = ctor?.() ?? (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
    if (!WebSocketImpl) return;
    let ws: WebSocketLike;
    try {
      ws = new WebSocketImpl(refusal.url);
    } catch {
      options.onDone?.(refusal, { error: "unreachable" });
      return;
    }
    let done = false;
    const finish = (outcome: { code?: number; reason?: string; error?: string }): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      options.onDone?.(refusal, outcome);
    };
    const timer = setTimeout(() => {
      try {
        ws.close(1000, "");
      } catch {
        // Already closed.
      }
      finish({ error: "timeout" });
    }, GIVE_UP_MS);
    ws.onopen = () => {
      try {
        ws.send(refusal.frame);
      } catch {
        finish({ error: "send_failed" });
      }
    };
    ws.onmessage = () => undefined;
    ws.onerror = () => undefined;
    ws.onclose = (event) => {
      const outcome: { code?: number; reason?: string } = {};
      if (typeof event.code === "number") outcome.code = event.code;
      if (typeof event.reason === "string" && event.reason !== "") outcome.reason = event.reason;
      finish(outcome);
    };
  };
}
