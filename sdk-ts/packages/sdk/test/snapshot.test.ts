// `appduct-sdk snapshot` (§T17), run as the built bin: the export forms, the document (equal to
// what a claim sends, byte-identical to the CLI's canonical text), --out, --check, --json, and
// each bad module with its exit code.

import { execFile } from "node:child_process";
import { existsSync, lstatSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

import { afterAll, describe, expect, it, vi } from "vitest";

import { writeSnapshot } from "../src/cli/snapshot.js";

import { canonicalText, compareCodePoints, surfaceDocument } from "../src/core/surface.js";
import type { EventDefinition, ToolDefinition } from "../src/core/types.js";
import { activate, framesAfterHandshake, makeHarness } from "./support/harness.js";
import { appductBin } from "./support/appduct-sandbox.js";

/** When set, `randomBytes` returns it: the temp-file test plants a symlink at the name it gives. */
const fixedRandom = vi.hoisted(() => ({ bytes: undefined as Buffer | undefined }));
vi.mock("node:crypto", async (importOriginal) => {
  const actual = await importOriginal<typeof import("node:crypto")>();
  const randomBytes = ((...args: Parameters<typeof actual.randomBytes>) =>
    fixedRandom.bytes !== undefined ? Buffer.from(fixedRandom.bytes) : actual.randomBytes(...args)) as typeof actual.randomBytes;
  return { ...actual, default: { ...actual, randomBytes }, randomBytes };
});

const SDK = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const BIN = path.join(SDK, "dist", "cli", "main.js");
const FIXTURES = path.join(SDK, "test", "fixtures", "snapshot");
const tmp = mkdtempSync(path.join(os.tmpdir(), "adsnap-"));
/** A state dir nothing may create: no run here needs a daemon. */
const NO_DAEMON = path.join(tmp, "no-daemon");

afterAll(() => rmSync(tmp, { recursive: true, force: true }));

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

function run(file: string, args: readonly string[], input?: string): Promise<Run> {
  return new Promise((resolve) => {
    const child = execFile(file, args, { cwd: FIXTURES, timeout: 20_000, env: { ...process.env, NO_COLOR: "1", APPDUCT_STATE_DIR: NO_DAEMON } }, (error, stdout, stderr) => {
      const code = error ? (typeof error.code === "number" ? error.code : -1) : 0;
      resolve({ code, stdout, stderr });
    });
    if (input !== undefined) child.stdin?.end(input);
  });
}

const snapshot = (...args: string[]): Promise<Run> => run(process.execPath, [BIN, "snapshot", ...args]);

function envelope(r: Run): { ok: boolean; data?: Record<string, unknown>; error?: { type: string; message: string; details?: Record<string, unknown> } } {
  return JSON.parse(r.stdout) as ReturnType<typeof envelope>;
}

describe("appduct-sdk snapshot: export forms", { timeout: 60_000 }, () => {
  it("tools/events lists, a register function and a default array give the same tools", async () => {
    const lists = await snapshot("lists.mjs");
    expect(lists.code, lists.stderr).toBe(0);
    const register = await snapshot("register.mjs");
    expect(register.code, register.stderr).toBe(0);
    expect(register.stdout).toBe(lists.stdout);
    const byDefault = await snapshot("default-array.mjs");
    expect(byDefault.code, byDefault.stderr).toBe(0);
    const doc = JSON.parse(lists.stdout) as { tools: unknown[]; events: unknown[] };
    expect(JSON.parse(byDefault.stdout)).toEqual({ ...doc, events: [] });
    // --export names any export, even when a default exists.
    const named = await snapshot("named.mjs", "--export", "myTools");
    expect(named.stdout).toBe(byDefault.stdout);
    // The development warnings of registration go to stderr, the document alone to stdout.
    expect(lists.stderr).toContain("timeoutMs 250.7 is clamped to 1000");
  });

  it("the document is the canonical text of what a claim's registry snapshots carry", async () => {
    const mod = (await import(path.join(FIXTURES, "surface.mjs"))) as { toolDefs: () => ToolDefinition[]; eventDefs: () => EventDefinition[] };
    const h = makeHarness({ dev: true });
    for (const def of mod.toolDefs()) h.client.registerTool(def);
    for (const def of mod.eventDefs()) h.client.registerEvent(def);
    const socket = await activate(h);
    const frames = framesAfterHandshake(socket) as { type: string; tools?: unknown[]; events?: unknown[] }[];
    const tools = frames.find((f) => f.type === "tool_registry_snapshot")?.tools;
    const events = frames.find((f) => f.type === "event_registry_snapshot")?.events;
    expect(tools).toHaveLength(2);
    expect(events).toHaveLength(1);
    const expected = canonicalText(surfaceDocument({ tools, events } as Parameters<typeof surfaceDocument>[0]));
    const lists = await snapshot("lists.mjs");
    expect(lists.stdout).toBe(expected);
    const doc = JSON.parse(lists.stdout) as { snapshotVersion: number; tools: Record<string, unknown>[] };
    expect(doc.snapshotVersion).toBe(1);
    expect(doc.tools.map((t) => t.name)).toEqual(["reset", "sum"]);
    expect(doc.tools[1]).toMatchObject({ group: null, timeout_ms: 1000, annotations: { readOnlyHint: true } });
    expect(doc.tools[1]?.input_schema).toMatchObject({ type: "object", required: ["a", "b"] });
  });

  it("canonical text sorts keys by code point and writes numbers as JSON.stringify does", () => {
    expect(["\u{1F600}", "\uFFFF", "é", "2", "10", "a"].sort(compareCodePoints)).toEqual(["10", "2", "a", "é", "\uFFFF", "\u{1F600}"]);
    expect(canonicalText({ b: [1e21, 0.1, -0, 5e-7, [], {}], a: { "2": true, "10": null } })).toBe(
      '{\n  "a": {\n    "10": null,\n    "2": true\n  },\n  "b": [\n    1e+21,\n    0.1,\n    0,\n    5e-7,\n    [],\n    {}\n  ]\n}\n',
    );
  });

  it("the module's console and stdout output goes to stderr; stdout carries only the document", async () => {
    const r = await snapshot("noisy.mjs");
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).not.toContain("noise");
    expect(JSON.parse(r.stdout)).toMatchObject({ tools: [{ name: "sum" }] });
    for (const line of ["log at import", "info at import", "debug at import", "stdout.write at import", "log while registering", "stdout.write while registering"]) {
      expect(r.stderr).toContain(`noise: ${line}`);
    }
    // --out: the human line alone on stdout, too.
    const out = path.join(tmp, "noisy.json");
    const written = await snapshot("noisy.mjs", "--out", out);
    expect(written.stdout).toBe(`Wrote tools snapshot to ${out} (1 tool, 0 events).\n`);
    expect(readFileSync(out, "utf8")).toBe(r.stdout);
  });

  it("exits even when the module keeps the event loop busy", async () => {
    const r = await snapshot("holds-open.mjs");
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ tools: [{ name: "t", group: null }] });
  });
});

