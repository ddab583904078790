// @appduct/sdk/client: the test-runner client (07 §7.13). A Node client of the daemon's control
// plane (03); it never talks to a device. No side effects at import.

import { isJsonObject } from "../core/text.js";
import { ControlAppClient } from "./app-client.js";
import { resolveBin, runCli } from "./cli.js";
import { openDaemonConnection, resolveStateDir, type DaemonTarget } from "./daemon.js";
import { AppductError, clientError } from "./errors.js";
import type { AppClient, ConnectOptions, LinkOptions, LinkResult, WaitForSessionOptions } from "./types.js";
import { startStreamWait, waitTimeout } from "./wait.js";

/** Default per-request timeout (03 §13). */
const DEFAULT_REQUEST_TIMEOUT_MS = 10_000;
/** Default `waitForSession` timeout (07 §7.13.1). */
const DEFAULT_SESSION_WAIT_MS = 120_000;

function target(options: { stateDir?: string | undefined; autoSpawn?: boolean | undefined; bin?: string | undefined }): DaemonTarget {
  const resolved: DaemonTarget = { stateDir: resolveStateDir(options.stateDir), autoSpawn: options.autoSpawn ?? true };
  if (options.bin !== undefined) resolved.bin = options.bin;
  return resolved;
}

/**
 * Connects to the daemon (spawning it when allowed) and resolves `selector` once with
 * `sessions.describe`; the session's errors (`no_session`, `ambiguous_session`,
 * `unknown_session`) reject at once.
 */
export async function connect(options: ConnectOptions = {}): Promise<AppClient> {
  const requestTimeoutMs = options.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
  if (typeof requestTimeoutMs !== "number" || !(requestTimeoutMs > 0)) {
    throw clientError(`requestTimeoutMs must be a number > 0; got ${String(requestTimeoutMs)}.`, { param: "requestTimeoutMs" });
  }
  const daemon = target(options);
  const connection = await openDaemonConnection(daemon);
  try {
    const summary = await connection.request("sessions.describe", options.selector === undefined ? {} : { selector: options.selector }, { timeoutMs: requestTimeoutMs });
    if (!isJsonObject(summary) || typeof summary.sessionId !== "string" || typeof summary.alias !== "string") {
      throw new AppductError("internal_error", "The appduct daemon answered sessions.describe with an unexpected result.", { details: { method: "sessions.describe" } });
    }
    return new ControlAppClient(connection, summary.sessionId, summary.alias, { ...daemon, autoSpawn: false }, requestTimeoutMs);
  } catch (error) {
    await connection.close();
    throw error;
  }
}

/**
 * Runs `<bin> sessions link --json` with the matching flags and resolves with the envelope's
 * `data`. A failure envelope rejects with the CLI's `error.type`.
 */
export async function link(options: LinkOptions = {}): Promise<LinkResult> {
  const args = ["sessions", "link", "--json"];
  const flag = (name: string, value: string | number | undefined): void => {
    if (value !== undefined) args.push(name, String(value));
  };
  flag("--open", options.target);
  flag("--device", options.device);
  flag("--app-id", options.appId);
  if (options.relaunch === true) args.push("--relaunch");
  flag("--scheme", options.scheme);
  flag("--url", options.url);
  flag("--transport", options.transport);
  flag("--ttl", options.ttlSeconds);
  if (options.stateDir !== undefined) flag("--state-dir", resolveStateDir(options.stateDir));
  const run: { cwd?: string; env?: Record<string, string> } = {};
  if (options.cwd !== undefined) run.cwd = options.cwd;
  if (options.env !== undefined) run.env = options.env;
  const bin = resolveBin(options.bin);
  const data = await runCli(bin, args, run);
  if (!isJsonObject(data) || typeof data.sessionId !== "string") {
    throw clientError(`${bin} sessions link printed an envelope without a sessionId.`, { argv: [bin, ...args], data });
  }
  return data as unknown as LinkResult;
}

/**
 * Resolves with an `AppClient` once session `sessionId` is claimed, at once when it already is.
 * A link that expires or is revoked first rejects with `unknown_session`.
 */
export async function waitForSession(sessionId: string, options: WaitForSessionOptions = {}): Promise<AppClient> {
  if (typeof sessionId !== "string" || sessionId === "") throw clientError("sessionId must be a non-empty string.", { param: "sessionId" });
  const timeoutMs = waitTimeout(options.timeoutMs, DEFAULT_SESSION_WAIT_MS);
  const daemon = target(options);
  const ended = (reason: "expired" | "revoked"): AppductError =>
    new AppductError("unknown_session", `The link of session ${sessionId} was ${reason} before a device claimed it.`, { details: { selector: sessionId, reason } });
  const wait = startStreamWait<void>({
    target: daemon,
    timeoutMs,
    timeoutError: () => new AppductError("timeout", `Session ${sessionId} was not claimed within ${timeoutMs} ms.`, { details: { sessionId, timeoutMs } }),
    ...(options.signal === undefined ? {} : { signal: options.signal }),
    run: (connection, { resolve, reject }) => {
      connection.onNotification((method, params) => {
        if (method !== "event" || !isJsonObject(params) || params.sessionId !== sessionId) return;
        if (params.kind === "session_claimed") resolve();
        else if (params.kind === "link_expired") reject(ended("expired"));
        else if (params.kind === "session_revoked") reject(ended("revoked"));
      });
      // Subscribe first, then look: a claim between the two is seen by one of them.
      const requestOptions = { timeoutMs: DEFAULT_REQUEST_TIMEOUT_MS };
      connection
        .request("events.subscribe", { kinds: ["session_claimed", "session_revoked", "link_expired"] }, requestOptions)
        .then(() => connection.request("sessions.describe", { selector: sessionId }, requestOptions))
        .then(
          () => resolve(),
          (error: unknown) => {
            // A pending link is "unknown" with details.pending (03 §7): keep waiting for its claim.
            const pending = error instanceof AppductError && error.type === "unknown_session" && isJsonObject(error.details) && error.details.pending === true;
            if (!pending) reject(error);
          },
        );
    },
  });
  await wait.promise;
  const connectOptions: ConnectOptions = { selector: sessionId, stateDir: daemon.stateDir, autoSpawn: daemon.autoSpawn };
  if (daemon.bin !== undefined) connectOptions.bin = daemon.bin;
  return connect(connectOptions);
}

export { AppductError, type AppductErrorOptions } from "./errors.js";
export type * from "./types.js";
