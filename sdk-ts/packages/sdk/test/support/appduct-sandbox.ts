// The real `appduct` binary in a private state directory, for the end-to-end suites: the binary
// comes from APPDUCT_BIN, else <repo>/target/debug/appduct (scripts/test builds it first). Every
// process a sandbox starts is stopped by `stop()`: the daemon (`daemon stop`, then SIGKILL to the
// pid left in the pidfile) and every device process.

import { execFile, spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

const SDK_TS = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..");
const REPO_ROOT = path.resolve(SDK_TS, "..");
/** The Node playground device, as built by the global setup. */
const NODE_DEVICE = path.join(SDK_TS, "playground", "dist", "node", "main.js");

/** The binary under test; a missing one fails the suite with a hint (never a silent skip). */
export function appductBin(): string {
  const fromEnv = process.env.APPDUCT_BIN;
  const bin = fromEnv !== undefined && fromEnv !== "" ? fromEnv : path.join(REPO_ROOT, "target", "debug", "appduct");
  if (!existsSync(bin)) {
    throw new Error(`the appduct binary is missing at ${bin}: run \`cargo build -p appduct\` first, or set APPDUCT_BIN`);
  }
  return bin;
}

/** Resolves with `promise`, or rejects naming `what` after `ms`. */
export function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

export interface Device {
  child: ChildProcessWithoutNullStreams;
  lines: Record<string, unknown>[];
  /** The first stdout line (seen or future) whose fields equal `fields`, within `ms`. */
  waitForLine(fields: Record<string, unknown>, ms: number): Promise<Record<string, unknown>>;
  send(line: string): void;
}

export interface Sandbox {
  bin: string;
  stateDir: string;
  /** Runs the CLI with `--json --state-dir`; resolves with the parsed envelope. */
  cli(args: string[]): Promise<Record<string, unknown>>;
  /** Starts `appduct-playground-node <link> [extra…]` with APPDUCT_* scrubbed. */
  playground(link: string, extra: string[]): Device;
  /** Every audit record written so far. */
  audit(): Record<string, unknown>[];
  stop(): Promise<void>;
}

/** A fresh state dir (short enough for the socket path) with `config` as its config.json. */
export function createSandbox(config: Record<string, unknown>): Sandbox {
  const bin = appductBin();
  const stateDir = mkdtempSync(path.join(os.tmpdir(), "adc-e2e-"));
  writeFileSync(path.join(stateDir, "config.json"), JSON.stringify(config));
  const devices: ChildProcessWithoutNullStreams[] = [];
  const env = Object.fromEntries(Object.entries(process.env).filter(([key]) => !key.startsWith("APPDUCT_")));

  const cli = (args: string[]): Promise<Record<string, unknown>> =>
    new Promise((resolve, reject) => {
      execFile(bin, ["--json", "--state-dir", stateDir, ...args], { env, cwd: stateDir }, (error, stdout) => {
        try {
          resolve(JSON.parse(stdout) as Record<string, unknown>);
        } catch {
          reject(error ?? new Error(`appduct ${args.join(" ")} printed ${stdout}`));
        }
      });
    });

  return {
    bin,
    stateDir,
    cli,
    playground(link, extra) {
      const child = spawn(process.execPath, [NODE_DEVICE, link, ...extra], { env: { ...env, NODE_ENV: "test" }, cwd: stateDir });
      devices.push(child);
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
      return {
        child,
        lines,
        send: (line) => child.stdin.write(`${line}\n`),
        waitForLine: (fields, ms) =>
          within(
            new Promise((resolve) => {
              const seen = lines.find((l) => matches(l, fields));
              if (seen) resolve(seen);
              else waiters.push({ fields, resolve });
            }),
            ms,
            `device line ${JSON.stringify(fields)} (seen: ${JSON.stringify(lines)})`,
          ),
      };
    },
    audit() {
      const dir = path.join(stateDir, "audit");
      if (!existsSync(dir)) return [];
      return readdirSync(dir)
        .filter((f) => f.endsWith(".jsonl"))
        .sort()
        .flatMap((f) => readFileSync(path.join(dir, f), "utf8").split("\n"))
        .filter((l) => l !== "")
        .map((l) => JSON.parse(l) as Record<string, unknown>);
    },
    async stop() {
      for (const child of devices) {
        if (child.exitCode === null && child.signalCode === null) {
          const exited = new Promise((resolve) => child.once("exit", resolve));
          child.kill("SIGKILL");
          await exited;
        }
      }
      await cli(["daemon", "stop"]).catch(() => undefined);
      const pidfile = path.join(stateDir, "daemon.pid");
      const pid = existsSync(pidfile) ? Number(readFileSync(pidfile, "utf8").trim()) : NaN;
      if (Number.isInteger(pid) && pid > 0) {
        try {
          process.kill(pid, "SIGKILL");
        } catch {
          // Already gone.
        }
      }
      rmSync(stateDir, { recursive: true, force: true });
    },
  };
}
