// The web entry in a real browser against the real daemon (§T9, §D2.2): headless Chromium
// (Debian's package) loads a page served on localhost that uses `@appduct/sdk/web` (bundled with
// the `development` condition), consumes an `#appduct=` link minted by `appduct sessions link
// --open web`, registers a tool that `appduct tools call` then calls; a reload resumes the same
// session. The same link opened on a page whose origin the daemon does not allow is refused at
// the upgrade (403) and the link stays claimable.
//
// Every wait is on an event (a console report from the page, a daemon bus event, a process line)
// with a bound. Every process started here is stopped in afterEach, pass or fail.

import http from "node:http";
import type { AddressInfo } from "node:net";
import path from "node:path";
import { fileURLToPath } from "node:url";

import { build } from "esbuild";
import type { ConsoleMessage, Page } from "playwright-core";
import { afterEach, describe, expect, it } from "vitest";

import { launchChromium } from "./support/chromium.js";
import { watchDaemonEvents } from "./support/daemon-events.js";
import type { Cleanup } from "./support/fake-daemon.js";
import { within } from "./support/processes.js";
import { startRealDaemon } from "./support/real-daemon.js";

const PAGE_SCRIPT = path.join(path.dirname(fileURLToPath(import.meta.url)), "fixtures", "browser-page", "main.js");
/** A host name outside the daemon's allowed origins, resolved to 127.0.0.1 by Chromium alone. */
const FOREIGN_HOST = "appduct-foreign.test";
const WAIT_MS = 20_000;

const cleanups: Cleanup[] = [];

afterEach(async () => {
  const errors: unknown[] = [];
  for (const cleanup of cleanups.splice(0).reverse()) {
    try {
      await cleanup();
    } catch (error) {
      errors.push(error);
    }
  }
  if (errors.length > 0) throw errors[0];
});

