// The session-scenario runner of §D15: drives a fresh core over a fake transport, a manual
// clock and a constant random source, and checks its outputs on two strictly ordered channels
// (wire and app) against a scenario's expect steps.

import { isDeepStrictEqual } from "node:util";

import { createAppductClient } from "../../src/core/client.js";
import { AppductToolError, type ToolErrorType } from "../../src/core/errors.js";
import type { AppductClient, ToolDefinition } from "../../src/core/types.js";
import { FakeTransport, flush, type FakeSocket } from "../support/fake-transport.js";
import { ManualClock } from "../support/manual-clock.js";

export type Step = Record<string, unknown> & ({ drive: string } | { expect: string });

export interface Scenario {
  name: string;
  startMs: number;
  random: number;
  steps: Step[];
}

type WireOutput = { kind: "connect"; frame: Record<string, unknown> } | { kind: "send"; frame: Record<string, unknown> } | { kind: "suspend" };
type AppOutput =
  | { kind: "state"; state: string; reason?: string }
  | { kind: "session"; type: string; reason?: string }
  | { kind: "call"; name: string; args: unknown }
  | { kind: "cancel"; call: string; reason: unknown };

export class ScenarioFailure extends Error {
  override name = "ScenarioFailure";
}

const WIRE_EXPECTS = new Set(["connect", "send", "suspend"]);
const APP_EXPECTS = new Set(["state", "session", "call", "cancel"]);
/** Macrotask turns an expect waits for its output before failing. */
const EXPECT_WAIT_TURNS = 20;

function describe(value: unknown): string {
  return JSON.stringify(value);
}

