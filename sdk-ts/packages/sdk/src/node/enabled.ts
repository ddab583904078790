// Environment switches of the Node entry (§T8, §T10).

import { isValidPin } from "../core/link.js";

/**
 * Whether the Node entry is active: `APPDUCT_ENABLED` `1`/`true` (trimmed, any ASCII case) turns
 * it on, `0`/`false` off; when unset (or empty) it is on unless `NODE_ENV` is `production`.
 * Any other value throws, naming the variable.
 */
export function isNodeEntryEnabled(env: Record<string, string | undefined>): boolean {
  const raw = env.APPDUCT_ENABLED;
  const value = raw?.trim().toLowerCase() ?? "";
  if (value === "") return env.NODE_ENV !== "production";
  if (value === "1" || value === "true") return true;
  if (value === "0" || value === "false") return false;
  throw new Error(`APPDUCT_ENABLED must be 1, true, 0 or false; got ${JSON.stringify(raw)}`);
}

/** `APPDUCT_PINS`: a comma-separated pin list (empty items ignored); a malformed pin throws. */
export function pinsFromEnv(env: Record<string, string | undefined>): string[] {
  const items = (env.APPDUCT_PINS ?? "").split(",").map((p) => p.trim()).filter((p) => p !== "");
  for (const pin of items) {
    if (!isValidPin(pin)) {
      throw new Error(`APPDUCT_PINS holds ${JSON.stringify(pin)}, which does not match ^sha256/[A-Za-z0-9+/]{43}=$`);
    }
  }
  return items;
}
