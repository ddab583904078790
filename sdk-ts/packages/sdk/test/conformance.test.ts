// Conformance (§D15, §T15): every vector file in protocol/tests/vectors/appduct-v2 runs through
// the SDK; a missing or empty directory, or a `*.json` file no suite consumes, fails the run.
// Test names are the vectors' names, so a failing case is reported by its name.

import { isDeepStrictEqual } from "node:util";

import { describe, expect, it } from "vitest";

import { decodeBootstrapPayload, encodeBootstrapPayload, type BootstrapPayload } from "../src/core/bootstrap.js";
import { createAppductClient } from "../src/core/client.js";
import { isTerminalCloseCode } from "../src/core/close.js";
import { validateEventDescriptor, validateToolDescriptor } from "../src/core/descriptors.js";
import { parseLink } from "../src/core/link.js";
import { MAX_FRAME_BYTES, utf8ByteLength } from "../src/core/text.js";
import type { AppductErrorEvent, Registration } from "../src/core/types.js";
import { pinFromCertificateDer } from "../src/node/pin.js";
import { runScenario, type Scenario } from "./conformance/scenario-runner.js";
import { conformanceDir, VectorSet } from "./conformance/vectors.js";
import { FakeTransport, flush } from "./support/fake-transport.js";
import { ManualClock } from "./support/manual-clock.js";

interface PayloadVector {
  name: string;
  base64url: string;
  expected: BootstrapPayload | null;
}
interface LinkVector {
  name: string;
  url: string;
  expected: { payloadIndex: number; pin: string | null };
}
interface DescriptorVector {
  name: string;
  descriptor: unknown;
  valid: boolean;
}
interface CloseVector {
  code: number | null;
  reason: string | null;
  terminal: boolean;
}
interface RegistryVector {
  name: string;
  sessionId: string;
  declaredBeforeAck: { name: string; description: string; payload_schema?: Record<string, unknown> }[];
  afterAck: ({ op: "register"; event: { name: string; description: string; payload_schema?: Record<string, unknown> } } | { op: "remove"; name: string })[];
  frames: Record<string, unknown>[];
}
interface FrameLimits {
  limitBytes: number;
  vectors: { name: string; frameBytes: number; filler: string; sent: boolean }[];
}
interface SpkiVector {
  certificateDerBase64: string;
  expectedPin: string;
}

let vectors: VectorSet | null = null;
let setupError: unknown = null;
try {
  vectors = new VectorSet(conformanceDir());
} catch (error) {
  setupError = error;
}

describe("conformance vectors", () => {
  it("the vector directory exists and holds vector files", () => {
    if (setupError) throw setupError;
    expect(vectors?.files.length).toBeGreaterThan(0);
  });
});

if (vectors) {
  const v = vectors;

  describe("bootstrap-payloads.json", () => {
    const cases = v.load<PayloadVector[]>("bootstrap-payloads.json");
    it.each(cases.map((c) => [c.name, c] as const))("%s", (_name, c) => {
      const decoded = decodeBootstrapPayload(c.base64url);
      expect(decoded).toEqual(c.expected);
      if (c.expected) {
        expect(encodeBootstrapPayload(c.expected)).toBe(c.base64url);
      }
    });
  });

  describe("bootstrap-links.json", () => {
    const payloads = v.load<PayloadVector[]>("bootstrap-payloads.json");
    const cases = v.load<LinkVector[]>("bootstrap-links.json");
    it.each(cases.map((c) => [c.name, c] as const))("%s", (_name, c) => {
      const parsed = parseLink(c.url);
      if (!parsed.ok) throw new Error(`parseLink refused the link: ${parsed.code}`);
      expect(parsed.link.payloadText).toBe(payloads[c.expected.payloadIndex]?.base64url);
      expect(parsed.link.pin).toBe(c.expected.pin);
    });
  });

  describe("tool-descriptors.json", () => {
    const cases = v.load<DescriptorVector[]>("tool-descriptors.json");
    it.each(cases.map((c) => [c.name, c] as const))("%s", (_name, c) => {
      expect(validateToolDescriptor(c.descriptor).valid).toBe(c.valid);
    });
  });

  describe("event-descriptors.json", () => {
    const cases = v.load<DescriptorVector[]>("event-descriptors.json");
    it.each(cases.map((c) => [c.name, c] as const))("%s", (_name, c) => {
      expect(validateEventDescriptor(c.descriptor).valid).toBe(c.valid);
    });
  });

  describe("close-codes.json", () => {
    const cases = v.load<CloseVector[]>("close-codes.json");
    it.each(cases.map((c) => [`${String(c.code)} ${String(c.reason)}`, c] as const))("%s", (_name, c) => {
      expect(isTerminalCloseCode(c.code)).toBe(c.terminal);
    });
  });

  describe("spki-pin.json", () => {
    const c = v.load<SpkiVector>("spki-pin.json");
    it("pinFromCertificateDer returns expectedPin", () => {
      expect(pinFromCertificateDer(Buffer.from(c.certificateDerBase64, "base64"))).toBe(c.expectedPin);
    });
  });

  describe("event-registry-frames.json", () => {
    const cases = v.load<RegistryVector[]>("event-registry-frames.json");
    it.each(cases.map((c) => [c.name, c] as const))("%s", async (_name, c) => {
      expect(await runRegistryCase(c)).toEqual(c.frames);
    });
  });

  describe("frame-limits.json", () => {
    const limits = v.load<FrameLimits>("frame-limits.json");
    it("limitBytes is the SDK's frame limit", () => {
      expect(MAX_FRAME_BYTES).toBe(limits.limitBytes);
    });
    it.each(limits.vectors.map((c) => [c.name, c] as const))("%s", async (_name, c) => {
      await runFrameLimitCase(c);
    });
  });

  for (const file of ["session-scenarios.json", "session-scenarios-background.json"]) {
    describe(file, () => {
      const scenarios = v.load<Scenario[]>(file);
      it.each(scenarios.map((s) => [s.name, s] as const))("%s", async (_name, s) => {
        await runScenario(s);
      });
    });
  }

  describe("every vector file is consumed", () => {
    // Collection has run every describe above by now, so the consumed set is complete.
    const unconsumed = v.unconsumed();
    it("no *.json file is left unconsumed", () => {
      expect(unconsumed).toEqual([]);
    });
  });
}


