// `appduct-sdk snapshot <module>` (§T17): the tool-surface snapshot of a module's declarations,
// without a daemon or a running app. The descriptors come from a client that never connects,
// through the same registration and registry-snapshot code a claim uses.

import { randomBytes } from "node:crypto";
import { closeSync, fchmodSync, fstatSync, openSync, readFileSync, readSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import { pathToFileURL } from "node:url";

import { createAppductClient } from "../core/client.js";
import { AppductRegistrationError } from "../core/errors.js";
import { canonicalText, SNAPSHOT_VERSION, surfaceDocument } from "../core/surface.js";
import type { AppductClient, EventDefinition, ToolDefinition } from "../core/types.js";

/** The largest snapshot file `--check` reads, as `appduct tools snapshot --check` (§L7.4). */
export const MAX_SNAPSHOT_FILE_BYTES = 16 * 1024 * 1024;

/** A failure with the CLI's error type; its exit code follows §L4. */
export class SnapshotCliError extends Error {
  constructor(
    readonly type: "usage_error" | "validation_error" | "inspection_error" | "assertion_error" | "internal_error",
    message: string,
    readonly details?: Record<string, unknown>,
    /** Human lines printed after the message (the entries that differ, the next step). */
    readonly tail?: string,
  ) {
    super(message);
    this.name = "SnapshotCliError";
  }

  get exitCode(): number {
    return EXIT_CODES[this.type];
  }
}

const EXIT_CODES = { usage_error: 64, validation_error: 65, inspection_error: 66, assertion_error: 3, internal_error: 1 } as const;

export interface SnapshotOptions {
  module: string;
  exportName: string | undefined;
  out: string | undefined;
  check: string | undefined;
  json: boolean;
}

export const SNAPSHOT_USAGE = `Usage: appduct-sdk snapshot <module> [--export <name>] [--out <file> | --check <file>] [--json]

Writes the tool-surface snapshot of a module's tool and event declarations: the document
"appduct tools snapshot --write" writes for a live session, without running the app.

  <module>           a JavaScript module (.js, .mjs); TypeScript through a loader, e.g.
                     NODE_OPTIONS="--import tsx" npx appduct-sdk snapshot src/tools.ts
  --export <name>    take the declarations from this export (an array of tool definitions,
                     or a function that registers them on the client it is given)
  --out <file>       write the snapshot to <file> (default: print it on stdout)
  --check <file>     compare with <file>; exit 3 when the surface differs
  --json             print one JSON envelope {"ok", "data" | "error"} on stdout

Without --export: the exports "tools" (and "events"), else "register", else "default".
`;

/** Parses the arguments after `snapshot`. */
export function parseSnapshotArgs(args: readonly string[]): SnapshotOptions {
  const opts: SnapshotOptions = { module: "", exportName: undefined, out: undefined, check: undefined, json: false };
  const positionals: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const arg = args[i] as string;
    const takeValue = (flag: string): string => {
      const eq = arg.indexOf("=");
      if (eq >= 0) return arg.slice(eq + 1);
      const value = args[++i];
      if (value === undefined) throw new SnapshotCliError("usage_error", `${flag} needs a value`);
      return value;
    };
    const flag = arg.startsWith("--") ? arg.split("=")[0] : undefined;
    if (flag === "--export") opts.exportName = takeValue(flag);
    else if (flag === "--out") opts.out = takeValue(flag);
    else if (flag === "--check") opts.check = takeValue(flag);
    else if (arg === "--json") opts.json = true;
    else if (arg === "--") positionals.push(...args.slice(i + 1)), (i = args.length);
    else if (arg.startsWith("-") && arg !== "-") throw new SnapshotCliError("usage_error", `unknown flag ${arg}`);
    else positionals.push(arg);
  }
  if (positionals.length !== 1) {
    throw new SnapshotCliError("usage_error", "snapshot needs exactly one module path");
  }
  opts.module = positionals[0] as string;
  if (opts.out !== undefined && opts.check !== undefined) {
    throw new SnapshotCliError("usage_error", "snapshot takes at most one of --out <file> and --check <file>");
  }
  for (const [flag, value] of [["--export", opts.exportName], ["--out", opts.out], ["--check", opts.check]] as const) {
    if (value === "") throw new SnapshotCliError("usage_error", `${flag} needs a value`);
  }
  return opts;
}