/** Runs one scenario; resolves when it passes, rejects with a `ScenarioFailure` naming the step. */
export async function runScenario(scenario: Scenario): Promise<void> {
  const wire: WireOutput[] = [];
  const app: AppOutput[] = [];
  const transport = new FakeTransport({
    onSend: (_socket, text, first) => {
      const frame = JSON.parse(text) as Record<string, unknown>;
      wire.push(first ? { kind: "connect", frame } : { kind: "send", frame });
    },
    onAppClose: (_socket, code, reason) => {
      if (code === 1001 && reason === "app_backgrounded") wire.push({ kind: "suspend" });
    },
  });
  const clock = new ManualClock(scenario.startMs);
  const client: AppductClient = createAppductClient({
    transport: transport.factory,
    clock,
    random: () => scenario.random,
    logger: { warn: () => undefined, error: () => undefined },
  });
  client.addAppductListener("stateChange", (e) => app.push(e.reason === undefined ? { kind: "state", state: e.state } : { kind: "state", state: e.state, reason: e.reason }));
  client.addAppductListener("sessionChange", (e) => app.push(e.reason === undefined ? { kind: "session", type: e.type } : { kind: "session", type: e.type, reason: e.reason }));

  // Args of each delivered tool_call, by wire id: `call` reports the frame as received.
  const receivedArgs = new Map<string, unknown>();
  const pendingCalls = new Map<string, { resolve: (v: unknown) => void; reject: (e: unknown) => void }>();

  const newest = (): FakeSocket => transport.newest;

  for (let index = 0; index < scenario.steps.length; index++) {
    const step = scenario.steps[index] as Step;
    const where = `step ${index + 1} ${describe(step)}`;
    if ("drive" in step) {
      drive(step, where);
      await flush();
      continue;
    }
    const kind = step.expect;
    const channel = WIRE_EXPECTS.has(kind) ? wire : APP_EXPECTS.has(kind) ? app : null;
    if (!channel) throw new ScenarioFailure(`${where}: unknown expect "${kind}"`);
    for (let turn = 0; turn < EXPECT_WAIT_TURNS && channel.length === 0; turn++) {
      await flush(1);
    }
    const actual = channel.shift();
    if (!actual) {
      throw new ScenarioFailure(`${where}: expected ${kind}, but nothing more happened on the ${channel === wire ? "wire" : "app"} channel`);
    }
    const mismatch = compare(step, actual);
    if (mismatch) throw new ScenarioFailure(`${where}: ${mismatch}; got ${describe(actual)}`);
  }

  await flush();
  const leftovers = [...wire.map((o) => `wire ${describe(o)}`), ...app.map((o) => `app ${describe(o)}`)];
  if (leftovers.length > 0) {
    throw new ScenarioFailure(`unexpected output after the last step: ${leftovers.join(", ")}`);
  }

  function drive(step: Step, where: string): void {
    switch (step.drive) {
      case "connect":
        client
          .connectBootstrap({
            sessionId: step.sessionId as string,
            token: step.token as string,
            expiresAt: step.expiresAt as number,
            address: "127.0.0.1",
            port: 8443,
            transport: "native",
            pins: [],
          })
          .catch(() => undefined);
        return;
      case "receive": {
        const frame = step.frame as Record<string, unknown>;
        if (frame.type === "tool_call" && typeof frame.id === "string") receivedArgs.set(frame.id, frame.args);
        newest().receive(frame);
        return;
      }
      case "close": {
        const event: { code?: number; reason?: string } = { code: step.code as number };
        if (typeof step.reason === "string") event.reason = step.reason;
        newest().serverClose(event);
        return;
      }
      case "drop":
        newest().serverClose({});
        return;
      case "failNextConnect":
        transport.failNextConnect();
        return;
      case "advance":
        clock.advance(step.ms as number);
        return;
      case "registerTool":
        client.registerTool(toolFromDescriptor(step.descriptor as Record<string, unknown>));
        return;
      case "respond": {
        const pending = pendingCalls.get(step.call as string);
        if (!pending) throw new ScenarioFailure(`${where}: no call "${String(step.call)}" is waiting for an answer`);
        pendingCalls.delete(step.call as string);
        if (step.error !== undefined) {
          const error = step.error as { type: ToolErrorType; message: string };
          pending.reject(new AppductToolError(error.type, error.message));
        } else {
          pending.resolve(step.result);
        }
        return;
      }
      case "disconnect":
        void client.disconnect();
        return;
      case "background":
        client.setForeground(false);
        return;
      case "foreground":
        client.setForeground(true);
        return;
      default:
        throw new ScenarioFailure(`${where}: unknown drive "${String(step.drive)}"`);
    }
  }

  /** A tool in wire form whose calls report themselves and wait for `respond`. */
  function toolFromDescriptor(d: Record<string, unknown>): ToolDefinition<unknown, unknown> {
    const def: ToolDefinition<unknown, unknown> = {
      name: d.name as string,
      description: d.description as string,
      handler: (_args, ctx) => {
        app.push({ kind: "call", name: d.name as string, args: receivedArgs.get(ctx.invocationId) });
        ctx.signal.addEventListener("abort", () => {
          app.push({ kind: "cancel", call: ctx.invocationId, reason: ctx.signal.reason });
        });
        return new Promise((resolve, reject) => pendingCalls.set(ctx.invocationId, { resolve, reject }));
      },
    };
    if (d.input_schema !== undefined) def.inputSchema = d.input_schema as Record<string, unknown>;
    if (d.output_schema !== undefined) def.outputSchema = d.output_schema as Record<string, unknown>;
    if (d.annotations !== undefined) def.annotations = d.annotations as Record<string, boolean>;
    if (d.timeout_ms !== undefined) def.timeoutMs = d.timeout_ms as number;
    if (d.group !== undefined) def.group = d.group as string;
    return def;
  }
}

/** Compares an expect step with an output: `send` frames whole, everything else by named fields. */
function compare(step: Step, actual: WireOutput | AppOutput): string | null {
  const kind = step.expect as string;
  if (actual.kind !== kind) return `expected ${kind}`;
  const named = (fields: string[], read: (field: string) => unknown): string | null => {
    for (const field of fields) {
      if (field in step && !isDeepStrictEqual(step[field], read(field))) {
        return `${field} differs: expected ${describe(step[field])}`;
      }
    }
    return null;
  };
  switch (actual.kind) {
    case "connect": {
      const mode = step.mode === "resume" ? "session_resume" : step.mode === "claim" ? "session_claim" : undefined;
      if (mode && actual.frame.type !== mode) return `expected a ${mode} first frame`;
      const map: Record<string, string> = { sessionId: "session_id", token: "token", resumeToken: "resume_token" };
      return named(["sessionId", "token", "resumeToken"], (field) => actual.frame[map[field] as string]);
    }
    case "send":
      return isDeepStrictEqual(step.frame, actual.frame) ? null : `expected frame ${describe(step.frame)}`;
    case "suspend":
      return null;
    case "state":
      return named(["state", "reason"], (field) => (actual as Record<string, unknown>)[field]);
    case "session":
      return named(["type", "reason"], (field) => (actual as Record<string, unknown>)[field]);
    case "call":
      return named(["name", "args"], (field) => (actual as Record<string, unknown>)[field]);
    case "cancel":
      return named(["call", "reason"], (field) => (actual as Record<string, unknown>)[field]);
  }
}
