// The scenario runner must be able to fail (§D15): a missing, an extra and an out-of-order
// output each fail, as do a wrong frame and an unknown step.

import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";

import { describe, expect, it } from "vitest";

import { runScenario, ScenarioFailure, type Scenario, type Step } from "./conformance/scenario-runner.js";
import { conformanceDir, SDK_TS_ROOT, VectorSet } from "./conformance/vectors.js";

const ACK = { type: "session_ack", session_id: "session-1", status: "ok", alias: "phone", resume_token: "resume-1", keepalive_interval_s: 15, grace_s: 10 };
const CONNECT: Step = { drive: "connect", sessionId: "session-1", token: "claim-token", expiresAt: 1700000300 };

const scenario = (name: string, steps: Step[]): Scenario => ({ name, startMs: 1_700_000_000_000, random: 0.5, steps });

const claimed: Step[] = [
  CONNECT,
  { expect: "connect", mode: "claim", sessionId: "session-1", token: "claim-token" },
  { expect: "state", state: "connecting" },
  { drive: "receive", frame: ACK },
  { expect: "state", state: "active" },
  { expect: "session", type: "claimed" },
  { expect: "send", frame: { type: "tool_registry_snapshot", session_id: "session-1", tools: [] } },
];

describe("scenario runner", () => {
  it("passes a correct inline scenario", async () => {
    await expect(runScenario(scenario("claims", claimed))).resolves.toBeUndefined();
  });

  it("fails a scenario missing an output (an expect nothing satisfies)", async () => {
    const steps = [...claimed, { expect: "state", state: "reconnecting" } as Step];
    await expect(runScenario(scenario("missing", steps))).rejects.toThrow(/expected state, but nothing more happened/);
  });

  it("fails a scenario with an extra output (left unexpected at the end)", async () => {
    const steps = claimed.slice(0, 2);
    await expect(runScenario(scenario("extra", steps))).rejects.toThrow(/unexpected output after the last step: app \{"kind":"state","state":"connecting"\}/);
  });

  it("fails a scenario whose outputs come out of order within a channel", async () => {
    const steps = [...claimed.slice(0, 4), { expect: "session", type: "claimed" } as Step, { expect: "state", state: "active" } as Step, claimed[6] as Step];
    await expect(runScenario(scenario("out of order", steps))).rejects.toThrow(ScenarioFailure);
  });

  it("fails on a send frame that differs", async () => {
    const steps = [...claimed.slice(0, 6), { expect: "send", frame: { type: "tool_registry_snapshot", session_id: "session-2", tools: [] } } as Step];
    await expect(runScenario(scenario("wrong frame", steps))).rejects.toThrow(/expected frame/);
  });

  it("fails on a named field that differs and on an unknown step", async () => {
    const wrongReason = [...claimed, { drive: "disconnect" } as Step, { expect: "state", state: "closed", reason: "revoked" } as Step];
    await expect(runScenario(scenario("wrong reason", wrongReason))).rejects.toThrow(/reason differs/);
    await expect(runScenario(scenario("unknown", [{ drive: "teleport" }]))).rejects.toThrow(/unknown drive/);
  });

  it("does not order outputs across channels", async () => {
    // The wire's claim frame is expected after the app's state: still a pass.
    const steps = [CONNECT, { expect: "state", state: "connecting" } as Step, { expect: "connect", mode: "claim" } as Step];
    await expect(runScenario(scenario("cross-channel", steps))).resolves.toBeUndefined();
  });
});

describe("vector set", () => {
  it("fails on a missing directory and on one with no vector files", () => {
    expect(() => new VectorSet(path.join(tmpdir(), "appduct-no-such-dir"))).toThrow(/not found/);
    const empty = mkdtempSync(path.join(tmpdir(), "appduct-vectors-"));
    writeFileSync(path.join(empty, "README.md"), "no vectors");
    expect(() => new VectorSet(empty)).toThrow(/no \*\.json/);
  });

  it("reports files nothing consumed", () => {
    const dir = mkdtempSync(path.join(tmpdir(), "appduct-vectors-"));
    writeFileSync(path.join(dir, "a.json"), "[]");
    writeFileSync(path.join(dir, "b.json"), "{}");
    const set = new VectorSet(dir);
    expect(set.load<unknown[]>("a.json")).toEqual([]);
    expect(set.unconsumed()).toEqual(["b.json"]);
  });

  it("locates the directory from APPDUCT_CONFORMANCE_DIR, relative to the repository root", () => {
    const saved = process.env.APPDUCT_CONFORMANCE_DIR;
    try {
      delete process.env.APPDUCT_CONFORMANCE_DIR;
      expect(conformanceDir()).toBe(path.resolve(SDK_TS_ROOT, "../protocol/tests/vectors/appduct-v2"));
      process.env.APPDUCT_CONFORMANCE_DIR = "/abs/vectors";
      expect(conformanceDir()).toBe("/abs/vectors");
      process.env.APPDUCT_CONFORMANCE_DIR = "../elsewhere/x";
      expect(conformanceDir()).toBe(path.resolve(SDK_TS_ROOT, "..", "../elsewhere/x"));
    } finally {
      if (saved === undefined) delete process.env.APPDUCT_CONFORMANCE_DIR;
      else process.env.APPDUCT_CONFORMANCE_DIR = saved;
    }
  });
});
