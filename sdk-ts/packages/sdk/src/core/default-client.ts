// The default client of the bundle (§T12): the web, Node and React Native entries register
// their client here on import, and the React bindings use it when no client is passed. The first
// platform entry wins; a second one is a development warning. The inert entry registers weakly:
// it is used only when no platform entry registered, and any platform entry replaces it quietly.
// No session-core import: inert builds include this module.

import type { AppductClient } from "./types.js";

interface DefaultClient {
  client: AppductClient;
  entry: string;
  weak: boolean;
}

let current: DefaultClient | null = null;

export interface DefaultClientOptions {
  /** The entry's subpath, for the warning. */
  entry: string;
  /** Used only until a platform entry registers (the inert entry). */
  weak?: boolean;
  /** Warn when another platform entry registered first. */
  dev?: boolean;
}

/** Registers an entry's client as the bundle's default, unless a platform entry came first. */
export function setDefaultClient(client: AppductClient, options: DefaultClientOptions): void {
  const weak = options.weak ?? false;
  if (current === null || (current.weak && !weak)) {
    current = { client, entry: options.entry, weak };
    return;
  }
  if (current.client === client || weak) return;
  if (options.dev) {
    console.warn(
      `appduct: ${options.entry} was imported after ${current.entry}; React hooks without an explicit client keep using the client of ${current.entry}.`,
    );
  }
}

/** The bundle's default client, or `null` when no entry registered one. */
export function getDefaultClient(): AppductClient | null {
  return current?.client ?? null;
}
