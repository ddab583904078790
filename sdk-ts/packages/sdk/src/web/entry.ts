// The real web entry's client and page flow (§T9). Shared by `@appduct/sdk/web` (under the
// `development` condition) and `@appduct/sdk/web/enabled`: one client per page.

import { bindAppApi, type AppApi } from "../core/app-api.js";
import { createAppductClient } from "../core/client.js";
import { setDefaultClient } from "../core/default-client.js";
import { fragmentHasAppduct, removeAppductFromFragment } from "../core/link.js";
import type { AppductClient } from "../core/types.js";
import { SDK_VERSION } from "../core/version.js";
import { browserDevice } from "./device.js";
import { createSessionStorageLeaseStore } from "./lease.js";
import { createWebSocketTransport } from "./transport.js";

interface PageWindow {
  location: { href: string; hash: string };
  history: { state: unknown; replaceState(state: unknown, unused: string, url?: string): void };
  sessionStorage?: Storage;
  navigator?: Navigator;
  __APPDUCT__?: { connect(linkOrPayload: string): Promise<void>; version: string };
}

let shared: { client: AppductClient; api: AppApi } | null = null;

function pageWindow(): PageWindow | undefined {
  const w = (globalThis as { window?: unknown }).window;
  return typeof w === "object" && w !== null ? (w as PageWindow) : undefined;
}

/**
 * Runs once per page: takes `#appduct=` out of the address bar before anything else and connects
 * with it, else resumes a lease of this tab; then defines `window.__APPDUCT__`.
 */
function runPageFlow(w: PageWindow, client: AppductClient): void {
  const fragment = w.location.hash.replace(/^#/, "");
  if (fragmentHasAppduct(fragment)) {
    const link = w.location.href;
    const rest = removeAppductFromFragment(fragment);
    const base = link.slice(0, link.indexOf("#"));
    w.history.replaceState(w.history.state, "", rest === "" ? base : `${base}#${rest}`);
    client.connect(link).catch((error: unknown) => console.warn("appduct: could not connect with the page's link:", error));
  } else {
    client.restoreSession().catch(() => undefined);
  }
  w.__APPDUCT__ = { connect: (linkOrPayload: string) => client.connect(linkOrPayload), version: SDK_VERSION };
}

/** The page's client, built (and the page flow run) on first use. */
export function webEntry(dev: boolean): AppApi {
  if (shared) return shared.api;
  const w = pageWindow();
  const client = createAppductClient({
    transport: createWebSocketTransport(),
    leaseStore: createSessionStorageLeaseStore(() => pageWindow()?.sessionStorage),
    device: browserDevice(w?.navigator),
    dev,
    defaultTransport: "web",
    allowedTransports: ["web"],
    unsupportedLinkHint: "A web page cannot verify a pin, so it only connects to the daemon's loopback web listener.",
  });
  shared = { client, api: bindAppApi(client) };
  setDefaultClient(client, { entry: "@appduct/sdk/web", dev });
  if (w) runPageFlow(w, client);
  return shared.api;
}
