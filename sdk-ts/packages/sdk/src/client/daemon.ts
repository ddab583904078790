// Reaching the daemon (§C1.1, §C16; §T1): the state directory and its socket, and
// connect-or-spawn, where spawning is `<bin> daemon start --json --state-dir <dir>` (the CLI owns
// the one spawn implementation; this client never runs the version-drift check).

import os from "node:os";
import path from "node:path";

import { runCli, resolveBin } from "./cli.js";
import { RpcConnection, type ConnectionOptions } from "./connection.js";
import { AppductError } from "./errors.js";

/** Longest socket path the daemon binds and clients use (§C1.1). */
export const MAX_SOCKET_PATH_BYTES = 100;

/** `stateDir`, else `APPDUCT_STATE_DIR`, else `~/.appduct`; made absolute. */
export function resolveStateDir(stateDir: string | undefined): string {
  if (stateDir !== undefined && stateDir !== "") return path.resolve(stateDir);
  const fromEnv = process.env.APPDUCT_STATE_DIR;
  if (fromEnv !== undefined && fromEnv !== "") return path.resolve(fromEnv);
  return path.join(os.homedir(), ".appduct");
}

/** `<stateDir>/daemon.sock`; a path over 100 bytes fails before any connect attempt. */
export function socketPathOf(stateDir: string): string {
  const socketPath = path.join(stateDir, "daemon.sock");
  const bytes = Buffer.byteLength(socketPath);
  if (bytes > MAX_SOCKET_PATH_BYTES) {
    throw new AppductError(
      "connection_error",
      `The socket path ${socketPath} is ${bytes} bytes, longer than the ${MAX_SOCKET_PATH_BYTES}-byte limit; set APPDUCT_STATE_DIR (or stateDir) to a shorter directory.`,
      { details: { socketPath, bytes, maxBytes: MAX_SOCKET_PATH_BYTES } },
    );
  }
  return socketPath;
}

export interface DaemonTarget {
  /** Already resolved with `resolveStateDir`. */
  stateDir: string;
  autoSpawn: boolean;
  bin?: string;
  connection?: ConnectionOptions;
}

/** Whether a connect failure means "no daemon there" (spawning may help). */
function isAbsent(error: unknown): boolean {
  const code = (error as NodeJS.ErrnoException | null)?.code;
  return code === "ENOENT" || code === "ECONNREFUSED";
}

function unreachable(socketPath: string, error: unknown, hint?: string): AppductError {
  const reason = error instanceof Error ? error.message : String(error);
  return new AppductError("connection_error", `Cannot reach the appduct daemon at ${socketPath} (${reason}).${hint ? ` ${hint}` : ""}`, { details: { socketPath }, cause: error });
}

/** Opens a connection to the daemon of `target.stateDir`, spawning it once when allowed. */
export async function openDaemonConnection(target: DaemonTarget): Promise<RpcConnection> {
  const socketPath = socketPathOf(target.stateDir);
  try {
    return await RpcConnection.open(socketPath, target.connection);
  } catch (error) {
    if (!isAbsent(error)) throw unreachable(socketPath, error);
    if (!target.autoSpawn) throw unreachable(socketPath, error, "No daemon is running and autoSpawn is false; start one with `appduct daemon start`.");
  }
  const bin = resolveBin(target.bin);
  try {
    await runCli(bin, ["daemon", "start", "--json", "--state-dir", target.stateDir]);
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    const details = error instanceof AppductError && error.details !== undefined ? { socketPath, bin, spawn: { type: error.type, details: error.details } } : { socketPath, bin };
    throw new AppductError("connection_error", `Starting the appduct daemon with \`${bin} daemon start\` failed: ${reason}`, { details, cause: error });
  }
  try {
    return await RpcConnection.open(socketPath, target.connection);
  } catch (error) {
    throw unreachable(socketPath, error, "The daemon was started but does not accept connections.");
  }
}
