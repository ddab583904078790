// A test-only watcher of the real daemon's event bus: one control-socket connection
// (newline-delimited JSON-RPC, §C2–§C3) with an `events.subscribe` filter covering every
// session and kind, so tests wait on `session_claimed`, `tools_changed`, `session_resumed`…
// instead of polling.

import net from "node:net";
import path from "node:path";

import type { Cleanup } from "./fake-daemon.js";
import { within } from "./processes.js";

export interface DaemonEvent {
  kind: string;
  sessionId?: string;
  alias?: string;
  ts: number;
  seq: number;
  data: Record<string, unknown>;
}

export interface EventWatch {
  /** Every event received so far, in order. */
  readonly events: DaemonEvent[];
  /** Resolves with the first event (already received or future) that `match` accepts. */
  waitFor(match: (e: DaemonEvent) => boolean, ms: number, what: string): Promise<DaemonEvent>;
}

/** Subscribes to every event of the daemon at `stateDir`; resolves once the filter is active. */
export async function watchDaemonEvents(cleanups: Cleanup[], stateDir: string): Promise<EventWatch> {
  const socket = net.createConnection(path.join(stateDir, "daemon.sock"));
  cleanups.push(() => {
    socket.destroy();
  });
  const events: DaemonEvent[] = [];
  const waiters: { match: (e: DaemonEvent) => boolean; resolve: (e: DaemonEvent) => void }[] = [];
  let subscribed: (error?: Error) => void = () => undefined;
  const confirmed = new Promise<void>((resolve, reject) => {
    subscribed = (error) => (error ? reject(error) : resolve());
  });
  let buffered = "";
  socket.setEncoding("utf8");
  socket.on("data", (chunk: string) => {
    buffered += chunk;
    let end: number;
    while ((end = buffered.indexOf("\n")) >= 0) {
      const line = buffered.slice(0, end);
      buffered = buffered.slice(end + 1);
      if (line.trim() === "") continue;
      const message = JSON.parse(line) as { id?: unknown; method?: string; params?: DaemonEvent; result?: unknown; error?: unknown };
      if (message.id === 1) {
        subscribed(message.error ? new Error(`events.subscribe failed: ${JSON.stringify(message.error)}`) : undefined);
      } else if (message.method === "event" && message.params) {
        const event = message.params;
        events.push(event);
        for (const waiter of waiters.filter((w) => w.match(event))) {
          waiters.splice(waiters.indexOf(waiter), 1);
          waiter.resolve(event);
        }
      }
    }
  });
  socket.on("error", (error) => subscribed(error));
  // Handlers are in place before the request (§C14).
  socket.write(`${JSON.stringify({ jsonrpc: "2.0", id: 1, method: "events.subscribe", params: {} })}\n`);
  await within(confirmed, 10_000, "the events.subscribe response");
  return {
    events,
    waitFor: (match, ms, what) => {
      const seen = events.find(match);
      if (seen) return Promise.resolve(seen);
      const found = new Promise<DaemonEvent>((resolve) => waiters.push({ match, resolve }));
      return within(found, ms, `${what}; events so far: ${JSON.stringify(events.map((e) => [e.kind, e.sessionId]))}`);
    },
  };
}
