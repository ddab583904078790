// Running the `appduct` binary with `--json` and reading its one envelope (§L3.1): the
// daemon spawn (`daemon start`, §T1) and `link()` (`sessions link`).

import { spawn } from "node:child_process";

import { isJsonObject } from "../core/text.js";
import { AppductError } from "./errors.js";

/** More output than any envelope of these commands: the child is stopped past it. */
const MAX_OUTPUT_BYTES = 1_048_576;
/** How much of the output a `client_error` quotes. */
const QUOTED_OUTPUT_CHARS = 4_096;

export interface CliRun {
  cwd?: string;
  /** Added to this process's environment. */
  env?: Record<string, string>;
}

/** The binary of `bin`, else `APPDUCT_BIN`, else `appduct` on `PATH`. */
export function resolveBin(bin: string | undefined): string {
  if (bin !== undefined && bin !== "") return bin;
  const fromEnv = process.env.APPDUCT_BIN;
  return fromEnv !== undefined && fromEnv !== "" ? fromEnv : "appduct";
}

interface Output {
  stdout: string;
  stderr: string;
  exitCode: number | null;
  signal: NodeJS.Signals | null;
}

function run(bin: string, args: readonly string[], options: CliRun): Promise<Output> {
  return new Promise((resolve, reject) => {
    const child = spawn(bin, args, {
      cwd: options.cwd,
      env: { ...process.env, ...options.env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let bytes = 0;
    let overflow = false;
    const collect = (into: Buffer[]) => (chunk: Buffer) => {
      bytes += chunk.length;
      if (bytes > MAX_OUTPUT_BYTES) {
        overflow = true;
        child.kill("SIGKILL");
        return;
      }
      into.push(chunk);
    };
    child.stdout.on("data", collect(out));
    child.stderr.on("data", collect(err));
    child.once("error", (error) => {
      reject(new AppductError("connection_error", `Cannot run ${bin}: ${error.message}`, { details: { bin }, cause: error }));
    });
    child.once("close", (exitCode, signal) => {
      const output = { stdout: Buffer.concat(out).toString("utf8"), stderr: Buffer.concat(err).toString("utf8"), exitCode, signal };
      if (overflow) {
        reject(unreadable(bin, args, output, `printed more than ${MAX_OUTPUT_BYTES} bytes`));
      } else {
        resolve(output);
      }
    });
  });
}

function unreadable(bin: string, args: readonly string[], output: Output, why: string): AppductError {
  return new AppductError("client_error", `${bin} ${args.slice(0, 2).join(" ")} ${why}; expected one JSON envelope.`, {
    details: {
      argv: [bin, ...args],
      exitCode: output.exitCode,
      stdout: output.stdout.slice(0, QUOTED_OUTPUT_CHARS),
      stderr: output.stderr.slice(0, QUOTED_OUTPUT_CHARS),
    },
  });
}

/**
 * Runs `<bin> <args…>` and resolves with the envelope's `data`. A failure envelope rejects with
 * its `error.type`; a binary that cannot be started with `connection_error`; anything but one
 * JSON envelope on stdout with `client_error`.
 */
export async function runCli(bin: string, args: readonly string[], options: CliRun = {}): Promise<unknown> {
  const output = await run(bin, args, options);
  const text = output.stdout.trim();
  let envelope: unknown;
  try {
    envelope = text.includes("\n") ? undefined : JSON.parse(text);
  } catch {
    envelope = undefined;
  }
  if (!isJsonObject(envelope) || typeof envelope.ok !== "boolean") {
    const why = output.signal !== null ? `was stopped by ${output.signal}` : text === "" ? "printed nothing" : "printed something else";
    throw unreadable(bin, args, output, why);
  }
  if (envelope.ok) return envelope.data;
  const error = isJsonObject(envelope.error) ? envelope.error : {};
  const type = typeof error.type === "string" ? error.type : "internal_error";
  const message = typeof error.message === "string" ? error.message : `${bin} ${args.slice(0, 2).join(" ")} failed.`;
  throw new AppductError(type, message, error.details === undefined ? {} : { details: error.details });
}
