// A bounded wait on a dedicated control connection (§T13.2): `waitForEvent` and
// `waitForSession` each open one, subscribe, and settle on the first matching notification, the
// timeout (`timeout`), an abort (the signal's reason), or the connection's end
// (`connection_error`). The connection is closed whatever the outcome.

import { MAX_TIMER_MS, type RpcConnection } from "./connection.js";
import { openDaemonConnection, type DaemonTarget } from "./daemon.js";
import { clientError, type AppductError } from "./errors.js";

export interface WaitControls<T> {
  resolve(value: T): void;
  reject(error: unknown): void;
}

export interface StreamWaitOptions<T> {
  target: DaemonTarget;
  timeoutMs: number;
  timeoutError(): AppductError;
  /** When set, the timeout resolves with this value instead of rejecting with `timeoutError()`. */
  timeoutValue?: () => T;
  signal?: AbortSignal;
  /** Sets the notification handler and sends the requests; runs once the connection is open. */
  run(connection: RpcConnection, controls: WaitControls<T>): void;
}

export interface StreamWait<T> {
  readonly promise: Promise<T>;
  /** Ends the wait with `error` (unless it already settled) and closes its connection. */
  cancel(error: unknown): Promise<void>;
}

/** A wait timeout option: a number ≥ 0 (not NaN); default `fallback`. */
export function waitTimeout(timeoutMs: unknown, fallback: number): number {
  if (timeoutMs === undefined) return fallback;
  if (typeof timeoutMs !== "number" || Number.isNaN(timeoutMs) || timeoutMs < 0) {
    throw clientError(`timeoutMs must be a number ≥ 0; got ${String(timeoutMs)}.`, { param: "timeoutMs" });
  }
  return timeoutMs;
}

export function startStreamWait<T>(options: StreamWaitOptions<T>): StreamWait<T> {
  let connection: RpcConnection | null = null;
  let closing: Promise<void> = Promise.resolve();
  let opening: Promise<void> = Promise.resolve();
  let done = false;
  let settle: (outcome: { value: T } | { error: unknown }) => Promise<void> = () => closing;

  const promise = new Promise<T>((resolve, reject) => {
    const onAbort = (): void => void settle({ error: options.signal?.reason });
    const onTimeout = (): void => void settle(options.timeoutValue === undefined ? { error: options.timeoutError() } : { value: options.timeoutValue() });
    const timer = setTimeout(onTimeout, Math.min(options.timeoutMs, MAX_TIMER_MS));
    settle = (outcome) => {
      if (done) return closing;
      done = true;
      clearTimeout(timer);
      options.signal?.removeEventListener("abort", onAbort);
      if (connection !== null) closing = connection.close();
      if ("value" in outcome) resolve(outcome.value);
      else reject(outcome.error);
      return closing;
    };
    if (options.signal?.aborted) {
      void settle({ error: options.signal.reason });
      return;
    }
    options.signal?.addEventListener("abort", onAbort, { once: true });
    opening = openDaemonConnection(options.target).then(
      (opened) => {
        if (done) {
          closing = opened.close();
          return;
        }
        connection = opened;
        opened.onClose((error) => void settle({ error }));
        options.run(opened, { resolve: (value) => void settle({ value }), reject: (error) => void settle({ error }) });
      },
      (error: unknown) => void settle({ error }),
    );
  });
  return {
    promise,
    // A connection still opening is closed as soon as it opens; wait for that too.
    cancel: (error) => {
      void settle({ error });
      return opening.then(() => closing);
    },
  };
}