describe("appduct-sdk snapshot: bad modules and arguments", { timeout: 60_000 }, () => {
  it.each([
    ["bad-export.mjs", [], 65, 'the export "tools" is an object; it must be an array'],
    ["no-export.mjs", [], 65, "the module exports no declarations"],
    ["named.mjs", [], 65, 'the export "default" is a string'],
    ["named.mjs", ["--export", "nope"], 65, 'the module has no export "nope"'],
    ["bad-tool.mjs", [], 65, 'invalid declaration: registerTool: "name" must match'],
    ["throws.mjs", [], 65, 'the export "register" threw: no database in CI'],
    ["import-fails.mjs", [], 65, "cannot import import-fails.mjs: top-level failure"],
    ["missing.mjs", [], 64, "cannot import missing.mjs"],
    ["lists.mjs", ["--bogus"], 64, "unknown flag --bogus"],
    ["lists.mjs", ["--out", "a.json", "--check", "b.json"], 64, "at most one of --out"],
  ] as const)("%s %j exits %i", async (module, extra, code, message) => {
    const human = await snapshot(module, ...extra);
    expect(human.code).toBe(code);
    expect(human.stdout).toBe("");
    expect(human.stderr).toContain("Command failed");
    expect(human.stderr).toContain(message);
    const json = await snapshot(module, ...extra, "--json");
    expect(json.code).toBe(code);
    expect(json.stderr).toBe("");
    const env = envelope(json);
    expect(env.ok).toBe(false);
    expect(env.error?.type).toBe(code === 64 ? "usage_error" : "validation_error");
    expect(env.error?.message).toContain(message);
  });

  it("a module path is required, and an unknown command is a usage error", async () => {
    expect((await snapshot()).code).toBe(64);
    expect((await run(process.execPath, [BIN, "nope"])).code).toBe(64);
    const help = await snapshot("--help");
    expect(help.code).toBe(0);
    expect(help.stdout).toContain("--export <name>");
  });
});

