#!/usr/bin/env node
// appduct-playground-node <link> [--pins <p,…>] [--transport web] (§T14.3): the SDK-backed
// device of the end-to-end tests. One JSON line on stdout per stateChange, sessionChange and
// error; a `ping` line on stdin posts playground_ping; stdin EOF disconnects and exits 0.

import { createInterface } from "node:readline";

import { registerPlayground } from "../src/playground.js";

const USAGE = "usage: appduct-playground-node <link> [--pins <pin,...>] [--transport web]";

interface Args {
  link: string;
  pins?: string[];
  transport?: "web";
}

function parseArgs(argv: string[]): Args | string {
  let link: string | undefined;
  const args: Partial<Args> = {};
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] as string;
    if (arg === "--pins") {
      const value = argv[++i];
      if (value === undefined) return "--pins needs a value";
      args.pins = value.split(",").map((p) => p.trim()).filter((p) => p !== "");
    } else if (arg === "--transport") {
      const value = argv[++i];
      if (value !== "web") return '--transport accepts only "web"';
      args.transport = "web";
    } else if (arg.startsWith("--")) {
      return `unknown option ${arg}`;
    } else if (link === undefined) {
      link = arg;
    } else {
      return "only one link may be given";
    }
  }
  if (link === undefined) return "a link is required";
  return { ...args, link };
}

const parsed = parseArgs(process.argv.slice(2));
if (typeof parsed === "string") {
  process.stderr.write(`${parsed}\n${USAGE}\n`);
  process.exit(64);
}

// The Node entry reads its switch at import: force it on for this process.
process.env.APPDUCT_ENABLED = "1";
const sdk = await import("@appduct/sdk/node");

const print = (line: Record<string, unknown>): void => {
  process.stdout.write(`${JSON.stringify(line)}\n`);
};
sdk.addAppductListener("stateChange", (e) => print({ listener: "stateChange", ...e }));
sdk.addAppductListener("sessionChange", (e) => print({ listener: "sessionChange", ...e }));
sdk.addAppductListener("error", (e) => print({ listener: "error", ...e }));

// Registered before any link arrives, so the first snapshot carries the whole contract.
const playground = registerPlayground(sdk.appductClient);
if (parsed.pins) sdk.configureAppduct({ pins: parsed.pins });

sdk.connect(parsed.link, parsed.transport ? { transport: parsed.transport } : undefined).catch((error: { code?: string; message?: string }) => {
  // A link refused before any claim reaches no listener: report it like one and stop.
  if (sdk.getAppductState() === "idle") {
    print({ listener: "error", phase: "bootstrap", code: error.code, message: error.message });
    process.exit(1);
  }
});

const input = createInterface({ input: process.stdin });
input.on("line", (line) => {
  if (line.trim() === "ping") playground.ping();
});
input.on("close", () => {
  void sdk.disconnect().then(() => process.exit(0));
});