type Declarations =
  | { kind: "lists"; source: string; tools: unknown; events: unknown }
  | { kind: "function"; source: string; register: (client: AppductClient) => unknown };

/** Which export holds the declarations (§T17). */
export function pickDeclarations(mod: Record<string, unknown>, exportName: string | undefined): Declarations {
  const fromValue = (name: string, value: unknown): Declarations => {
    if (typeof value === "function") return { kind: "function", source: name, register: value as (client: AppductClient) => unknown };
    if (Array.isArray(value)) return { kind: "lists", source: name, tools: value, events: undefined };
    throw new SnapshotCliError(
      "validation_error",
      `the export "${name}" is ${describe(value)}; it must be an array of tool definitions or a function that registers them`,
      { export: name },
    );
  };
  const has = (name: string): boolean => Object.prototype.hasOwnProperty.call(mod, name) && mod[name] !== undefined;
  if (exportName !== undefined) {
    if (!has(exportName)) {
      throw new SnapshotCliError("validation_error", `the module has no export "${exportName}"`, { export: exportName, exports: Object.keys(mod).sort() });
    }
    return fromValue(exportName, mod[exportName]);
  }
  if (has("tools") || has("events")) {
    for (const name of ["tools", "events"]) {
      if (has(name) && !Array.isArray(mod[name])) {
        throw new SnapshotCliError("validation_error", `the export "${name}" is ${describe(mod[name])}; it must be an array`, { export: name });
      }
    }
    return { kind: "lists", source: has("tools") ? "tools" : "events", tools: mod.tools, events: mod.events };
  }
  if (has("register")) return fromValue("register", mod.register);
  if (has("default")) return fromValue("default", mod.default);
  throw new SnapshotCliError(
    "validation_error",
    'the module exports no declarations: export "tools" (and "events") arrays, a "register" function or a default, or name one with --export',
    { exports: Object.keys(mod).sort() },
  );
}

function describe(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  return typeof value === "object" ? "an object" : `a ${typeof value}`;
}

/** Registers the declarations on a client that never connects, and returns its document. */
export async function buildSnapshot(decl: Declarations, warn: (message: string) => void): Promise<Record<string, unknown>> {
  const client = createAppductClient({
    transport: () => {
      throw new Error("appduct-sdk snapshot never connects");
    },
    // Development rules: a schema that cannot be exported as JSON Schema is an error here,
    // not a silently missing field (§T4 form 4).
    dev: true,
    logger: { warn: (...args: unknown[]) => warn(args.map(String).join(" ")), error: (...args: unknown[]) => warn(args.map(String).join(" ")) },
  });
  try {
    if (decl.kind === "function") {
      await decl.register(client);
    } else {
      for (const def of decl.tools === undefined ? [] : (decl.tools as unknown[])) client.registerTool(def as ToolDefinition);
      for (const def of decl.events === undefined ? [] : (decl.events as unknown[])) client.registerEvent(def as EventDefinition);
    }
  } catch (error) {
    if (error instanceof SnapshotCliError) throw error;
    const message = error instanceof Error ? error.message : String(error);
    const registration = error instanceof AppductRegistrationError;
    throw new SnapshotCliError(
      "validation_error",
      `${registration ? "invalid declaration" : `the export "${decl.source}" threw`}: ${message}`,
      registration ? { export: decl.source, field: error.field } : { export: decl.source },
    );
  }
  return surfaceDocument(client.registrySnapshot());
}

/**
 * Sends whatever the imported module prints to stdout (`console.log`, `info`, `debug`, `dir`,
 * `table`, `process.stdout.write`) to stderr instead, so that stdout carries only the
 * document (`appduct-sdk snapshot m.mjs | appduct tools snapshot --from -`). Returns the
 * function that puts the previous writers back.
 */
