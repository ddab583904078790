// What `@appduct/sdk/react-native/auto` installs (§T11.3): deep links go to handleUrl, a
// held lease is resumed, the launch URL is handled, and AppState drives setForeground.

import type { AppductClient } from "../core/types.js";

export interface LinkingLike {
  addEventListener(type: "url", handler: (event: { url: string }) => void): { remove(): void };
  getInitialURL(): Promise<string | null>;
}

export interface AppStateLike {
  addEventListener(type: "change", handler: (state: string) => void): { remove(): void };
}

const installed = new WeakSet<AppductClient>();

/** Installs the listeners once per client; returns whether this call installed them. */
export function installAutoLifecycle(client: AppductClient, rn: { Linking: LinkingLike; AppState: AppStateLike }): boolean {
  if (installed.has(client)) return false;
  installed.add(client);
  rn.Linking.addEventListener("url", (event) => {
    client.handleUrl(event.url);
  });
  client.restoreSession().catch(() => undefined);
  // Even after a restore: the same session id keeps it, another one supersedes it.
  rn.Linking.getInitialURL()
    .then((url) => {
      if (url) client.handleUrl(url);
    })
    .catch(() => undefined);
  rn.AppState.addEventListener("change", (state) => client.setForeground(state === "active"));
  return true;
}
