// @vitest-environment jsdom
// React bindings (§T12) with React Testing Library over a client on the fake transport: the
// registration key decides re-registration, the handler is a stable wrapper over the latest
// committed render, `enabled` removes and re-adds, StrictMode ends with one registration, the
// disposer never removes a newer registration, and useAppductState follows the client.

import { act, cleanup, render, renderHook } from "@testing-library/react";
import { createElement, StrictMode, type ReactElement } from "react";
import { afterEach, describe, expect, it, vi } from "vitest";

import type { AppductClient, ToolDefinition } from "../src/core/types.js";
import { createAppductHooks } from "../src/react/hooks.js";
import { flush, type FakeSocket } from "./support/fake-transport.js";
import { ack, activate, makeHarness, type Harness } from "./support/harness.js";
import { converter, standard } from "./support/schemas.js";

const { useAppductTool, useAppductState } = createAppductHooks(
  () => null,
  () => undefined,
);

afterEach(() => {
  cleanup();
  vi.restoreAllMocks();
});

/** Registry deltas sent after the snapshots, as `upsert:<name>` / `remove:<name>`. */
function deltas(socket: FakeSocket): string[] {
  return socket.frames
    .filter((f) => f.type === "tool_registry_delta")
    .map((f) => (f.operation === "upsert" ? `upsert:${(f.tool as { name: string }).name}` : `remove:${String(f.name)}`));
}

/** An active client (snapshots sent) in development mode. */
async function activeHarness(): Promise<{ h: Harness; socket: FakeSocket }> {
  const h = makeHarness({ dev: true });
  const socket = await activate(h);
  return { h, socket };
}

/** A schema pair built anew on every call, always of the same value (an inline zod-like schema). */
function inlineStandardSchema(): ReturnType<typeof standard> {
  return standard((value) => ({ value }), converter({ type: "object", properties: { q: { type: "string", minLength: 1 } }, required: ["q"] }));
}

interface ToolProps {
  client: AppductClient;
  description?: string;
  name?: string;
  enabled?: boolean;
  deps?: readonly unknown[];
  reply?: string;
  onRender?: () => void;
}

/** A component using the hook with inline definition objects, as apps write it. */
function SearchTool({ client, description = "Searches the catalogue.", name = "search", enabled, deps, reply = "first" }: ToolProps): null {
  useAppductTool(
    {
      name,
      description,
      inputSchema: inlineStandardSchema(),
      outputSchema: { schema: standard((value) => ({ value })), jsonSchema: { type: "object", properties: { reply: { type: "string" } } } },
      annotations: { readOnlyHint: true },
      handler: () => ({ reply }),
    },
    deps,
    enabled === undefined ? { client } : { client, enabled },
  );
  return null;
}

const tool = (props: ToolProps): ReactElement => createElement(SearchTool, props);