export function routeStdoutToStderr(): () => void {
  const stdout = process.stdout;
  const previousWrite = stdout.write;
  const saved = (["log", "info", "debug", "dir", "table"] as const).map((name) => [name, console[name]] as const);
  stdout.write = ((...args: unknown[]) => (process.stderr.write as (...a: unknown[]) => boolean)(...args)) as typeof stdout.write;
  for (const [name] of saved) {
    console[name] = (...args: unknown[]) => console.error(...args);
  }
  return () => {
    stdout.write = previousWrite;
    for (const [name, fn] of saved) (console as unknown as Record<string, unknown>)[name] = fn;
  };
}

/** Imports the module by path, relative to `cwd`. */
export async function importModule(path: string, cwd: string): Promise<Record<string, unknown>> {
  const absolute = resolve(cwd, path);
  try {
    if (!statSync(absolute).isFile()) throw new Error("not a file");
  } catch (error) {
    throw new SnapshotCliError("usage_error", `cannot import ${path}: ${error instanceof Error ? error.message : String(error)}`, { module: path });
  }
  try {
    return (await import(pathToFileURL(absolute).href)) as Record<string, unknown>;
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    const hint = /\.[cm]?tsx?$/.test(absolute) ? ' (TypeScript needs a loader: NODE_OPTIONS="--import tsx")' : "";
    throw new SnapshotCliError("validation_error", `cannot import ${path}: ${message}${hint}`, { module: path });
  }
}

const plural = (n: number, one: string): string => `${n} ${one}${n === 1 ? "" : "s"}`;

function counts(doc: Record<string, unknown>): { tools: number; events: number } {
  const len = (v: unknown): number => (Array.isArray(v) ? v.length : 0);
  return { tools: len(doc.tools), events: len(doc.events) };
}

function countsText(doc: Record<string, unknown>): string {
  const c = counts(doc);
  return `${plural(c.tools, "tool")}, ${plural(c.events, "event")}`;
}

export interface SnapshotResult {
  /** The `data` of the JSON envelope. */
  data: Record<string, unknown>;
  /** The human output on stdout. */
  human: string;
}

/** `--out <file>`: atomic (a temporary file beside it, then a rename), 0644, only when changed. */
export function writeSnapshot(path: string, doc: Record<string, unknown>, shown: string = path): SnapshotResult {
  const text = canonicalText(doc);
  const parent = dirname(path);
  let parentIsDir = false;
  try {
    parentIsDir = statSync(parent).isDirectory();
  } catch {
    parentIsDir = false;
  }
  if (!parentIsDir) {
    throw new SnapshotCliError("usage_error", `cannot write the snapshot to ${shown}: ${dirname(shown)} is not a directory`, { path: shown });
  }
  let changed = true;
  try {
    changed = readFileSync(path, "utf8") !== text;
  } catch {
    changed = true;
  }
  if (changed) {
    // A name nobody can predict, created exclusively (`wx`: O_CREAT | O_EXCL), so a file or a
    // symlink planted in the directory is never followed or overwritten; only a file this run
    // created is removed on failure.
    const tmp = join(parent, `.${basename(path)}.${randomBytes(8).toString("hex")}.tmp`);
    let created = false;
    try {
      const fd = openSync(tmp, "wx", 0o644);
      created = true;
      try {
        writeFileSync(fd, text);
        fchmodSync(fd, 0o644);
      } finally {
        closeSync(fd);
      }
      renameSync(tmp, path);
    } catch (error) {
      if (created) rmSync(tmp, { force: true });
      throw new SnapshotCliError("usage_error", `cannot write the snapshot to ${shown}: ${error instanceof Error ? error.message : String(error)}`, { path: shown });
    }
  }
  const c = counts(doc);
  return {
    data: { path: shown, tools: c.tools, events: c.events, changed },
    human: `Wrote tools snapshot to ${shown} (${countsText(doc)}).${changed ? "" : " Unchanged."}\n`,
  };
}

