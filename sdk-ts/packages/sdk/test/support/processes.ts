// Child processes for tests against real programs: line readers that resolve on the first
// matching line (or fail when the process exits first or the bound runs out), and a kill that
// waits for the exit, so nothing a test started outlives it.

import type { ChildProcess } from "node:child_process";
import { once } from "node:events";
import type { Readable } from "node:stream";
import { createInterface } from "node:readline";

/** Rejects after `ms` with `what` in the message; the timer never keeps the process alive. */
export function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const limit = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
    timer.unref?.();
  });
  return Promise.race([promise, limit]).finally(() => clearTimeout(timer));
}

/**
 * Resolves with the first line of `stream` that `match` accepts (its return value), rejecting
 * when the stream ends or the process exits first, or after `ms`.
 */
export function waitForLine<T>(child: ChildProcess, stream: Readable, match: (line: string) => T | undefined, ms: number, what: string): Promise<T> {
  const lines = createInterface({ input: stream });
  const found = new Promise<T>((resolve, reject) => {
    const seen: string[] = [];
    lines.on("line", (line) => {
      seen.push(line);
      const value = match(line);
      if (value !== undefined) resolve(value);
    });
    lines.on("close", () => reject(new Error(`${what}: the stream ended first; it printed:\n${seen.slice(-20).join("\n")}`)));
    child.once("exit", (code, signal) => reject(new Error(`${what}: the process exited first (${code ?? signal}); it printed:\n${seen.slice(-20).join("\n")}`)));
  });
  return within(found, ms, what).finally(() => {
    lines.close();
    // Keep draining: a child blocked on a full pipe would hang.
    stream.resume();
  });
}

/**
 * Stops a child: SIGTERM to it (or to its process group when it leads one), SIGKILL when it has
 * not exited within `graceMs`; resolves once it has exited.
 */
export async function stopProcess(child: ChildProcess, options: { group?: boolean; graceMs?: number } = {}): Promise<void> {
  if (child.pid === undefined) return;
  const pid = child.pid;
  const exited = child.exitCode !== null || child.signalCode !== null ? Promise.resolve() : once(child, "exit").then(() => undefined);
  const signal = (name: NodeJS.Signals): void => {
    try {
      process.kill(options.group ? -pid : pid, name);
    } catch {
      // Already gone.
    }
  };
  signal("SIGTERM");
  try {
    await within(exited, options.graceMs ?? 5_000, `process ${pid} to exit`);
  } catch {
    signal("SIGKILL");
    await within(exited, 10_000, `process ${pid} to exit after SIGKILL`);
  }
  // The leader is gone; make sure no member of its group is left behind.
  if (options.group) signal("SIGKILL");
}
