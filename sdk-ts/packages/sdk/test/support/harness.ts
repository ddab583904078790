// A client over the fake transport and a manual clock, with everything it reports recorded.

import { createAppductClient } from "../../src/core/client.js";
import { createMemoryLeaseStore } from "../../src/core/lease.js";
import type { AppductClient, AppductClientOptions, AppductErrorEvent, LeaseStore, SessionChangeEvent, StateChangeEvent } from "../../src/core/types.js";
import { FakeTransport, flush, type FakeSocket } from "./fake-transport.js";
import { ManualClock } from "./manual-clock.js";

export const START_MS = 1_700_000_000_000;
export const SESSION = "session-1";

export interface Harness {
  client: AppductClient;
  transport: FakeTransport;
  clock: ManualClock;
  lease: LeaseStore;
  states: StateChangeEvent[];
  sessions: SessionChangeEvent[];
  errors: AppductErrorEvent[];
  warnings: string[];
  logged: string[];
  /** Every listener call and abort in order, as short strings. */
  timeline: string[];
}

export function ack(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    type: "session_ack",
    session_id: SESSION,
    status: "ok",
    alias: "phone",
    resume_token: "resume-1",
    keepalive_interval_s: 15,
    grace_s: 10,
    event_registry: true,
    ...overrides,
  };
}

export function makeHarness(options: Partial<AppductClientOptions> = {}): Harness {
  const transport = new FakeTransport();
  const clock = new ManualClock(START_MS);
  const lease = options.leaseStore ?? createMemoryLeaseStore();
  const warnings: string[] = [];
  const logged: string[] = [];
  const client = createAppductClient({
    transport: transport.factory,
    clock,
    random: () => 0.5,
    leaseStore: lease,
    logger: {
      warn: (...args) => warnings.push(args.map(String).join(" ")),
      error: (...args) => logged.push(args.map(String).join(" ")),
    },
    ...options,
  });
  const h: Harness = { client, transport, clock, lease, states: [], sessions: [], errors: [], warnings, logged, timeline: [] };
  client.addAppductListener("stateChange", (e) => {
    h.states.push(e);
    h.timeline.push(`state:${e.state}${e.reason ? `:${e.reason}` : ""}`);
  });
  client.addAppductListener("sessionChange", (e) => {
    h.sessions.push(e);
    h.timeline.push(`session:${e.type}${e.reason ? `:${e.reason}` : ""}`);
  });
  client.addAppductListener("error", (e) => {
    h.errors.push(e);
    h.timeline.push(`error:${e.code ?? ""}`);
  });
  return h;
}

/** Starts a claim through `connectBootstrap` and waits for the socket to open. */
export async function startClaim(h: Harness, sessionId = SESSION): Promise<{ socket: FakeSocket; done: Promise<void> }> {
  const done = h.client.connectBootstrap({ sessionId, token: "claim-token", expiresAt: START_MS / 1000 + 300, address: "127.0.0.1", port: 8443, transport: "native" });
  done.catch(() => undefined);
  await flush();
  return { socket: h.transport.newest, done };
}

/** Claims and acks: the client is `active` and the snapshots went out. */
export async function activate(h: Harness, ackOverrides: Record<string, unknown> = {}): Promise<FakeSocket> {
  const { socket, done } = await startClaim(h);
  socket.receive(ack(ackOverrides));
  await done;
  return socket;
}

/** Frames after the first (the claim or resume), parsed. */
export function framesAfterHandshake(socket: FakeSocket): Record<string, unknown>[] {
  return socket.frames.slice(1);
}

export function lastFrame(socket: FakeSocket): Record<string, unknown> {
  const frames = socket.frames;
  return frames[frames.length - 1] as Record<string, unknown>;
}