/** Reads a snapshot file under the size cap; anything unusable is an `inspection_error`. */
export function readSnapshotFile(path: string, shown: string = path): Record<string, unknown> {
  const unusable = (why: string, extra: Record<string, unknown> = {}): SnapshotCliError =>
    new SnapshotCliError("inspection_error", `cannot use the snapshot ${shown}: ${why}`, { path: shown, ...extra });
  let text: string;
  try {
    const fd = openSync(path, "r");
    try {
      if (fstatSync(fd).size > MAX_SNAPSHOT_FILE_BYTES) {
        throw unusable(`it is larger than ${MAX_SNAPSHOT_FILE_BYTES} bytes`, { maxBytes: MAX_SNAPSHOT_FILE_BYTES });
      }
      // A file whose size says nothing (a pipe, a device) is cut off one byte past the cap.
      const buffer = Buffer.alloc(MAX_SNAPSHOT_FILE_BYTES + 1);
      let length = 0;
      for (;;) {
        const n = readSync(fd, buffer, length, buffer.length - length, null);
        if (n === 0) break;
        length += n;
        if (length > MAX_SNAPSHOT_FILE_BYTES) {
          throw unusable(`it is larger than ${MAX_SNAPSHOT_FILE_BYTES} bytes`, { maxBytes: MAX_SNAPSHOT_FILE_BYTES });
        }
      }
      text = new TextDecoder("utf-8", { fatal: true }).decode(buffer.subarray(0, length));
    } finally {
      closeSync(fd);
    }
  } catch (error) {
    if (error instanceof SnapshotCliError) throw error;
    throw unusable(error instanceof Error ? error.message : String(error));
  }
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (error) {
    throw unusable(error instanceof Error ? error.message : String(error));
  }
  if (doc === null || typeof doc !== "object" || Array.isArray(doc)) throw unusable("it is not a JSON object");
  const record = doc as Record<string, unknown>;
  if (record.snapshotVersion !== SNAPSHOT_VERSION) throw unusable("snapshotVersion is not 1");
  if (!Array.isArray(record.tools) || !Array.isArray(record.events)) throw unusable("it has no tools or events list");
  return record;
}

function byName(list: unknown): Map<string, unknown> {
  const map = new Map<string, unknown>();
  for (const entry of Array.isArray(list) ? list : []) {
    const name = entry !== null && typeof entry === "object" && typeof (entry as { name?: unknown }).name === "string" ? (entry as { name: string }).name : "";
    map.set(name, entry);
  }
  return map;
}

function compare(file: unknown, current: unknown): { added: string[]; removed: string[]; changed: string[] } {
  const f = byName(file);
  const c = byName(current);
  const sorted = (names: Iterable<string>): string[] => [...names].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  return {
    added: sorted([...c.keys()].filter((n) => !f.has(n))),
    removed: sorted([...f.keys()].filter((n) => !c.has(n))),
    changed: sorted([...c.keys()].filter((n) => f.has(n) && canonicalText(f.get(n)) !== canonicalText(c.get(n)))),
  };
}

/** `--check <file>`: the same matching as `appduct tools snapshot --check` (§L7.4). */
export function checkSnapshot(filePath: string, doc: Record<string, unknown>, rerun: string, path: string = filePath, diffCommand?: string): SnapshotResult {
  const file = readSnapshotFile(filePath, path);
  const tools = compare(file.tools, doc.tools);
  const events = compare(file.events, doc.events);
  const total = (k: "added" | "removed" | "changed"): number => tools[k].length + events[k].length;
  const c = counts(doc);
  if (total("added") + total("removed") + total("changed") === 0) {
    return {
      data: { path, matches: true, tools: c.tools, events: c.events },
      human: `Tools snapshot matches ${path} (${countsText(doc)}).\n`,
    };
  }
  let tail = "";
  for (const [mark, key] of [["+", "added"], ["-", "removed"], ["~", "changed"]] as const) {
    for (const name of tools[key]) tail += `${mark} tool ${cleanLine(name)}\n`;
  }
  for (const [mark, key] of [["+", "added"], ["-", "removed"], ["~", "changed"]] as const) {
    for (const name of events[key]) tail += `${mark} event ${cleanLine(name)}\n`;
  }
  if (diffCommand !== undefined) tail += `For a diff: ${diffCommand}\n`;
  tail += `Review the change, then run "${rerun}".\n`;
  throw new SnapshotCliError(
    "assertion_error",
    `Tool surface differs from ${path}: ${total("added")} added, ${total("removed")} removed, ${total("changed")} changed`,
    {
      path,
      added: { tools: tools.added, events: events.added },
      removed: { tools: tools.removed, events: events.removed },
      changed: { tools: tools.changed, events: events.changed },
    },
    tail,
  );
}

