// Drives MCP tasks (docs/mcp.md §M19) of `appduct mcp` with the official MCP TypeScript client
// (@modelcontextprotocol/sdk, revision 2025-11-25) and prints one JSON report line on stdout
// for the Rust test to assert on.
//
// usage: node tasks-client.mjs <appduct-binary> <state-dir> <home>
//
// Expects one live playground session. Runs `slow_task` as a task to completion, starts a
// second one and cancels it, lists the tasks, and asks for a task of a built-in that forbids
// them.

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { CreateTaskResultSchema } from "@modelcontextprotocol/sdk/types.js";

const [bin, stateDir, home] = process.argv.slice(2);
if (!bin || !stateDir || !home) {
  process.stderr.write("usage: node tasks-client.mjs <appduct-binary> <state-dir> <home>\n");
  process.exit(64);
}

const report = {};
const transport = new StdioClientTransport({
  command: bin,
  args: ["--state-dir", stateDir, "mcp"],
  env: { HOME: home },
  stderr: "pipe",
});
const client = new Client({ name: "appduct-e2e-tasks-client", version: "0.0.0" }, { capabilities: {} });
const message = (m) => {
  switch (m.type) {
    case "result":
      return { type: m.type, result: m.result };
    case "error":
      return { type: m.type, error: String(m.error?.message ?? m.error) };
    default:
      return { type: m.type, task: m.task };
  }
};
const slowTask = { name: "appduct_call_tool", arguments: { name: "slow_task" } };

try {
  await client.connect(transport);
  report.protocolVersion = transport.protocolVersion ?? null;
  report.capabilities = client.getServerCapabilities();
  const tools = (await client.listTools()).tools;
  report.execution = Object.fromEntries(tools.map((t) => [t.name, t.execution ?? null]));

  // A task-augmented call to completion: created, polled with tasks/get, fetched with
  // tasks/result.
  const progress = [];
  report.completed = [];
  for await (const m of client.experimental.tasks.callToolStream(slowTask, undefined, {
    task: { ttl: 60000 },
    onprogress: (p) => progress.push(p),
  })) {
    report.completed.push(message(m));
  }
  report.progress = progress.length;

  // Another one, cancelled once it runs in the app (its first progress report; a cancel before
  // the daemon call is sent would leave the app nothing to see, §M12).
  let markRunning;
  const running = new Promise((resolve) => {
    markRunning = resolve;
  });
  const stream = client.experimental.tasks.callToolStream(slowTask, undefined, {
    task: { ttl: 60000 },
    onprogress: () => markRunning(true),
  });
  const created = await stream.next();
  const bound = new Promise((resolve) => setTimeout(() => resolve(false), 10000).unref());
  report.cancelRunning = await Promise.race([running, bound]);
  const taskId = created.value?.task?.taskId;
  report.cancelCreated = message(created.value);
  report.cancelAnswer = await client.experimental.tasks.cancelTask(taskId);
  report.afterCancel = await client.experimental.tasks.getTask(taskId);
  report.cancelStream = [];
  for await (const m of stream) {
    report.cancelStream.push(message(m));
  }
  try {
    await client.experimental.tasks.cancelTask(taskId);
    report.cancelAgain = "accepted";
  } catch (error) {
    report.cancelAgain = { code: error?.code, message: String(error?.message) };
  }

  report.list = (await client.experimental.tasks.listTasks()).tasks.map((t) => ({ taskId: t.taskId, status: t.status }));

  // A built-in other than appduct_call_tool never runs as a task.
  try {
    await client.request(
      { method: "tools/call", params: { name: "appduct_status", arguments: {}, task: {} } },
      CreateTaskResultSchema,
    );
    report.refused = "accepted";
  } catch (error) {
    report.refused = { code: error?.code, message: String(error?.message) };
  }
  // Without `task`, the same tool answers as always.
  const plain = await client.callTool({ name: "appduct_call_tool", arguments: { name: "sum", args: { a: 1, b: 2 } } });
  report.plain = plain.structuredContent ?? null;
} catch (error) {
  report.failure = String(error?.stack ?? error);
} finally {
  await client.close().catch(() => {});
  // Exit once the report is flushed (a pipe cuts an immediate exit's long line at 64 KiB).
  process.stdout.write(`${JSON.stringify({ step: "report", report })}\n`, () => process.exit(0));
}