describe("appduct-sdk snapshot: --out and --check", { timeout: 60_000 }, () => {
  it("--out writes atomically with mode 0644 and reports an unchanged rewrite", async () => {
    const out = path.join(tmp, "tools.snapshot.json");
    const first = envelope(await snapshot("lists.mjs", "--out", out, "--json"));
    expect(first).toMatchObject({ ok: true, data: { path: out, tools: 2, events: 1, changed: true } });
    expect((first.data?.warnings as string[])[0]).toContain("clamped");
    expect(statSync(out).mode & 0o777).toBe(0o644);
    expect(readFileSync(out, "utf8")).toBe((await snapshot("lists.mjs")).stdout);
    const again = await snapshot("lists.mjs", "--out", out);
    expect(again.code).toBe(0);
    expect(again.stdout).toBe(`Wrote tools snapshot to ${out} (2 tools, 1 event). Unchanged.\n`);
    const missingDir = await snapshot("lists.mjs", "--out", path.join(tmp, "no", "s.json"), "--json");
    expect(missingDir.code).toBe(64);
  });

  it("--check passes on the same surface, exits 3 naming each drift, and 66 on an unusable file", async () => {
    const file = path.join(tmp, "check.json");
    writeFileSync(file, (await snapshot("lists.mjs")).stdout);
    const ok = await snapshot("register.mjs", "--check", file);
    expect(ok.code, ok.stderr).toBe(0);
    expect(ok.stdout).toBe(`Tools snapshot matches ${file} (2 tools, 1 event).\n`);

    // The file has another tool, lacks "reset", and "sum" changed; the event is gone.
    const doc = JSON.parse(readFileSync(file, "utf8")) as { tools: Record<string, unknown>[]; events: unknown[] };
    doc.tools = doc.tools.filter((t) => t.name !== "reset").map((t) => ({ ...t, description: "Old." }));
    doc.tools.push({ name: "zz_gone", description: "Gone.", group: null });
    doc.events = [];
    writeFileSync(file, JSON.stringify(doc));
    const drift = await snapshot("lists.mjs", "--check", file, "--json");
    expect(drift.code).toBe(3);
    const env = envelope(drift);
    expect(env.error?.type).toBe("assertion_error");
    expect(env.error?.message).toBe(`Tool surface differs from ${file}: 2 added, 1 removed, 1 changed`);
    expect(env.error?.details).toEqual({
      path: file,
      added: { tools: ["reset"], events: ["pinged"] },
      removed: { tools: ["zz_gone"], events: [] },
      changed: { tools: ["sum"], events: [] },
    });
    const human = await snapshot("lists.mjs", "--check", file);
    expect(human.code).toBe(3);
    expect(human.stderr).toContain("+ tool reset\n- tool zz_gone\n~ tool sum\n+ event pinged\n");
    expect(human.stderr).toContain(`For a diff: appduct-sdk snapshot lists.mjs | appduct tools snapshot --from - --check ${file}\n`);
    expect(human.stderr).toContain(`run "appduct-sdk snapshot lists.mjs --out ${file}"`);

    for (const [content, needle] of [
      [undefined, "ENOENT"],
      ["not json", "cannot use the snapshot"],
      ['{"snapshotVersion": 2, "tools": [], "events": []}', "snapshotVersion is not 1"],
      ['{"snapshotVersion": 1, "tools": []}', "no tools or events list"],
    ] as const) {
      rmSync(file, { force: true });
      if (content !== undefined) writeFileSync(file, content);
      const r = await snapshot("lists.mjs", "--check", file, "--json");
      expect(r.code).toBe(66);
      expect(envelope(r).error).toMatchObject({ type: "inspection_error", details: { path: file } });
      expect(envelope(r).error?.message).toContain(needle);
    }
  });
});

