// Issue #17: the official MCP TypeScript client (@modelcontextprotocol/sdk) calls an app tool
// that answers with an image, through `appduct mcp`, twice: with the default image limit, then
// on a bridge started with APPDUCT_MCP_MAX_IMAGE_BYTES=100. Prints one JSON report line.
//
// usage: node image.mjs <appduct-binary> <state-dir> <home> <tool>

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [bin, stateDir, home, tool] = process.argv.slice(2);
if (!bin || !stateDir || !home || !tool) {
  process.stderr.write("usage: node image.mjs <appduct-binary> <state-dir> <home> <tool>\n");
  process.exit(64);
}

const report = {};
const call = async (name, env) => {
  const client = new Client({ name: `appduct-e2e-image-${name}`, version: "0.0.0" }, { capabilities: {} });
  await client.connect(
    new StdioClientTransport({ command: bin, args: ["--state-dir", stateDir, "mcp"], env: { HOME: home, ...env }, stderr: "pipe" }),
  );
  try {
    const result = await client.callTool({ name: "appduct_call_tool", arguments: { name: tool } });
    report[name] = { isError: result.isError ?? false, content: result.content, hasStructured: "structuredContent" in result };
  } finally {
    await client.close();
  }
};

try {
  await call("image", {});
  await call("tooLarge", { APPDUCT_MCP_MAX_IMAGE_BYTES: "100" });
} catch (error) {
  report.failure = String(error?.stack ?? error);
}
// stdout is a pipe, where writes are asynchronous: exit only once the report is flushed
// (an immediate exit cut it at 64 KiB).
process.stdout.write(`${JSON.stringify(report)}\n`, () => process.exit(0));
