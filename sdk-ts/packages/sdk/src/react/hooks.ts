// React bindings (§T12): `useAppductTool` registers a tool for a component's lifetime and
// re-registers only when its registration key changes; `useAppductState` follows the client's
// state and session. Built by a factory so the React Native entry can bind them to its client.
// No session-core import: the hooks only call the client they are given.

import { useEffect, useLayoutEffect, useMemo, useRef, useSyncExternalStore } from "react";

import { markIntentionalReplace } from "../core/replace.js";
import { exportJsonSchema } from "../core/schema.js";
import type { AppductClient, ClientState, Registration, ToolContext, ToolDefinition } from "../core/types.js";

export interface UseAppductToolOptions {
  /** `false`: never registers, and removes an existing registration. Default `true`. */
  enabled?: boolean;
  /** The client to register with; default: the entry's (or the bundle's default) client. */
  client?: AppductClient;
}

export interface AppductStateSnapshot {
  state: ClientState;
  sessionId: string | null;
  alias: string | null;
}

export interface AppductHooks {
  useAppductTool<I, O>(def: ToolDefinition<I, O>, deps?: readonly unknown[], options?: UseAppductToolOptions): void;
  useAppductState(client?: AppductClient): AppductStateSnapshot;
}

/** One schema slot of the key: its exported JSON Schema (compared by value) or its identity. */
type SchemaKey = { kind: "none" } | { kind: "json"; source: unknown; json: unknown } | { kind: "opaque"; source: unknown };

type ToolKey =
  | {
      mode: "definition";
      name: unknown;
      description: unknown;
      input: SchemaKey;
      output: SchemaKey;
      annotations: unknown;
      timeoutMs: unknown;
      group: unknown;
      enabled: boolean;
    }
  | { mode: "deps"; deps: readonly unknown[]; enabled: boolean };

const IDLE: AppductStateSnapshot = Object.freeze({ state: "idle", sessionId: null, alias: null });

// Layout effects do not run on a server; there the ref update is moot and useEffect is silent.
const useCommitEffect = typeof window === "undefined" ? useEffect : useLayoutEffect;

/** Structural equality of JSON-like values (object key order ignored). */
function sameValue(a: unknown, b: unknown): boolean {
  if (Object.is(a, b)) return true;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a) && Array.isArray(b)) {
    return a.length === b.length && a.every((item, i) => sameValue(item, b[i]));
  }
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  if (ka.length !== kb.length) return false;
  return ka.every((k) => Object.prototype.hasOwnProperty.call(b, k) && sameValue((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k]));
}

/** The key of one schema slot; the previous key is reused when the schema is the same object. */
function schemaKey(value: unknown, direction: "input" | "output", previous: SchemaKey | undefined): SchemaKey {
  if (value === undefined) return { kind: "none" };
  if (previous && previous.kind !== "none" && previous.source === value) return previous;
  const json = exportJsonSchema(value, direction);
  return json === undefined ? { kind: "opaque", source: value } : { kind: "json", source: value, json };
}

function sameSchema(a: SchemaKey, b: SchemaKey): boolean {
  if (a.kind === "none" || b.kind === "none") return a.kind === b.kind;
  if (a.source === b.source) return true;
  return a.kind === "json" && b.kind === "json" && sameValue(a.json, b.json);
}

/** The fields of a definition the key reads. */
type KeyFields = Pick<ToolDefinition<unknown, unknown>, "name" | "description" | "annotations" | "timeoutMs" | "group"> & {
  inputSchema?: unknown;
  outputSchema?: unknown;
};

function toolKey(def: KeyFields, deps: readonly unknown[] | undefined, enabled: boolean, previous: ToolKey | undefined): ToolKey {
  if (deps !== undefined) return { mode: "deps", deps: [...deps], enabled };
  const prev = previous?.mode === "definition" ? previous : undefined;
  return {
    mode: "definition",
    name: def.name,
    description: def.description,
    input: schemaKey(def.inputSchema, "input", prev?.input),
    output: schemaKey(def.outputSchema, "output", prev?.output),
    annotations: def.annotations,
    timeoutMs: def.timeoutMs,
    group: def.group,
    enabled,
  };
}