describe("appduct-sdk snapshot: the temporary file of --out", () => {
  const doc = { version: 1, tools: [], events: [] };

  it("never follows a symlink planted at a predictable name", () => {
    const dir = mkdtempSync(path.join(tmp, "plant-"));
    const victim = path.join(tmp, `victim-${path.basename(dir)}`);
    writeFileSync(victim, "precious\n");
    // The name the old code used (.<file>.<pid>.tmp).
    symlinkSync(victim, path.join(dir, `.s.json.${process.pid}.tmp`));
    writeSnapshot(path.join(dir, "s.json"), doc);
    expect(readFileSync(victim, "utf8")).toBe("precious\n");
    expect(lstatSync(path.join(dir, "s.json")).isFile()).toBe(true);
    expect(readdirSync(dir).sort()).toEqual([`.s.json.${process.pid}.tmp`, "s.json"]);
  });

  it("creates its temporary file exclusively: an existing name fails, untouched and kept", () => {
    const dir = mkdtempSync(path.join(tmp, "excl-"));
    const victim = path.join(tmp, `victim-${path.basename(dir)}`);
    writeFileSync(victim, "precious\n");
    fixedRandom.bytes = Buffer.alloc(8, 0xab);
    const planted = path.join(dir, `.s.json.${"ab".repeat(8)}.tmp`);
    symlinkSync(victim, planted);
    try {
      expect(() => writeSnapshot(path.join(dir, "s.json"), doc)).toThrow(/EEXIST/);
    } finally {
      fixedRandom.bytes = undefined;
    }
    expect(readFileSync(victim, "utf8")).toBe("precious\n");
    expect(readlinkSync(planted)).toBe(victim);
    expect(existsSync(path.join(dir, "s.json"))).toBe(false);
    // With a fresh random name it works.
    writeSnapshot(path.join(dir, "s.json"), doc);
    expect(statSync(path.join(dir, "s.json")).mode & 0o777).toBe(0o644);
  });
});

describe("appduct-sdk snapshot and the appduct CLI", { timeout: 60_000 }, () => {
  it("`appduct tools snapshot --from` rewrites the SDK's document byte for byte and checks it", async () => {
    const bin = appductBin();
    const text = (await snapshot("lists.mjs")).stdout;
    const file = path.join(tmp, "from.json");
    writeFileSync(file, text);
    const rewrite = await run(bin, ["tools", "snapshot", "--from", "-", "--write", "-"], text);
    expect(rewrite.code, rewrite.stderr).toBe(0);
    expect(rewrite.stdout).toBe(text);
    const check = await run(bin, ["--json", "tools", "snapshot", "--from", file, "--check", file]);
    expect(check.code, check.stdout).toBe(0);
    // Neither run needed (or started) a daemon.
    expect(existsSync(NO_DAEMON)).toBe(false);
  });
});
