// Runs inside the Hermes CLI (bundled by test/hermes.test.ts): the React Native client itself
// (createReactNativeClient: the core, the sealed WebSocket transport, the DRBG) claims a sealed
// link and serves a tool call, against an in-script daemon stand-in (this SDK's Noise responder)
// behind a fake WebSocket. Hermes has no `crypto`, so this is the DRBG path, as on a phone
// without react-native-get-random-values. React Native provides AbortController and console;
// the Hermes CLI does not, so minimal ones are installed first.

import { encodeSealedBootstrapPayload } from "../../src/core/bootstrap.js";
import { SealedResponder, type SealedRecords } from "../../src/core/sealed/channel.js";
import { createSealedRandom } from "../../src/core/sealed/random.js";
import { generateKeyPair } from "../../src/core/sealed/noise.js";
import { createReactNativeClient } from "../../src/react-native/client.js";
import type { WebSocketConstructor, WebSocketLike } from "../../src/web/transport.js";

declare const print: (...args: unknown[]) => void;

const g = globalThis as Record<string, unknown>;
if (typeof g.crypto !== "undefined" || typeof g.TextEncoder !== "undefined") throw new Error("expected a Hermes without crypto and TextEncoder");
if (typeof g.console === "undefined") {
  // React Native has a console; the Hermes CLI only `print`. Warnings go to stdout.
  g.console = { log: print, warn: (...a: unknown[]) => print("warn:", ...a), error: (...a: unknown[]) => print("error:", ...a) };
}
{
  // The Hermes CLI runs timers in the order they were set, whatever their delay, and runs its
  // Promise jobs through the same queue; React Native honours delays. So timers are put in
  // delay order here: a pump on the CLI's queue yields many times (letting queued jobs run)
  // before it runs the earliest timer.
  const cliSetTimeout = g.setTimeout as (fn: () => void, ms: number) => unknown;
  const timers: { due: number; seq: number; fn: () => void; cancelled: boolean }[] = [];
  let now = 0;
  let seq = 0;
  let pumping = false;
  const pump = (yields: number): void => {
    if (yields > 0) {
      cliSetTimeout(() => pump(yields - 1), 0);
      return;
    }
    const live = timers.filter((t) => !t.cancelled).sort((a, b) => a.due - b.due || a.seq - b.seq);
    timers.length = 0;
    timers.push(...live);
    const next = timers.shift();
    if (!next) {
      pumping = false;
      return;
    }
    now = Math.max(now, next.due);
    next.fn();
    cliSetTimeout(() => pump(50), 0);
  };
  g.setTimeout = (fn: () => void, ms?: number) => {
    const timer = { due: now + (ms ?? 0), seq: seq++, fn, cancelled: false };
    timers.push(timer);
    if (!pumping) {
      pumping = true;
      cliSetTimeout(() => pump(50), 0);
    }
    return timer;
  };
  g.clearTimeout = (timer: { cancelled: boolean } | undefined) => {
    if (timer) timer.cancelled = true;
  };
}
if (typeof g.AbortController === "undefined") {
  // What React Native's abort-controller polyfill provides, reduced to what the core uses.
  g.AbortController = function AbortControllerShim(this: { signal: unknown; abort(): void }) {
    const listeners: (() => void)[] = [];
    const signal = { aborted: false, reason: undefined as unknown, addEventListener: (_t: string, f: () => void) => listeners.push(f), removeEventListener: () => undefined };
    this.signal = signal;
    this.abort = () => {
      if (signal.aborted) return;
      signal.aborted = true;
      listeners.forEach((f) => f());
    };
  };
}

// The daemon's side, seeded from a DRBG of its own (test only).
const daemonRandom = createSealedRandom();
daemonRandom.reseed(Uint8Array.from([1, 2, 3, 4, 5, 6, 7, 8]));
const daemonKey = generateKeyPair((n) => daemonRandom.bytes(n));
const log: string[] = [];
let daemonRecords: SealedRecords | null = null;
let appRng: unknown = null;
const token = daemonRandom.bytes(32);

class FakeWebSocket implements WebSocketLike {
  onopen: ((event: unknown) => void) | null = null;
  onmessage: ((event: { data: unknown }) => void) | null = null;
  onclose: ((event: { code?: number; reason?: string }) => void) | null = null;
  onerror: ((event: unknown) => void) | null = null;
  binaryType?: string;
  constructor(readonly url: string) {
    setTimeout(() => this.onopen?.({}), 0);
  }
  private deliver(bytes: Uint8Array): void {
    setTimeout(() => this.onmessage?.({ data: bytes.slice().buffer }), 0);
  }
  send(data: string | ArrayBuffer): void {
    if (typeof data === "string") throw new Error("text on a sealed socket");
    const bytes = new Uint8Array(data);
    if (!daemonRecords) {
      const responder = new SealedResponder({ staticKeyPair: daemonKey, random: (n) => daemonRandom.bytes(n) });
      const accepted = responder.accept(bytes);
      appRng = accepted.payload.rng;
      daemonRecords = accepted.records;
      this.deliver(accepted.message2);
      return;
    }
    const event = daemonRecords.open(bytes);
    if (event.type !== "frame") return;
    const frame = JSON.parse(event.text) as Record<string, unknown>;
    log.push(String(frame.type));
    const reply = (f: Record<string, unknown>): void => {
      for (const r of (daemonRecords as SealedRecords).sealFrame(JSON.stringify(f))) this.deliver(r);
    };
    if (frame.type === "session_claim") {
      reply({ type: "session_ack", session_id: frame.session_id, status: "ok", alias: "hermes", resume_token: "r1", keepalive_interval_s: 15, grace_s: 600 });
    } else if (frame.type === "tool_registry_snapshot") {
      reply({ type: "tool_call", session_id: frame.session_id, id: "c1", name: "add", args: { a: 2, b: 40 } });
    } else if (frame.type === "tool_result") {
      const result = (frame.result as { sum: number }).sum;
      if (result !== 42) throw new Error(`wrong result ${result}`);
      print(`APPDUCT_HERMES_CLIENT_OK rng=${String(appRng)} frames=${log.join(",")}`);
    }
  }
  close(): void {
    setTimeout(() => this.onclose?.({ code: 1000 }), 0);
  }
}

const client = createReactNativeClient({
  platform: { OS: "ios", Version: "18.2" },
  webSocket: () => FakeWebSocket as unknown as WebSocketConstructor,
  dev: true,
});
client.registerTool({
  name: "add",
  description: "Adds.",
  inputSchema: { type: "object", properties: { a: { type: "number" }, b: { type: "number" } }, required: ["a", "b"] },
  outputSchema: { type: "object", properties: { sum: { type: "number" } } },
  handler: (args) => ({ sum: (args as { a: number; b: number }).a + (args as { a: number; b: number }).b }),
});
const payload = encodeSealedBootstrapPayload({ address: "192.168.1.20", port: 8443, sessionId: "hermes-session", token, expiresAt: 4_000_000_000, staticKey: daemonKey.publicKey });
client.connect(`rnapp:///?appduct=${payload}`).then(
  () => print("connected"),
  (error: unknown) => {
    throw error;
  },
);
