// Drives `appduct mcp` with the official MCP TypeScript client (@modelcontextprotocol/sdk), as an
// agent would, and prints one JSON report line on stdout for the Rust test to assert on.
//
// usage: node client.mjs <appduct-binary> <state-dir> <home>
//
// Expects one live playground session whose `reset_counter` has policy "prompt". In between it
// prints {"step":"listed"} and waits for one stdin line, so the test can attach a second device
// before `tools/list` is read again. Consent prompts are answered decline, accept, cancel; a
// second `appduct mcp` with a short consent timeout then gets a prompt that is never answered.

import { createInterface } from "node:readline";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { ElicitRequestSchema, ListRootsRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const [bin, stateDir, home] = process.argv.slice(2);
if (!bin || !stateDir || !home) {
  process.stderr.write("usage: node client.mjs <appduct-binary> <state-dir> <home>\n");
  process.exit(64);
}

const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const report = { notifications: [], elicitations: [] };
const emit = (value) => process.stdout.write(`${JSON.stringify(value)}\n`);

// The consent timeout of the second bridge (APPDUCT_TEST_CONSENT_TIMEOUT_MS, §M1).
const SHORT_CONSENT_TIMEOUT_MS = "300";
const bridge = (env = {}) =>
  new StdioClientTransport({
    command: bin,
    args: ["--state-dir", stateDir, "mcp"],
    env: { HOME: home, ...env },
    stderr: "pipe",
  });
const transport = bridge();
const client = new Client(
  { name: "appduct-e2e-official-client", version: "0.0.0" },
  { capabilities: { elicitation: {} } },
);
client.fallbackNotificationHandler = async (notification) => {
  report.notifications.push(notification.method);
};
// Answers consent prompts in order: decline, accept, then cancel (the user dismissed it).
const answers = ["decline", "accept", "cancel"];
client.setRequestHandler(ElicitRequestSchema, async (request) => {
  report.elicitations.push(request.params.message);
  const action = answers.shift() ?? "cancel";
  return action === "accept" ? { action, content: {} } : { action };
});

const text = (result) => result.content?.[0]?.text ?? null;
const errorOf = (result) => ({
  isError: result.isError ?? false,
  text: text(result),
  meta: result._meta?.["appduct/error"] ?? null,
  hasStructured: "structuredContent" in result,
});

try {
  await client.connect(transport);
  report.server = client.getServerVersion();
  report.capabilities = client.getServerCapabilities();

  const first = await client.listTools();
  report.tools = first.tools.map((t) => t.name);

  const listed = await client.callTool({ name: "appduct_list_tools", arguments: {} });
  report.listed = listed.structuredContent;
  const described = await client.callTool({ name: "appduct_describe_tool", arguments: { name: "sum" } });
  report.described = { isError: described.isError ?? false, text: text(described) };

  const progress = [];
  const slow = await client.callTool(
    { name: "appduct_call_tool", arguments: { name: "slow_task" } },
    undefined,
    { onprogress: (p) => progress.push(p) },
  );
  report.slow = { structured: slow.structuredContent, progress };

  const summed = await client.callTool({ name: "appduct_call_tool", arguments: { name: "sum", args: { a: 2, b: 5 } } });
  report.sum = { structured: summed.structuredContent, call: summed._meta?.["appduct/call"] ?? null };

  // A picture (§M5.1): the playground's counter_chart as an MCP image block; the PNG goes back
  // to the Rust test, which decodes it. A bridge with a 100-byte image limit sends the note.
  const chart = await client.callTool({ name: "appduct_call_tool", arguments: { name: "counter_chart" } });
  report.chart = { isError: chart.isError ?? false, content: chart.content, hasStructured: "structuredContent" in chart };
  const small = new Client({ name: "appduct-e2e-official-client-small", version: "0.0.0" }, { capabilities: {} });
  await small.connect(bridge({ APPDUCT_MCP_MAX_IMAGE_BYTES: "100" }));
  const tooLarge = await small.callTool({ name: "appduct_call_tool", arguments: { name: "counter_chart" } });
  report.chartTooLarge = { isError: tooLarge.isError ?? false, content: tooLarge.content };
  await small.close();

  // Error results pass through a client that validated output schemas after tools/list.
  report.errors = {
    thrown: errorOf(await client.callTool({ name: "appduct_call_tool", arguments: { name: "throwing_tool" } })),
    listBad: errorOf(await client.callTool({ name: "appduct_list_tools", arguments: { search: "x" } })),
    status: errorOf(await client.callTool({ name: "appduct_status", arguments: { cwd: "relative/dir" } })),
    notBuiltIn: errorOf(await client.callTool({ name: "sum", arguments: {} })),
  };

  // Consent through elicitation: declined, then accepted.
  report.declined = errorOf(await client.callTool({ name: "appduct_call_tool", arguments: { name: "reset_counter" } }));
  const accepted = await client.callTool({ name: "appduct_call_tool", arguments: { name: "reset_counter" } });
  report.accepted = accepted.structuredContent ?? null;
  report.dismissed = errorOf(await client.callTool({ name: "appduct_call_tool", arguments: { name: "reset_counter" } }));

  // A prompt nobody answers: the bridge gives up after its consent timeout and withdraws the
  // request (notifications/cancelled aborts this handler).
  //
  // This SDK ignores notifications/cancelled for request id 0 (typescript-sdk issue #2283:
  // `if (!requestId) return`), and rmcp numbers the bridge's requests from 0. Declaring roots
  // and calling appduct_status first makes roots/list request 0, so the prompt is request 1.
  const patient = new Client(
    { name: "appduct-e2e-official-client-timeout", version: "0.0.0" },
    { capabilities: { elicitation: {}, roots: {} } },
  );
  patient.setRequestHandler(ListRootsRequestSchema, async () => ({ roots: [] }));
  report.timeout = { prompts: 0 };
  let markWithdrawn;
  const withdrawn = new Promise((resolve) => {
    markWithdrawn = resolve;
  });
  patient.setRequestHandler(ElicitRequestSchema, (_request, extra) => {
    report.timeout.prompts += 1;
    return new Promise((resolve) => {
      extra.signal.addEventListener("abort", () => {
        markWithdrawn(true);
        resolve({ action: "accept", content: {} });
      });
    });
  });
  await patient.connect(bridge({ APPDUCT_TEST_CONSENT_TIMEOUT_MS: SHORT_CONSENT_TIMEOUT_MS }));
  await patient.callTool({ name: "appduct_status", arguments: {} });
  report.timeout.result = errorOf(
    await patient.callTool({ name: "appduct_call_tool", arguments: { name: "reset_counter" } }),
  );
  // Awaited (bounded) before close(), which would abort pending handlers itself: only the
  // bridge's notifications/cancelled can have aborted the handler by then.
  const bound = new Promise((resolve) => setTimeout(() => resolve(false), 5000).unref());
  report.timeout.withdrawn = await Promise.race([withdrawn, bound]);
  await patient.close();

  // Cancel: abort at the first progress report.
  const controller = new AbortController();
  let cancelError = null;
  try {
    await client.callTool(
      { name: "appduct_call_tool", arguments: { name: "slow_task" } },
      undefined,
      { signal: controller.signal, onprogress: () => controller.abort("enough") },
    );
  } catch (error) {
    cancelError = { name: String(error?.name), message: String(error?.message ?? error) };
  }
  report.cancelled = cancelError;

  // A second device claims while we wait; tools/list must not change.
  emit({ step: "listed" });
  await lines.next();
  const again = await client.listTools();
  report.toolsUnchanged = JSON.stringify(again) === JSON.stringify(first);
} catch (error) {
  report.failure = String(error?.stack ?? error);
} finally {
  await client.close().catch(() => {});
  // Exit once the report is flushed: stdout is a pipe, where an immediate exit cuts a long
  // line at 64 KiB.
  process.stdout.write(`${JSON.stringify({ step: "report", report })}\n`, () => process.exit(0));
}