/** A name on one terminal line: control characters shown as `\uXXXX`. */
function cleanLine(text: string): string {
  return text.replace(/[\u0000-\u001f\u007f-\u009f]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

export interface SnapshotRun {
  exitCode: number;
  stdout: string;
  stderr: string;
}

/** Runs `snapshot` with its arguments; never throws. */
export async function runSnapshot(args: readonly string[], cwd: string = process.cwd()): Promise<SnapshotRun> {
  const json = args.includes("--json");
  const warnings: string[] = [];
  try {
    if (args.includes("--help") || args.includes("-h")) {
      return { exitCode: 0, stdout: SNAPSHOT_USAGE, stderr: "" };
    }
    const opts = parseSnapshotArgs(args);
    // The module's own output goes to stderr while it is imported and registers (§T17).
    const restore = routeStdoutToStderr();
    let doc: Record<string, unknown>;
    try {
      const mod = await importModule(opts.module, cwd);
      const decl = pickDeclarations(mod, opts.exportName);
      doc = await buildSnapshot(decl, (m) => warnings.push(m));
    } finally {
      restore();
    }
    const humanWarnings = json ? "" : warnings.map((w) => `${w}\n`).join("");
    const withWarnings = (data: Record<string, unknown>): Record<string, unknown> => (warnings.length > 0 ? { ...data, warnings } : data);
    if (opts.check !== undefined) {
      const command = `appduct-sdk snapshot ${[opts.module, ...(opts.exportName ? ["--export", opts.exportName] : [])].join(" ")}`;
      const result = checkSnapshot(resolve(cwd, opts.check), doc, `${command} --out ${opts.check}`, opts.check, `${command} | appduct tools snapshot --from - --check ${opts.check}`);
      return done(json, withWarnings(result.data), result.human, humanWarnings);
    }
    if (opts.out !== undefined) {
      const result = writeSnapshot(resolve(cwd, opts.out), doc, opts.out);
      return done(json, withWarnings(result.data), result.human, humanWarnings);
    }
    // No file: the document itself on stdout, as `tools snapshot --write -` (no envelope).
    return { exitCode: 0, stdout: canonicalText(doc), stderr: humanWarnings };
  } catch (error) {
    const e =
      error instanceof SnapshotCliError ? error : new SnapshotCliError("internal_error", error instanceof Error ? error.message : String(error));
    if (json) {
      const body: Record<string, unknown> = { type: e.type, message: e.message };
      if (e.details !== undefined) body.details = e.details;
      return { exitCode: e.exitCode, stdout: `${JSON.stringify({ ok: false, error: body })}\n`, stderr: "" };
    }
    const stderr = `${warnings.map((w) => `${w}\n`).join("")}${errorBlock(e)}${e.tail ?? ""}`;
    return { exitCode: e.exitCode, stdout: "", stderr };
  }
}

function done(json: boolean, data: Record<string, unknown>, human: string, humanWarnings: string): SnapshotRun {
  if (json) return { exitCode: 0, stdout: `${JSON.stringify({ ok: true, data })}\n`, stderr: "" };
  return { exitCode: 0, stdout: human, stderr: humanWarnings };
}

/** The CLI's human error block (§L3.3); a drift's entries follow it instead of `Details`. */
function errorBlock(e: SnapshotCliError): string {
  let block = `Command failed\n  Type:     ${e.type}\n  Message:  ${cleanLine(e.message)}\n`;
  if (e.details !== undefined && e.tail === undefined) block += `  Details:  ${cleanLine(JSON.stringify(e.details))}\n`;
  return block;
}