describe("useAppductTool re-registration", () => {
  it("100 re-renders with new inline handler and schema objects of equal value send no delta", async () => {
    const { h, socket } = await activeHarness();
    const view = render(tool({ client: h.client }));
    expect(deltas(socket)).toEqual(["upsert:search"]);
    for (let i = 0; i < 100; i++) view.rerender(tool({ client: h.client, reply: `render-${i}` }));
    expect(deltas(socket)).toEqual(["upsert:search"]);
    expect(h.client.getRegisteredTools()).toHaveLength(1);
    expect(h.warnings).toEqual([]);

    // The registered handler is a stable wrapper over the latest committed render's handler.
    socket.receive({ type: "tool_call", session_id: "session-1", id: "call-1", name: "search", args: { q: "x" } });
    await flush();
    expect(socket.frames.find((f) => f.type === "tool_result")).toMatchObject({ id: "call-1", result: { reply: "render-99" } });
  });

  it("a changed description sends exactly one upsert, without a duplicate-name warning", async () => {
    const { h, socket } = await activeHarness();
    const view = render(tool({ client: h.client }));
    view.rerender(tool({ client: h.client, description: "Searches the whole catalogue." }));
    view.rerender(tool({ client: h.client, description: "Searches the whole catalogue." }));
    expect(deltas(socket)).toEqual(["upsert:search", "upsert:search"]);
    const last = socket.frames.filter((f) => f.type === "tool_registry_delta").at(-1) as { tool: { description: string } };
    expect(last.tool.description).toBe("Searches the whole catalogue.");
    expect(h.client.getRegisteredTools()).toHaveLength(1);
    expect(h.warnings).toEqual([]);
  });

  it("enabled: false removes the registration and true registers again (remove, then upsert)", async () => {
    const { h, socket } = await activeHarness();
    const view = render(tool({ client: h.client }));
    view.rerender(tool({ client: h.client, enabled: false }));
    view.rerender(tool({ client: h.client, enabled: false }));
    expect(h.client.getRegisteredTools()).toEqual([]);
    view.rerender(tool({ client: h.client, enabled: true }));
    expect(deltas(socket)).toEqual(["upsert:search", "remove:search", "upsert:search"]);
  });

  it("enabled: false from the first render never registers", async () => {
    const { h, socket } = await activeHarness();
    const view = render(tool({ client: h.client, enabled: false }));
    view.unmount();
    expect(deltas(socket)).toEqual([]);
  });

  it("an unmount after a newer registration of the same name does not remove the newer one", async () => {
    const { h, socket } = await activeHarness();
    const view = render(tool({ client: h.client }));
    const newer = h.client.registerTool({ name: "search", description: "Registered elsewhere.", handler: () => undefined });
    view.unmount();
    expect(h.client.getRegisteredTools().map((t) => t.description)).toEqual(["Registered elsewhere."]);
    expect(deltas(socket)).toEqual(["upsert:search", "upsert:search"]);
    newer.remove();
    expect(h.client.getRegisteredTools()).toEqual([]);
  });

  it("unmount removes the registration", async () => {
    const { h, socket } = await activeHarness();
    const view = render(tool({ client: h.client }));
    view.unmount();
    expect(deltas(socket)).toEqual(["upsert:search", "remove:search"]);
    expect(h.client.getRegisteredTools()).toEqual([]);
  });

  it("StrictMode (mount, unmount, mount) ends with exactly one registration", async () => {
    const { h } = await activeHarness();
    const view = render(createElement(StrictMode, null, tool({ client: h.client })));
    expect(h.client.getRegisteredTools().map((t) => t.name)).toEqual(["search"]);
    view.rerender(createElement(StrictMode, null, tool({ client: h.client, description: "Changed." })));
    expect(h.client.getRegisteredTools().map((t) => t.description)).toEqual(["Changed."]);
    view.unmount();
    expect(h.client.getRegisteredTools()).toEqual([]);
  });

  it("a changed name registers the new name and removes the old one", async () => {
    const { h, socket } = await activeHarness();
    const view = render(tool({ client: h.client }));
    view.rerender(tool({ client: h.client, name: "find" }));
    expect(deltas(socket)).toEqual(["upsert:search", "upsert:find", "remove:search"]);
    expect(h.client.getRegisteredTools().map((t) => t.name)).toEqual(["find"]);
  });

  it("with deps, the key is [...deps, enabled]: other changes do not re-register", async () => {
    const { h, socket } = await activeHarness();
    const view = render(tool({ client: h.client, deps: [1] }));
    view.rerender(tool({ client: h.client, deps: [1], description: "Not a dependency." }));
    expect(deltas(socket)).toEqual(["upsert:search"]);
    view.rerender(tool({ client: h.client, deps: [2], description: "Not a dependency." }));
    expect(deltas(socket)).toEqual(["upsert:search", "upsert:search"]);
    expect(h.client.getRegisteredTools()[0]?.description).toBe("Not a dependency.");
    view.rerender(tool({ client: h.client, deps: [2], enabled: false, description: "Not a dependency." }));
    expect(deltas(socket)).toEqual(["upsert:search", "upsert:search", "remove:search"]);
  });

  it("schemas that cannot be exported compare by identity", async () => {
    const h = makeHarness({ dev: false });
    const socket = await activate(h);
    const stable = standard((value) => ({ value }));
    function Opaque({ schema }: { schema: ReturnType<typeof standard> }): null {
      useAppductTool({ name: "opaque", description: "No JSON Schema export.", inputSchema: schema, handler: () => undefined }, undefined, { client: h.client });
      return null;
    }
    const view = render(createElement(Opaque, { schema: stable }));
    view.rerender(createElement(Opaque, { schema: stable }));
    expect(deltas(socket)).toEqual(["upsert:opaque"]);
    view.rerender(createElement(Opaque, { schema: standard((value) => ({ value })) }));
    expect(deltas(socket)).toEqual(["upsert:opaque", "upsert:opaque"]);
  });

  it("annotations and JSON Schemas compare by value, ignoring key order", async () => {
    const { h, socket } = await activeHarness();
    function Ordered({ flip, hint }: { flip: boolean; hint: boolean }): null {
      const schema = flip ? { properties: { q: { type: "string" } }, type: "object" } : { type: "object", properties: { q: { type: "string" } } };
      useAppductTool({ name: "ordered", description: "d", inputSchema: schema, annotations: { readOnlyHint: hint }, handler: () => undefined }, undefined, { client: h.client });
      return null;
    }
    const view = render(createElement(Ordered, { flip: false, hint: true }));
    view.rerender(createElement(Ordered, { flip: true, hint: true }));
    expect(deltas(socket)).toEqual(["upsert:ordered"]);
    view.rerender(createElement(Ordered, { flip: true, hint: false }));
    expect(deltas(socket)).toEqual(["upsert:ordered", "upsert:ordered"]);
  });

  it("a different client moves the registration to it", async () => {
    const { h, socket } = await activeHarness();
    const other = makeHarness({ dev: true });
    const view = render(tool({ client: h.client }));
    view.rerender(tool({ client: other.client }));
    expect(deltas(socket)).toEqual(["upsert:search", "remove:search"]);
    expect(other.client.getRegisteredTools().map((t) => t.name)).toEqual(["search"]);
  });

  it("registers before the session is active; the snapshot carries it", async () => {
    const h = makeHarness({ dev: true });
    render(tool({ client: h.client }));
    const socket = await activate(h);
    const snapshot = socket.frames.find((f) => f.type === "tool_registry_snapshot") as { tools: { name: string }[] };
    expect(snapshot.tools.map((t) => t.name)).toEqual(["search"]);
    expect(deltas(socket)).toEqual([]);
  });
});

