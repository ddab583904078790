// The real `appduct` binary for end-to-end tests: a daemon in the foreground (`daemon run`) on a
// private state dir with `{"wssPort": 0}`, and CLI runs against it. The binary is APPDUCT_BIN,
// else <repo>/target/debug/appduct (scripts/test builds it before the SDK tests).

import { execFile, spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, rm, writeFile, mkdir } from "node:fs/promises";
import path from "node:path";
import { fileURLToPath } from "node:url";

import { stopProcess, waitForLine } from "./processes.js";
import type { Cleanup } from "./fake-daemon.js";

const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../../../..");

/** The binary under test; throws, naming both places, when there is none. */
export function appductBin(): string {
  const fromEnv = process.env.APPDUCT_BIN;
  const bin = fromEnv !== undefined && fromEnv !== "" ? fromEnv : path.join(REPO_ROOT, "target", "debug", "appduct");
  if (!existsSync(bin)) {
    throw new Error(`no appduct binary at ${bin}: run \`cargo build -p appduct\` or set APPDUCT_BIN`);
  }
  return bin;
}

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
  /** The `--json` envelope. */
  json: { ok: boolean; data?: unknown; error?: { type: string; message: string } };
}

export interface RealDaemon {
  stateDir: string;
  pid: number;
  /** `appduct --state-dir <dir> --json <args…>`. */
  cli(args: readonly string[]): Promise<CliResult>;
  /** `data` of a successful `--json` run; throws with the envelope otherwise. */
  data<T = unknown>(args: readonly string[]): Promise<T>;
  /** `appduct --state-dir <dir> <args…>` (human output) left running; stopped by the cleanups. */
  spawnCli(args: readonly string[]): ChildProcessWithoutNullStreams;
}

/** The environment of every appduct process: no APPDUCT_* from outside, a private HOME. */
function scrubbedEnv(home: string): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (!key.startsWith("APPDUCT_") && key !== "NO_COLOR") env[key] = value;
  }
  env.HOME = home;
  return env;
}

/** Starts `appduct daemon run` on a fresh state dir; `cleanups` stops it and removes the dir. */
export async function startRealDaemon(cleanups: Cleanup[], config: Record<string, unknown> = { wssPort: 0 }): Promise<RealDaemon> {
  const bin = appductBin();
  // Short, under /tmp: the control socket path must fit a sockaddr_un.
  const root = await mkdtemp("/tmp/adt");
  const stateDir = path.join(root, "s");
  const home = path.join(root, "h");
  await mkdir(stateDir, { recursive: true, mode: 0o700 });
  await mkdir(home, { recursive: true });
  await writeFile(path.join(stateDir, "config.json"), JSON.stringify(config));
  const env = scrubbedEnv(home);

  const cli = (args: readonly string[]): Promise<CliResult> =>
    new Promise((resolve, reject) => {
      execFile(bin, ["--state-dir", stateDir, "--json", ...args], { env, cwd: home, timeout: 30_000 }, (error, stdout, stderr) => {
        const code = error ? (typeof error.code === "number" ? error.code : -1) : 0;
        try {
          resolve({ code, stdout, stderr, json: JSON.parse(stdout) as CliResult["json"] });
        } catch {
          reject(new Error(`appduct ${args.join(" ")} exited ${code} without a JSON envelope:\n${stdout}\n${stderr}`));
        }
      });
    });

  const child = spawn(bin, ["--state-dir", stateDir, "--json", "daemon", "run"], { env, cwd: home, stdio: ["ignore", "pipe", "pipe"] });
  const stderr: string[] = [];
  child.stderr.on("data", (chunk: Buffer) => stderr.push(chunk.toString()));
  cleanups.push(async () => {
    await stopProcess(child);
    // A CLI run after an early daemon death may have spawned another one for this dir.
    await new Promise<void>((resolve) => execFile(bin, ["--state-dir", stateDir, "daemon", "stop"], { env, timeout: 15_000 }, () => resolve()));
    await rm(root, { recursive: true, force: true });
  });
  const pid = await waitForLine(
    child,
    child.stdout,
    (line) => {
      try {
        const ready = JSON.parse(line) as { ok?: boolean; data?: { daemon?: { pid?: number } } };
        return ready.ok === true ? ready.data?.daemon?.pid : undefined;
      } catch {
        return undefined;
      }
    },
    20_000,
    "the daemon's ready line",
  ).catch((error: unknown) => {
    throw new Error(`${String(error)}\nstderr:\n${stderr.join("")}`);
  });

  return {
    stateDir,
    pid,
    cli,
    data: async <T>(args: readonly string[]): Promise<T> => {
      const ran = await cli(args);
      if (ran.code !== 0 || !ran.json.ok) {
        throw new Error(`appduct ${args.join(" ")} failed (exit ${ran.code}): ${ran.stdout} ${ran.stderr}`);
      }
      return ran.json.data as T;
    },
    spawnCli: (args) => {
      const proc = spawn(bin, ["--state-dir", stateDir, ...args], { env: { ...env, NO_COLOR: "1" }, cwd: home });
      cleanups.push(() => stopProcess(proc));
      return proc;
    },
  };
}
