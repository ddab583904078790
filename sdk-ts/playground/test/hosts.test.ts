// The playground hosts, as built (§T14.3): the Node device against a stand-in TLS listener
// (the end-to-end suite runs it against the real daemon), and the web page server.

import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { once } from "node:events";
import path from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

import { afterEach, describe, expect, it, vi } from "vitest";

import { encodeBootstrapPayload } from "../../packages/sdk/src/core/bootstrap.js";
import { startDaemon, type Cleanup } from "../../packages/sdk/test/support/fake-daemon.js";

const PLAYGROUND = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const NODE_DEVICE = path.join(PLAYGROUND, "dist", "node", "main.js");
const WRONG_PIN = "sha256/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
const cleanups: Cleanup[] = [];

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

function link(port: number, pin?: string): string {
  const payload = encodeBootstrapPayload({
    address: "127.0.0.1",
    port,
    sessionId: "pg-session",
    token: Uint8Array.from({ length: 32 }, (_, i) => i),
    expiresAt: Math.floor(Date.now() / 1000) + 300,
  });
  return `playground:///?appduct=${payload}${pin ? `&pin=${encodeURIComponent(pin)}` : ""}`;
}

interface Device {
  child: ChildProcessWithoutNullStreams;
  lines: Record<string, unknown>[];
  /** Resolves with the first line (seen or future) matching every given field. */
  waitForLine(fields: Record<string, unknown>): Promise<Record<string, unknown>>;
}

function startDevice(args: string[]): Device {
  const child = spawn(process.execPath, [NODE_DEVICE, ...args], { env: { ...process.env, NODE_ENV: "test" } });
  const lines: Record<string, unknown>[] = [];
  const waiters: { fields: Record<string, unknown>; resolve: (line: Record<string, unknown>) => void }[] = [];
  const matches = (line: Record<string, unknown>, fields: Record<string, unknown>): boolean => Object.entries(fields).every(([k, v]) => line[k] === v);
  createInterface({ input: child.stdout }).on("line", (text) => {
    const line = JSON.parse(text) as Record<string, unknown>;
    lines.push(line);
    for (const waiter of waiters.filter((w) => matches(line, w.fields))) {
      waiters.splice(waiters.indexOf(waiter), 1);
      waiter.resolve(line);
    }
  });
  cleanups.push(() => {
    if (child.exitCode === null) child.kill();
  });
  return {
    child,
    lines,
    waitForLine: (fields) =>
      new Promise((resolve) => {
        const seen = lines.find((l) => matches(l, fields));
        if (seen) resolve(seen);
        else waiters.push({ fields, resolve });
      }),
  };
}

describe("Node playground device", () => {
  it("claims with the contract registered, posts pings from stdin, and exits 0 on EOF", async () => {
    const daemon = await startDaemon(cleanups, "tls");
    const device = startDevice([link(daemon.port, daemon.pin)]);
    await device.waitForLine({ listener: "sessionChange", type: "claimed" });
    await vi.waitFor(() => expect(daemon.messages.map((m) => m.type)).toEqual(["session_claim", "tool_registry_snapshot", "event_registry_snapshot"]));
    const snapshot = daemon.messages[1] as { tools: { name: string }[] };
    expect(snapshot.tools.map((t) => t.name)).toEqual(["sum", "call_count", "reset_counter", "slow_task", "throwing_tool"]);
    expect(daemon.messages[0]).toMatchObject({ device_model: "Node.js" });

    device.child.stdin.write("ping\n");
    await vi.waitFor(() => expect(daemon.messages.at(-1)).toMatchObject({ type: "event", name: "playground_ping", payload: { at: expect.any(Number) } }));

    device.child.stdin.end();
    const [code] = (await once(device.child, "exit")) as [number | null];
    expect(code).toBe(0);
    expect(device.lines.map((l) => [l.listener, l.state ?? l.type])).toEqual([
      ["stateChange", "connecting"],
      ["stateChange", "active"],
      ["sessionChange", "claimed"],
      ["stateChange", "closed"],
      ["sessionChange", "lost"],
    ]);
    expect(device.lines.at(-1)).toEqual({ listener: "sessionChange", type: "lost", sessionId: null, alias: null, reason: "closed_by_app" });
  });

  it("a wrong --pins ends in pin_mismatch and no upgrade reaches the listener", async () => {
    const daemon = await startDaemon(cleanups, "tls");
    const device = startDevice([link(daemon.port, daemon.pin), "--pins", WRONG_PIN]);
    expect(await device.waitForLine({ listener: "stateChange", state: "closed" })).toEqual({ listener: "stateChange", state: "closed", reason: "pin_mismatch" });
    await device.waitForLine({ listener: "error", code: "pin_mismatch" });
    expect(daemon.upgrades).toBe(0);
    device.child.stdin.end();
    expect(await once(device.child, "exit")).toEqual([0, null]);
  });

  it("connects over the web transport with --transport web", async () => {
    const daemon = await startDaemon(cleanups, "plain");
    const device = startDevice([link(daemon.port), "--transport", "web"]);
    await device.waitForLine({ listener: "stateChange", state: "active" });
    expect(daemon.origins).toEqual([undefined]);
    device.child.stdin.end();
    expect(await once(device.child, "exit")).toEqual([0, null]);
  });

  it("reports a refused link and exits 1; usage errors exit 64", async () => {
    const refused = startDevice(["playground:///?appduct=AAAA"]);
    expect(await once(refused.child, "exit")).toEqual([1, null]);
    expect(refused.lines).toEqual([{ listener: "error", phase: "bootstrap", code: "invalid_payload", message: expect.any(String) }]);
    const usage = startDevice([]);
    expect(await once(usage.child, "exit")).toEqual([64, null]);
  });
});

describe("web playground server", () => {
  it("serves the page with every element and the real web entry bundled", async () => {
    const { startPlaygroundServer } = (await import(path.join(PLAYGROUND, "dist", "web", "server.js"))) as typeof import("../web/server.js");
    const server = await startPlaygroundServer(0);
    cleanups.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
    const address = server.address();
    const base = `http://127.0.0.1:${typeof address === "object" && address ? address.port : 0}`;
    const html = await (await fetch(`${base}/cart`)).text();
    for (const id of ["call-count", "connection-state", "session-alias", "last-session-event", "ping-button", "last-ping"]) {
      expect(html).toContain(`id="${id}"`);
    }
    const script = await (await fetch(`${base}/page.js`)).text();
    for (const marker of ["session_claim", "__APPDUCT__", "playground_ping", "throwing_tool always fails on purpose."]) {
      expect(script).toContain(marker);
    }
  });
});
