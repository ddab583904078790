// @appduct/sdk/client: the test-runner client (§T13). A Node client of the daemon's control
// plane (03); it never talks to a device. No side effects at import.

import { isJsonObject } from "../core/text.js";
import { ControlAppClient } from "./app-client.js";
import { resolveBin, runCli } from "./cli.js";
import { openDaemonConnection, resolveStateDir, type DaemonTarget } from "./daemon.js";
import { AppductError, clientError } from "./errors.js";
import type { AppClient, ConnectOptions, LinkOptions, LinkResult, RegistryState, WaitForSessionOptions } from "./types.js";
import { startStreamWait, waitTimeout } from "./wait.js";

/** Default per-request timeout (§C16). */
const DEFAULT_REQUEST_TIMEOUT_MS = 10_000;
/** Default `waitForSession` timeout (§T13.1). */
const DEFAULT_SESSION_WAIT_MS = 120_000;
/** After the claim, the registry is waited for until the deadline, and at least this long (issue #23). */
const REGISTRY_GRACE_MS = 2_000;
/** What to do about an app's refusal of a link (`link_refused`, issue #23). */
const REFUSAL_HINTS: Record<string, string> = {
  unsupported_link: "The app has only the JavaScript SDK, which cannot use a native link; mint the link with --for react-native.",
  link_expired: "Mint a new link, and check that the device's clock is right (the app compares the link's expiry with it).",
  handshake_failed: "Mint a new link: one minted before the daemon's key changed (appduct keygen --force) no longer fits.",
  pin_mismatch: "Mint a new link: the host key changed since this one was minted (appduct keygen --force), or another server answered.",
};

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
  return connectSession(options);
}

/** `sessions.describe` `registry`; a daemon that does not report it predates it (its claim meant ready). */
function registryOf(summary: Record<string, unknown>): RegistryState {
  return summary.registry === "pending" ? "pending" : "received";
}

async function connectSession(options: ConnectOptions): Promise<ControlAppClient> {
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
    return new ControlAppClient(connection, summary.sessionId, summary.alias, { ...daemon, autoSpawn: false }, requestTimeoutMs, registryOf(summary));
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
  flag("--for", options.for);
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
 * Resolves with an `AppClient` once session `sessionId` is claimed and its tool registry has
 * arrived (issue #23), at once when it already has. If the app sends no tools by the deadline (and
 * at least 2 s after the claim), it resolves anyway with `registry: "pending"`. A link that expires
 * or is revoked first rejects with `unknown_session`; one the app refused rejects at once with
 * `unknown_session`, `details: {selector, refused, hint}`.
 */
export async function waitForSession(sessionId: string, options: WaitForSessionOptions = {}): Promise<AppClient> {
  if (typeof sessionId !== "string" || sessionId === "") throw clientError("sessionId must be a non-empty string.", { param: "sessionId" });
  const timeoutMs = waitTimeout(options.timeoutMs, DEFAULT_SESSION_WAIT_MS);
  const started = Date.now();
  const daemon = target(options);
  const ended = (reason: "expired" | "revoked"): AppductError =>
    new AppductError("unknown_session", `The link of session ${sessionId} was ${reason} before a device claimed it.`, { details: { selector: sessionId, reason } });
  const refused = (reason: unknown): AppductError => {
    const why = typeof reason === "string" ? reason : "unknown";
    return new AppductError("unknown_session", `The app refused the link of session ${sessionId} (${why}).`, {
      details: { selector: sessionId, refused: why, hint: REFUSAL_HINTS[why] ?? "Mint a new link." },
    });
  };
  const signal = options.signal === undefined ? {} : { signal: options.signal };
  const requestOptions = { timeoutMs: DEFAULT_REQUEST_TIMEOUT_MS };
  const claim = startStreamWait<void>({
    target: daemon,
    timeoutMs,
    timeoutError: () => new AppductError("timeout", `Session ${sessionId} was not claimed within ${timeoutMs} ms.`, { details: { sessionId, timeoutMs } }),
    ...signal,
    run: (connection, { resolve, reject }) => {
      connection.onNotification((method, params) => {
        if (method !== "event" || !isJsonObject(params) || params.sessionId !== sessionId) return;
        if (params.kind === "session_claimed") resolve();
        else if (params.kind === "link_expired") reject(ended("expired"));
        else if (params.kind === "session_revoked") reject(ended("revoked"));
        else if (params.kind === "link_refused") reject(refused(isJsonObject(params.data) ? params.data.reason : undefined));
      });
      // Subscribe first, then look: a claim between the two is seen by one of them.
      connection
        .request("events.subscribe", { kinds: ["session_claimed", "session_revoked", "link_expired", "link_refused"] }, requestOptions)
        .then(() => connection.request("sessions.describe", { selector: sessionId }, requestOptions))
        .then(
          () => resolve(),
          (error: unknown) => {
            // A pending link is "unknown" with details.pending (§C6): keep waiting for its claim,
            // unless the app already refused it.
            const details = error instanceof AppductError && isJsonObject(error.details) ? error.details : undefined;
            const pending = error instanceof AppductError && error.type === "unknown_session" && details?.pending === true;
            if (!pending) reject(error);
            else if (details?.refused !== undefined) reject(refused(details.refused));
          },
        );
    },
  });
  await claim.promise;
  const claimedAt = Date.now();
  const connectOptions: ConnectOptions = { selector: sessionId, stateDir: daemon.stateDir, autoSpawn: daemon.autoSpawn };
  if (daemon.bin !== undefined) connectOptions.bin = daemon.bin;
  const client = await connectSession(connectOptions);
  if (client.registry === "received") return client;
  // Claimed, tools not there yet: wait for them until the deadline, and at least the grace.
  const until = Math.max(started + timeoutMs, claimedAt + REGISTRY_GRACE_MS);
  try {
    const registry = startStreamWait<RegistryState>({
      target: { ...daemon, autoSpawn: false },
      timeoutMs: Math.max(0, until - Date.now()),
      timeoutError: () => new AppductError("timeout", `The tools of session ${sessionId} did not arrive in time.`),
      timeoutValue: () => "pending",
      ...signal,
      run: (connection, { resolve, reject }) => {
        const look = (): void => {
          connection.request("sessions.describe", { selector: sessionId }, requestOptions).then((summary) => {
            if (isJsonObject(summary) && registryOf(summary) === "received") resolve("received");
          }, reject);
        };
        connection.onNotification((method, params) => {
          if (method === "event" && isJsonObject(params) && params.sessionId === sessionId && params.kind === "tools_changed") look();
        });
        connection.request("events.subscribe", { kinds: ["tools_changed"] }, requestOptions).then(look, reject);
      },
    });
    client.registry = await registry.promise;
  } catch (error) {
    await client.close();
    throw error;
  }
  return client;
}

export { AppductError, type AppductErrorOptions } from "./errors.js";
export type * from "./types.js";