function sameKey(a: ToolKey, b: ToolKey): boolean {
  if (a.mode === "deps" || b.mode === "deps") {
    if (a.mode !== "deps" || b.mode !== "deps") return false;
    return a.enabled === b.enabled && a.deps.length === b.deps.length && a.deps.every((d, i) => Object.is(d, b.deps[i]));
  }
  return (
    Object.is(a.name, b.name) &&
    Object.is(a.description, b.description) &&
    sameSchema(a.input, b.input) &&
    sameSchema(a.output, b.output) &&
    sameValue(a.annotations, b.annotations) &&
    Object.is(a.timeoutMs, b.timeoutMs) &&
    Object.is(a.group, b.group) &&
    a.enabled === b.enabled
  );
}

/** A store over one client for useSyncExternalStore; snapshots are reused while unchanged. */
function stateStore(client: AppductClient | null): {
  subscribe(onChange: () => void): () => void;
  getSnapshot(): AppductStateSnapshot;
} {
  if (!client) return { subscribe: () => () => undefined, getSnapshot: () => IDLE };
  let last: AppductStateSnapshot = IDLE;
  return {
    subscribe: (onChange) => {
      const regs = [client.addAppductListener("stateChange", onChange), client.addAppductListener("sessionChange", onChange)];
      return () => regs.forEach((r) => r.remove());
    },
    getSnapshot: () => {
      const state = client.getAppductState();
      const sessionId = client.getSessionId();
      const alias = client.getSessionAlias();
      if (last.state !== state || last.sessionId !== sessionId || last.alias !== alias) last = { state, sessionId, alias };
      return last;
    },
  };
}

/**
 * Hooks bound to `defaultClient` (called at render; `null` means none). `onMissingClient` runs
 * when a hook has no client at all.
 */
export function createAppductHooks(defaultClient: () => AppductClient | null, onMissingClient: () => void): AppductHooks {
  function resolve(explicit: AppductClient | undefined): AppductClient | null {
    const client = explicit ?? defaultClient();
    if (!client) onMissingClient();
    return client;
  }

  function useAppductTool<I, O>(def: ToolDefinition<I, O>, deps?: readonly unknown[], options?: UseAppductToolOptions): void {
    const client = resolve(options?.client);
    const enabled = options?.enabled ?? true;

    // The definition of the latest committed render; the registered handler reads it.
    const latest = useRef(def);
    useCommitEffect(() => {
      latest.current = def;
    });
    const handler = useRef((args: unknown, ctx: ToolContext) => (latest.current.handler as (a: unknown, c: ToolContext) => unknown)(args, ctx)).current;

    // The key of the last registration effect that ran, and the token that stands for it: the
    // effect below re-runs only when a render's key differs (a new token).
    const committed = useRef<{ key: ToolKey; token: object } | null>(null);
    const key = toolKey(def as KeyFields, deps, enabled, committed.current?.key);
    const token = committed.current !== null && sameKey(committed.current.key, key) ? committed.current.token : {};

    const registration = useRef<{ reg: Registration; client: AppductClient } | null>(null);
    useEffect(() => {
      committed.current = { key, token };
      const previous = registration.current;
      if (!client || !enabled) {
        registration.current = null;
        previous?.reg.remove();
        return;
      }
      const next = { ...latest.current, handler } as ToolDefinition<I, O>;
      // Replacing our own registration of this name in place: one upsert, no duplicate warning.
      if (previous && previous.client === client && previous.reg.name === next.name) markIntentionalReplace(next);
      registration.current = { reg: client.registerTool(next), client };
      // A no-op when the new registration replaced it (same name, same client): the disposer is
      // identity-safe. Otherwise it removes the old name or the other client's registration.
      previous?.reg.remove();
      // `key` and `enabled` are read through `token`: the effect runs exactly when it changes.
    }, [token, client]);

    useEffect(
      () => () => {
        const previous = registration.current;
        registration.current = null;
        previous?.reg.remove();
      },
      [],
    );
  }

  function useAppductState(explicit?: AppductClient): AppductStateSnapshot {
    const client = resolve(explicit);
    const store = useMemo(() => stateStore(client), [client]);
    return useSyncExternalStore(store.subscribe, store.getSnapshot, () => IDLE);
  }

  return { useAppductTool, useAppductState };
}
