// Drives `/mcp` of the daemon's loopback HTTP server (docs/http.md §H7) with the official MCP
// TypeScript client (@modelcontextprotocol/sdk) connected by URL, as an agent client would, and
// prints one JSON report line on stdout for the Rust test to assert on.
//
// usage: node http-client.mjs <url> <token>
//
// Expects one live playground session whose `reset_counter` has policy "prompt".

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const [url, token] = process.argv.slice(2);
if (!url || !token) {
  process.stderr.write("usage: node http-client.mjs <url> <token>\n");
  process.exit(64);
}

const report = { elicitations: [] };
const transport = (bearer) =>
  new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${bearer}` } },
  });
const http = transport(token);
const client = new Client(
  { name: "appduct-e2e-http-client", version: "0.0.0" },
  { capabilities: { elicitation: {} } },
);
client.setRequestHandler(ElicitRequestSchema, async (request) => {
  report.elicitations.push(request.params.message);
  return { action: "accept", content: {} };
});

const errorOf = (result) => ({
  isError: result.isError ?? false,
  text: result.content?.[0]?.text ?? null,
  meta: result._meta?.["appduct/error"] ?? null,
});

try {
  await client.connect(http);
  report.sessionId = http.sessionId ?? null;
  report.protocolVersion = http.protocolVersion ?? null;
  report.server = client.getServerVersion();
  report.capabilities = client.getServerCapabilities();
  report.tools = (await client.listTools()).tools.map((t) => t.name);

  const listed = await client.callTool({ name: "appduct_list_tools", arguments: {} });
  report.listed = listed.structuredContent;
  const summed = await client.callTool({ name: "appduct_call_tool", arguments: { name: "sum", args: { a: 2, b: 5 } } });
  report.sum = { structured: summed.structuredContent, call: summed._meta?.["appduct/call"] ?? null };

  const progress = [];
  const slow = await client.callTool(
    { name: "appduct_call_tool", arguments: { name: "slow_task" } },
    undefined,
    { onprogress: (p) => progress.push(p.progress) },
  );
  report.slow = { structured: slow.structuredContent, progress };

  // Consent through elicitation over the session's SSE streams.
  const accepted = await client.callTool({ name: "appduct_call_tool", arguments: { name: "reset_counter" } });
  report.accepted = accepted.structuredContent ?? errorOf(accepted);

  // Cancel: abort at the first progress report (notifications/cancelled over a POST).
  const controller = new AbortController();
  try {
    await client.callTool(
      { name: "appduct_call_tool", arguments: { name: "slow_task" } },
      undefined,
      { signal: controller.signal, onprogress: () => controller.abort("enough") },
    );
    report.cancelled = null;
  } catch (error) {
    report.cancelled = { name: String(error?.name), message: String(error?.message ?? error) };
  }

  // A wrong token is refused before MCP: the SDK surfaces the 401.
  const intruder = new Client({ name: "appduct-e2e-intruder", version: "0.0.0" }, { capabilities: {} });
  try {
    await intruder.connect(transport("wrong-token"));
    report.wrongToken = "connected";
  } catch (error) {
    report.wrongToken = String(error?.message ?? error);
  }

  // DELETE ends the session; its id is then unknown (404).
  const ended = http.sessionId;
  await http.terminateSession();
  const after = await fetch(url, {
    method: "POST",
    headers: {
      Authorization: `Bearer ${token}`,
      "Content-Type": "application/json",
      Accept: "application/json, text/event-stream",
      "Mcp-Session-Id": ended ?? "",
      "MCP-Protocol-Version": report.protocolVersion ?? "2025-11-25",
    },
    body: JSON.stringify({ jsonrpc: "2.0", id: 99, method: "tools/list" }),
  });
  report.afterDelete = after.status;
} catch (error) {
  report.failure = String(error?.stack ?? error);
} finally {
  await client.close().catch(() => {});
  process.stdout.write(`${JSON.stringify({ step: "report", report })}\n`, () => process.exit(0));
}