/** Serves the page (any path) and its bundled script on 127.0.0.1. */
async function startPageServer(): Promise<number> {
  const bundle = await build({ entryPoints: [PAGE_SCRIPT], bundle: true, format: "esm", platform: "browser", conditions: ["development"], write: false, logLevel: "silent" });
  const script = bundle.outputFiles.map((f) => f.text).join("\n");
  const html = `<!doctype html><html><head><meta charset="utf-8"><title>appduct browser test</title></head><body><script type="module" src="/main.js"></script></body></html>`;
  const server = http.createServer((req, res) => {
    const isScript = new URL(req.url ?? "/", "http://127.0.0.1").pathname === "/main.js";
    res.writeHead(200, { "content-type": isScript ? "text/javascript; charset=utf-8" : "text/html; charset=utf-8", "cache-control": "no-store" });
    res.end(isScript ? script : html);
  });
  server.listen(0, "127.0.0.1");
  await new Promise<void>((resolve) => server.once("listening", resolve));
  cleanups.push(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return (server.address() as AddressInfo).port;
}

interface PageReport {
  kind: string;
  [key: string]: unknown;
}

/** Collects a page's console: its `appduct-test` reports and every other message's text. */
function watchConsole(page: Page): {
  reports: PageReport[];
  texts: string[];
  waitFor<T>(pick: (reports: PageReport[], texts: string[]) => T | undefined, what: string): Promise<T>;
} {
  const reports: PageReport[] = [];
  const texts: string[] = [];
  const checks: (() => void)[] = [];
  page.on("console", (message: ConsoleMessage) => {
    const text = message.text();
    if (text.startsWith("appduct-test ")) reports.push(JSON.parse(text.slice("appduct-test ".length)) as PageReport);
    else texts.push(text);
    for (const check of [...checks]) check();
  });
  return {
    reports,
    texts,
    waitFor: (pick, what) =>
      within(
        new Promise((resolve) => {
          const check = (): void => {
            const value = pick(reports, texts);
            if (value === undefined) return;
            checks.splice(checks.indexOf(check), 1);
            resolve(value);
          };
          checks.push(check);
          check();
        }),
        WAIT_MS,
        `${what}; reports: ${JSON.stringify(reports)}; console: ${JSON.stringify(texts)}`,
      ),
  };
}

interface WebLink {
  sessionId: string;
  url: string;
  script: string;
  expiresAt: number;
}

interface DaemonStatus {
  daemon: { webPort: number; sessionCount: number; pendingLinks: number };
}

// scripts/test sets APPDUCT_SKIP_BROWSER (the reason) only when it could neither find nor install
// Chromium, and prints that reason; without it a missing browser fails the test.
const browserSkipped = process.env.APPDUCT_SKIP_BROWSER;
if (browserSkipped) console.warn(`browser test skipped: ${browserSkipped}`);

describe.skipIf(Boolean(browserSkipped))("web entry in headless Chromium against the real daemon", () => {
  it("claims from a CLI-minted #appduct= link, serves a CLI call, resumes on reload; a foreign origin is refused", async () => {
    const daemon = await startRealDaemon(cleanups);
    const bus = await watchDaemonEvents(cleanups, daemon.stateDir);
    const { daemon: status } = await daemon.data<DaemonStatus>(["daemon", "status"]);
    const port = await startPageServer();
    const browser = await launchChromium(cleanups, [`--host-resolver-rules=MAP ${FOREIGN_HOST} 127.0.0.1`]);
    const context = browser.contexts()[0];
    if (!context) throw new Error("Chromium has no default browser context");

    const pageUrl = `http://localhost:${port}/app`;
    const link = await daemon.data<WebLink>(["sessions", "link", "--open", "web", "--url", pageUrl]);
    const fragment = new URL(link.url).hash;
    expect(link.url).toBe(`${pageUrl}${fragment}`);
    expect(fragment).toMatch(/^#appduct=[A-Za-z0-9_-]+$/);
    expect(link.script).toBe(`window.__APPDUCT__.connect("${fragment.slice("#appduct=".length)}")`);

    // 1. The same link on a page of a foreign origin: the daemon answers the upgrade with 403,
    //    again on every retry, and the link stays pending.
    const foreign = await context.newPage();
    const foreignConsole = watchConsole(foreign);
    await foreign.goto(`http://${FOREIGN_HOST}:${port}/app${fragment}`);
    const socketUrl = `ws://127.0.0.1:${status.webPort}/`;
    const refusals = (texts: string[]): string[] => texts.filter((t) => t.includes(socketUrl) && /\b403\b/.test(t));
    await foreignConsole.waitFor((_, texts) => (refusals(texts).length >= 2 ? true : undefined), "two refused upgrades from the foreign page");
    expect(foreignConsole.reports.filter((r) => r.kind === "session")).toEqual([]);
    expect(foreignConsole.reports[0]).toMatchObject({ kind: "loaded", state: "connecting", href: `http://${FOREIGN_HOST}:${port}/app` });
    const afterRefusal = await daemon.data<DaemonStatus>(["daemon", "status"]);
    expect(afterRefusal.daemon).toMatchObject({ sessionCount: 0, pendingLinks: 1 });
    expect(bus.events.filter((e) => e.kind === "session_claimed")).toEqual([]);
    await foreign.close();

    // 2. The minted URL on localhost: the fragment leaves the address bar, the page claims,
    //    registers its tool, and the CLI's call reaches the handler.
    const page = await context.newPage();
    const pageConsole = watchConsole(page);
    await page.goto(link.url);
    const claimed = await pageConsole.waitFor((reports) => reports.find((r) => r.kind === "session" && r.type === "claimed"), "the page's claim");
    expect(claimed.sessionId).toBe(link.sessionId);
    expect(page.url()).toBe(pageUrl);
    const firstLoad = pageConsole.reports.find((r) => r.kind === "loaded");
    expect(firstLoad).toMatchObject({ href: pageUrl });
    await bus.waitFor((e) => e.kind === "tools_changed" && e.sessionId === link.sessionId && e.data.toolCount === 1, WAIT_MS, "the page's tool snapshot");
    const claimEvent = bus.events.find((e) => e.kind === "session_claimed");
    expect(claimEvent).toMatchObject({ sessionId: link.sessionId, data: { transport: "web", device: { model: "Chrome" } } });

    const first = await daemon.data(["tools", "call", link.sessionId, "page_echo", "--input", '{"text":"hello"}']);
    expect(first).toEqual({ upper: "HELLO", origin: `http://localhost:${port}`, loadedAt: firstLoad?.loadedAt });

    // 3. A reload of the tab resumes the same session from sessionStorage; the new page instance
    //    serves the next call.
    await page.reload();
    const resumed = await pageConsole.waitFor((reports) => reports.find((r) => r.kind === "session" && r.type === "resumed"), "the reloaded page's resume");
    expect(resumed.sessionId).toBe(link.sessionId);
    const secondLoad = pageConsole.reports.filter((r) => r.kind === "loaded")[1];
    expect(secondLoad).toMatchObject({ href: pageUrl, state: "reconnecting", sessionId: link.sessionId });
    await bus.waitFor((e) => e.kind === "session_resumed" && e.sessionId === link.sessionId, WAIT_MS, "the daemon's session_resumed");
    const sessions = await daemon.data<{ sessionId: string; state: string }[]>(["sessions", "ls"]);
    expect(sessions.map((s) => [s.sessionId, s.state])).toEqual([[link.sessionId, "active"]]);

    const second = await daemon.data<{ loadedAt: number }>(["tools", "call", link.sessionId, "page_echo", "--input", '{"text":"again"}']);
    expect(second).toEqual({ upper: "AGAIN", origin: `http://localhost:${port}`, loadedAt: secondLoad?.loadedAt });
    expect(second.loadedAt).not.toBe(firstLoad?.loadedAt);
  }, 120_000);
});
