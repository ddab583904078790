// Headless Chromium from Debian's `chromium` package (installed by .ci/run), never a downloaded
// browser: started here with a fixed flag set and a fresh profile, then driven by playwright-core
// over the DevTools protocol. Cleanup closes the connection, kills the browser's process group
// and removes the profile.

import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";

import { chromium, type Browser } from "playwright-core";

import type { Cleanup } from "./fake-daemon.js";
import { stopProcess, waitForLine } from "./processes.js";

export const CHROMIUM = "/usr/bin/chromium";

/** The launch flags every test browser gets, before the profile and DevTools flags. */
export const CHROMIUM_FLAGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
  "--no-first-run",
  "--disable-quic",
] as const;

/**
 * Starts Chromium with `CHROMIUM_FLAGS`, a fresh `--user-data-dir`, DevTools on an ephemeral
 * loopback port and `extraFlags`, and connects playwright-core to it.
 */
export async function launchChromium(cleanups: Cleanup[], extraFlags: readonly string[] = []): Promise<Browser> {
  if (!existsSync(CHROMIUM)) {
    throw new Error(`${CHROMIUM} is missing: install Debian's chromium package (apt-get install -y chromium), as .ci/run does`);
  }
  const profile = await mkdtemp(path.join(os.tmpdir(), "appduct-chromium-"));
  // Its own process group, so cleanup reaches the renderer and utility processes too.
  const child = spawn(CHROMIUM, [...CHROMIUM_FLAGS, `--user-data-dir=${profile}`, "--remote-debugging-port=0", ...extraFlags, "about:blank"], {
    detached: true,
    stdio: ["ignore", "ignore", "pipe"],
  });
  let browser: Browser | undefined;
  cleanups.push(async () => {
    await browser?.close().catch(() => undefined);
    await stopProcess(child, { group: true });
    await rm(profile, { recursive: true, force: true });
  });
  const endpoint = await waitForLine(child, child.stderr, (line) => /^DevTools listening on (ws:\/\/\S+)/.exec(line)?.[1], 30_000, "Chromium's DevTools endpoint");
  browser = await chromium.connectOverCDP(endpoint, { timeout: 30_000 });
  return browser;
}
