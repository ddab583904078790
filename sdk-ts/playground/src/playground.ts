// The playground contract (§T14): five tools, one event and a call counter, registered the
// same way by every playground host so a test written against one runs against the others.

import type { AppductClient, Registration, ToolContext } from "@appduct/sdk";
import { z } from "zod";

/** Exact descriptor schemas (§T14.1): the zod schemas validate, these travel. */
export const SCHEMAS = {
  sumInput: { type: "object", properties: { a: { type: "number" }, b: { type: "number" } }, required: ["a", "b"], additionalProperties: false },
  sumOutput: { type: "object", properties: { total: { type: "number" } }, required: ["total"], additionalProperties: false },
  noInput: { type: "object", properties: {}, additionalProperties: false },
  countOutput: { type: "object", properties: { count: { type: "integer", minimum: 0 } }, required: ["count"], additionalProperties: false },
  doneOutput: { type: "object", properties: { done: { type: "boolean" } }, required: ["done"], additionalProperties: false },
  pingPayload: { type: "object", properties: { at: { type: "number" } }, required: ["at"] },
} as const;

export const DESCRIPTIONS = {
  sum: "Adds a and b and returns the total. Each call raises call_count by one.",
  call_count: "Returns how many times sum and slow_task have completed. Read-only.",
  reset_counter: "Sets the call counter back to zero. Destructive; repeating it changes nothing.",
  slow_task: "Runs for about 1.5 s and reports progress three times, then raises call_count by one.",
  throwing_tool: "Fails every time with tool_execution_error and changes nothing.",
  playground_ping: "Posted when the playground's ping control is pressed.",
} as const;

/**
 * Declared test cases (§T16, device.md §D18.3) that `appduct tools test` runs; the same as the
 * CLI's built-in playground. `reset_counter` is destructive, so its case runs only with
 * `--allow-destructive`; `slow_task` declares none.
 */
export const TEST_CASES = {
  sum: [
    {
      name: "adds two numbers",
      arguments: { a: 1, b: 2 },
      expect: { schema: { type: "object", required: ["total"], properties: { total: { const: 3 } } } },
    },
  ],
  call_count: [
    {
      name: "returns the count",
      arguments: {},
      expect: { schema: { type: "object", required: ["count"], properties: { count: { type: "integer" } } } },
    },
  ],
  reset_counter: [
    {
      name: "sets the count to zero",
      arguments: {},
      expect: { schema: { type: "object", required: ["count"], properties: { count: { const: 0 } } } },
    },
  ],
  throwing_tool: [{ name: "always fails", arguments: {}, expect: { error: "tool_execution_error" } }],
};

export const THROWING_TOOL_MESSAGE = "throwing_tool always fails on purpose.";

const SLOW_TASK_STEPS: readonly [number, string][] = [
  [0.33, "warming up"],
  [0.66, "almost there"],
  [1, "done"],
];
const SLOW_TASK_STEP_MS = 500;

export interface PlaygroundTimers {
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
  now(): number;
}

export interface Playground {
  /** The call counter: completed `sum` and `slow_task` calls since start (or the last reset). */
  readonly count: number;
  /** The ping control: posts `playground_ping {at: now}` and returns `at`. */
  ping(): number;
  /** Called with the new count whenever it changes; returns the unsubscribe function. */
  onCountChange(cb: (count: number) => void): () => void;
  /** Removes every tool and the event declaration. */
  dispose(): void;
}

export type PlaygroundClient = Pick<AppductClient, "registerTool" | "registerEvent" | "postEvent">;

const systemTimers: PlaygroundTimers = {
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
  now: () => Date.now(),
};

/** Resolves after `ms`, or as soon as `signal` aborts. */
function pause(timers: PlaygroundTimers, ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const onAbort = (): void => {
      timers.clearTimeout(handle);
      resolve();
    };
    const handle = timers.setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal.addEventListener("abort", onAbort, { once: true });
  });
}

/** Registers the contract on `client`, in the contract's order, and returns its controls. */
export function registerPlayground(client: PlaygroundClient, timers: PlaygroundTimers = systemTimers): Playground {
  let count = 0;
  const listeners = new Set<(count: number) => void>();
  const setCount = (next: number): void => {
    count = next;
    for (const cb of [...listeners]) cb(count);
  };
  const noInput = { schema: z.strictObject({}), jsonSchema: SCHEMAS.noInput };
  const countOutput = { schema: z.object({ count: z.number().int().min(0) }), jsonSchema: SCHEMAS.countOutput };

  const registrations: Registration[] = [
    client.registerTool({
      name: "sum",
      description: DESCRIPTIONS.sum,
      testCases: TEST_CASES.sum,
      inputSchema: { schema: z.strictObject({ a: z.number(), b: z.number() }), jsonSchema: SCHEMAS.sumInput },
      outputSchema: { schema: z.object({ total: z.number() }), jsonSchema: SCHEMAS.sumOutput },
      handler: ({ a, b }) => {
        const total = a + b;
        setCount(count + 1);
        return { total };
      },
    }),
    client.registerTool({
      name: "call_count",
      description: DESCRIPTIONS.call_count,
      testCases: TEST_CASES.call_count,
      inputSchema: noInput,
      outputSchema: countOutput,
      annotations: { readOnlyHint: true },
      group: "counter",
      handler: () => ({ count }),
    }),
    client.registerTool({
      name: "reset_counter",
      description: DESCRIPTIONS.reset_counter,
      testCases: TEST_CASES.reset_counter,
      inputSchema: noInput,
      outputSchema: countOutput,
      annotations: { destructiveHint: true, idempotentHint: true },
      group: "counter",
      handler: () => {
        setCount(0);
        return { count: 0 };
      },
    }),
    client.registerTool({
      name: "slow_task",
      description: DESCRIPTIONS.slow_task,
      inputSchema: noInput,
      outputSchema: { schema: z.object({ done: z.boolean() }), jsonSchema: SCHEMAS.doneOutput },
      timeoutMs: 5000,
      group: "diagnostics/progress",
      handler: async (_args: unknown, ctx: ToolContext) => {
        for (const [progress, message] of SLOW_TASK_STEPS) {
          await pause(timers, SLOW_TASK_STEP_MS, ctx.signal);
          // An aborted call stops at the next step and never counts.
          if (ctx.signal.aborted) throw new Error("slow_task was aborted");
          await ctx.reportProgress(progress, message);
        }
        setCount(count + 1);
        return { done: true };
      },
    }),
    client.registerTool({
      name: "throwing_tool",
      description: DESCRIPTIONS.throwing_tool,
      testCases: TEST_CASES.throwing_tool,
      inputSchema: noInput,
      annotations: { readOnlyHint: true },
      group: "diagnostics",
      handler: () => {
        throw new Error(THROWING_TOOL_MESSAGE);
      },
    }),
    client.registerEvent({ name: "playground_ping", description: DESCRIPTIONS.playground_ping, payloadSchema: SCHEMAS.pingPayload }),
  ];

  return {
    get count() {
      return count;
    },
    ping: () => {
      const at = timers.now();
      client.postEvent("playground_ping", { at });
      return at;
    },
    onCountChange: (cb) => {
      listeners.add(cb);
      return () => listeners.delete(cb);
    },
    dispose: () => {
      for (const registration of registrations) registration.remove();
    },
  };
}
