#!/usr/bin/env node
// The `appduct` command of the npm package: finds the native binary that npm installed as one of
// this package's optionalDependencies (one package per platform, selected by npm through their
// `os`, `cpu` and `libc` fields; nothing is downloaded after install) and runs it with the same
// arguments and stdio, passing on its exit status and forwarding signals.
"use strict";

const { spawn } = require("node:child_process");
const path = require("node:path");

const manifest = require("../package.json");

/** `musl` or `glibc` on Linux (the C library Node itself was built against), else "". */
function linuxLibc() {
  if (process.platform !== "linux") return "";
  const report = process.report && process.report.getReport();
  const header = typeof report === "string" ? JSON.parse(report).header : report && report.header;
  return header && header.glibcVersionRuntime ? "glibc" : "musl";
}

/** `@appduct/cli-<platform>-<arch>[-musl]`: the package that holds this machine's binary. */
function platformPackage() {
  const musl = linuxLibc() === "musl" ? "-musl" : "";
  return `@appduct/cli-${process.platform}-${process.arch}${musl}`;
}

function fail(message) {
  process.stderr.write(`appduct: ${message}\n`);
  process.exit(1);
}

function findBinary() {
  const pkg = platformPackage();
  const supported = Object.keys(manifest.optionalDependencies || {});
  if (!supported.includes(pkg)) {
    fail(
      `no prebuilt binary for ${process.platform} ${process.arch}${linuxLibc() ? ` (${linuxLibc()})` : ""}: ` +
        `this platform would need ${pkg}, which is not published. Prebuilt: ${supported.join(", ")}. ` +
        "Build from source instead: cargo install --locked appduct",
    );
  }
  let dir;
  try {
    dir = path.dirname(require.resolve(`${pkg}/package.json`));
  } catch {
    fail(
      `the package ${pkg}, which holds the appduct binary for this platform, is not installed. ` +
        "npm installs it as an optional dependency of appduct: reinstall appduct without " +
        "--omit=optional / --no-optional (and with the same platform as this machine), or install " +
        `${pkg}@${manifest.version} next to it.`,
    );
  }
  return path.join(dir, "bin", process.platform === "win32" ? "appduct.exe" : "appduct");
}

const binary = findBinary();
const child = spawn(binary, process.argv.slice(2), { stdio: "inherit" });

// A terminal sends Ctrl-C (SIGINT) and Ctrl-\ (SIGQUIT) to the whole foreground process group, so
// the binary receives them itself; forwarding as well would turn one Ctrl-C into two (a second
// Ctrl-C means "stop now" to `appduct tools call` and `appduct daemon run`). Without a terminal
// (an agent client spawning `appduct mcp`), a signal sent to this process is forwarded.
const onTerminal = Boolean(process.stdin.isTTY || process.stdout.isTTY || process.stderr.isTTY);
for (const signal of ["SIGINT", "SIGQUIT", "SIGTERM", "SIGHUP"]) {
  process.on(signal, () => {
    if (onTerminal && (signal === "SIGINT" || signal === "SIGQUIT")) return;
    child.kill(signal);
  });
}

child.on("error", (err) => fail(`could not run ${binary}: ${err.message}`));
child.on("exit", (code, signal) => {
  if (signal) {
    // End the same way the binary did, so a parent sees the signal rather than an exit code.
    process.removeAllListeners(signal);
    process.kill(process.pid, signal);
    return;
  }
  process.exit(code === null ? 1 : code);
});