/** Declares, connects, acks with `event_registry: true`, applies `afterAck` back to back. */
async function runRegistryCase(c: RegistryVector): Promise<Record<string, unknown>[]> {
  const transport = new FakeTransport();
  const client = createAppductClient({
    transport: transport.factory,
    clock: new ManualClock(1_700_000_000_000),
    random: () => 0.5,
    logger: { warn: () => undefined, error: () => undefined },
  });
  const registrations = new Map<string, Registration>();
  const declare = (e: RegistryVector["declaredBeforeAck"][number]): void => {
    const reg = client.registerEvent(
      e.payload_schema === undefined ? { name: e.name, description: e.description } : { name: e.name, description: e.description, payloadSchema: e.payload_schema },
    );
    registrations.set(e.name, reg);
  };
  c.declaredBeforeAck.forEach(declare);
  void client.connectBootstrap({ sessionId: c.sessionId, token: "claim-token", expiresAt: 4_000_000_000, address: "127.0.0.1", port: 8443, transport: "native" });
  await flush();
  const socket = transport.newest;
  socket.receive({
    type: "session_ack",
    session_id: c.sessionId,
    status: "ok",
    alias: "phone",
    resume_token: "resume-1",
    keepalive_interval_s: 15,
    grace_s: 600,
    event_registry: true,
  });
  for (const step of c.afterAck) {
    if (step.op === "register") {
      declare(step.event);
    } else {
      const reg = registrations.get(step.name);
      if (!reg) throw new Error(`no event "${step.name}" was registered`);
      reg.remove();
    }
  }
  return socket.frames.filter((f) => typeof f.type === "string" && f.type.startsWith("event_registry_"));
}

/**
 * Posts an event whose frame is exactly `frameBytes` UTF-8 bytes (§D15): measured with an
 * empty payload string, filled with `filler`, topped up with ASCII `a`.
 */
async function runFrameLimitCase(c: FrameLimits["vectors"][number]): Promise<void> {
  const transport = new FakeTransport();
  const errors: AppductErrorEvent[] = [];
  const client = createAppductClient({
    transport: transport.factory,
    clock: new ManualClock(1_700_000_000_000),
    random: () => 0.5,
    logger: { warn: () => undefined, error: () => undefined },
  });
  client.addAppductListener("error", (e) => errors.push(e));
  void client.connectBootstrap({ sessionId: "session-1", token: "claim-token", expiresAt: 4_000_000_000, address: "127.0.0.1", port: 8443, transport: "native" });
  await flush();
  const socket = transport.newest;
  socket.receive({ type: "session_ack", session_id: "session-1", status: "ok", alias: "phone", resume_token: "resume-1", keepalive_interval_s: 15, grace_s: 600 });
  client.postEvent("limit", "");
  const base = socket.sent[socket.sent.length - 1] as string;
  const baseBytes = utf8ByteLength(base);
  const sentBefore = socket.sent.length;

  const gap = c.frameBytes - baseBytes;
  const fillerBytes = utf8ByteLength(c.filler);
  const count = Math.floor(gap / fillerBytes);
  const payload = c.filler.repeat(count) + "a".repeat(gap - count * fillerBytes);
  client.postEvent("limit", payload);

  if (c.sent) {
    expect(socket.sent.length).toBe(sentBefore + 1);
    const text = socket.sent[sentBefore] as string;
    expect(utf8ByteLength(text)).toBe(c.frameBytes);
    expect(isDeepStrictEqual(JSON.parse(text), { type: "event", session_id: "session-1", name: "limit", payload, ts: 1_700_000_000_000 })).toBe(true);
    expect(errors).toEqual([]);
  } else {
    expect(socket.sent.length).toBe(sentBefore);
    expect(errors).toHaveLength(1);
    expect(errors[0]?.message).toContain(String(c.frameBytes));
    expect(errors[0]?.message).toContain("262144");
    expect(errors[0]?.code).toBe("event_not_sent");
    // The connection stays open: the next event still goes out.
    expect(socket.closedByApp).toBeNull();
    expect(client.getAppductState()).toBe("active");
    client.postEvent("limit", "after");
    expect(socket.sent.length).toBe(sentBefore + 1);
  }
}
