#!/usr/bin/env node
// The `appduct-sdk` command (§T17): `appduct-sdk snapshot <module> …`.

import { routeStdoutToStderr, runSnapshot } from "./snapshot.js";

const USAGE = `Usage: appduct-sdk snapshot <module> [--export <name>] [--out <file> | --check <file>] [--json]

Run "appduct-sdk snapshot --help" for details.
`;

async function main(argv: readonly string[]): Promise<number> {
  const [command, ...rest] = argv;
  if (command === "snapshot") {
    // The module may keep printing later (timers): its stdout stays routed to stderr until
    // exit, and only the command's own output uses the real stdout.
    const write = process.stdout.write.bind(process.stdout);
    routeStdoutToStderr();
    const run = await runSnapshot(rest);
    process.stderr.write(run.stderr);
    return await new Promise<number>((done) => {
      // Exit from the write callback: a pipe may take the output in several pieces.
      write(run.stdout, () => done(run.exitCode));
    });
  }
  if (command === "--help" || command === "-h" || command === "help") {
    process.stdout.write(USAGE);
    return 0;
  }
  process.stderr.write(`${command === undefined ? "a command is required" : `unknown command ${command}`}\n${USAGE}`);
  return 64;
}

// The module under snapshot may hold timers or sockets open: exit explicitly.
main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`${error instanceof Error ? error.stack ?? error.message : String(error)}\n`);
    process.exit(1);
  },
);