describe("client resolution", () => {
  it("uses the default client when none is passed, and does nothing (warning once) without any", async () => {
    const { h } = await activeHarness();
    let current: AppductClient | null = null;
    const missing = vi.fn();
    const hooks = createAppductHooks(() => current, missing);
    function Uses(): null {
      hooks.useAppductTool({ name: "defaulted", description: "d", handler: () => undefined });
      return null;
    }
    const first = render(createElement(Uses));
    expect(missing).toHaveBeenCalled();
    first.unmount();
    current = h.client;
    render(createElement(Uses));
    expect(h.client.getRegisteredTools().map((t) => t.name)).toEqual(["defaulted"]);
  });

  it("the real entry warns once in development when no platform entry registered a client", async () => {
    vi.resetModules();
    const warn = vi.spyOn(console, "warn").mockImplementation(() => undefined);
    const react = await import("../src/react/index.js");
    function Uses(): null {
      react.useAppductTool({ name: "lonely", description: "d", handler: () => undefined });
      react.useAppductState();
      return null;
    }
    const view = render(createElement(Uses));
    view.rerender(createElement(Uses));
    expect(warn).toHaveBeenCalledTimes(1);
    expect(String(warn.mock.calls[0]?.[0])).toMatch(/found no client/);
  });

  it("the web entry registers its client as the default, and a second platform entry warns", async () => {
    vi.resetModules();
    const warn = vi.spyOn(console, "warn").mockImplementation(() => undefined);
    const defaults = await import("../src/core/default-client.js");
    const inert = await import("../src/inert/index.js");
    expect(defaults.getDefaultClient()).toBe(inert.appductClient);
    const web = await import("../src/web/index.js");
    expect(defaults.getDefaultClient()).toBe(web.appductClient);
    const other = makeHarness().client;
    defaults.setDefaultClient(other, { entry: "@appduct/sdk/node", dev: true });
    expect(defaults.getDefaultClient()).toBe(web.appductClient);
    expect(warn).toHaveBeenCalledTimes(1);
    expect(String(warn.mock.calls[0]?.[0])).toMatch(/@appduct\/sdk\/node was imported after @appduct\/sdk\/web/);
    const react = await import("../src/react/index.js");
    function Uses(): null {
      react.useAppductTool({ name: "on_web", description: "d", handler: () => undefined });
      return null;
    }
    render(createElement(Uses));
    expect(web.getRegisteredTools().map((t) => t.name)).toEqual(["on_web"]);
  });
});

describe("useAppductState", () => {
  it("follows state and session changes through useSyncExternalStore", async () => {
    const h = makeHarness();
    const { result } = renderHook(() => useAppductState(h.client));
    expect(result.current).toEqual({ state: "idle", sessionId: null, alias: null });
    const claim = h.client.connectBootstrap({ sessionId: "session-1", token: "claim-token", expiresAt: Date.now() / 1000 + 300, address: "127.0.0.1", port: 1, transport: "native" });
    await act(async () => {
      await flush();
    });
    expect(result.current).toEqual({ state: "connecting", sessionId: null, alias: null });
    const before = result.current;
    act(() => h.transport.newest.receive(ack()));
    await claim;
    expect(result.current).toEqual({ state: "active", sessionId: "session-1", alias: "phone" });
    expect(result.current).not.toBe(before);
    await act(async () => {
      await h.client.disconnect();
    });
    expect(result.current).toEqual({ state: "closed", sessionId: null, alias: null });
  });

  it("returns the same snapshot object while nothing changed, and idle with no client", () => {
    const h = makeHarness();
    const { result, rerender } = renderHook(() => useAppductState(h.client));
    const first = result.current;
    rerender();
    expect(result.current).toBe(first);
    const none = renderHook(() => useAppductState());
    expect(none.result.current).toEqual({ state: "idle", sessionId: null, alias: null });
  });
});

describe("inert React entry", () => {
  it("exports the same hooks, which do nothing", async () => {
    const inert = await import("../src/react/inert.js");
    const real = await import("../src/react/index.js");
    expect(Object.keys(inert).sort()).toEqual(Object.keys(real).sort());
    const h = makeHarness();
    const { result } = renderHook(() => {
      inert.useAppductTool({ name: "x", description: "d", handler: () => undefined } as ToolDefinition, undefined, { client: h.client });
      return inert.useAppductState(h.client);
    });
    expect(result.current).toEqual({ state: "idle", sessionId: null, alias: null });
    expect(h.client.getRegisteredTools()).toEqual([]);
  });
});
